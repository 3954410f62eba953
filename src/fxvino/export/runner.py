"""Calling a compiled IR with the model's own arguments, on fxvino's runtime.

The signature binds a call to the IR's input tensors and rebuilds the result's structure; in
between, the compiled model runs through ``runtime.compiled_partition.CompiledPartition``, the
call path ``torch.compile`` partitions use (pooled infer requests, inputs handed over without a
copy, outputs copied or lent). No tracing, no guards: a call is a check of its inputs and one
inference.
"""

from __future__ import annotations

from typing import Any

import openvino as ov

from fxvino.lowering.convert import InputSpec, OutputSpec
from fxvino.runtime.compiled_partition import CompiledPartition

from .signature import Signature


class Runner:
    """A compiled IR as a callable over torch tensors, structured as ``signature`` says."""

    def __init__(self, compiled: ov.CompiledModel, signature: Signature):
        self.compiled = compiled
        self.signature = signature
        inputs = [InputSpec("tensor", position) for position, _ in enumerate(signature.tensor_inputs)]
        outputs = []
        for leaf in signature.outputs:
            if leaf.kind == "constant":
                outputs.append(OutputSpec("python", value=leaf.value))
            else:
                outputs.append(OutputSpec(leaf.kind, index=leaf.port, dtype=leaf.dtype))
        self.partition = CompiledPartition(compiled, inputs, outputs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.signature.rebuild(self.partition(*self.signature.bind(args, kwargs)))
