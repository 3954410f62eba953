"""Running a compiled OpenVINO partition from PyTorch.

The call path is kept short: inputs are wrapped without copies, an infer request is taken
from a pool (so concurrent callers never share one), and outputs are copied into fresh torch
tensors so a result never changes when the model runs again.
"""

from __future__ import annotations

import queue
from collections.abc import Sequence
from typing import Any

import openvino as ov
import torch

from fxvino.lowering.convert import InputSpec, OutputSpec
from fxvino.lowering.types import TORCH_TO_NUMPY_CARRIER, to_ov_tensor


class CompiledPartition:
    """A callable over a partition's runtime arguments, returning its outputs as a tuple."""

    def __init__(self, compiled: ov.CompiledModel, inputs: Sequence[InputSpec], outputs: Sequence[OutputSpec]):
        self.compiled = compiled
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self._pool: queue.SimpleQueue[ov.InferRequest] = queue.SimpleQueue()
        self._pool.put(compiled.create_infer_request())

    def _request(self) -> ov.InferRequest:
        try:
            return self._pool.get_nowait()
        except queue.Empty:
            return self.compiled.create_infer_request()

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        request = self._request()
        # ov.Tensor(shared_memory=True) does not own its memory: ``alive`` keeps every buffer
        # we hand over (contiguous copies included) referenced until inference is done.
        alive = []
        try:
            for i, spec in enumerate(self.inputs):
                a = args[spec.position]
                if spec.kind == "tensor":
                    a = a if a.is_contiguous() else a.contiguous()
                else:
                    a = torch.tensor(int(a))
                alive.append(a)
                request.set_input_tensor(i, to_ov_tensor(a))
            request.infer()
            return tuple(_take(request, spec) for spec in self.outputs)
        finally:
            self._pool.put(request)


def _take(request: ov.InferRequest, spec: OutputSpec) -> Any:
    if spec.kind == "python":
        return spec.value
    data = request.get_output_tensor(spec.index).data
    if spec.kind == "symint":
        return int(data)
    out = torch.from_numpy(data.copy())
    if spec.dtype in TORCH_TO_NUMPY_CARRIER:
        out = out.view(spec.dtype)
    return out
