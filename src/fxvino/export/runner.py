"""Calling a compiled IR with the model's own arguments, on fxvino's runtime.

The signature binds a call to the IR's input tensors and rebuilds the result's structure; in
between, the compiled model runs through ``runtime.compiled_partition.CompiledPartition``, the
call path ``torch.compile`` partitions use (pooled infer requests, inputs handed over without a
copy, outputs copied or lent). No tracing, no guards: a call is a check of its inputs and one
inference. An output that is an input returned unchanged is no output of the IR (ports.py): the
caller's tensor goes in its place, or a copy of it where the model copied it.
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
        position = {leaf.name: i for i, leaf in enumerate(signature.tensor_inputs)}
        outputs = []
        # Outputs that are inputs returned unchanged (the IR has no Result for them: ports.py):
        # (their place in the result, the input tensor's position, whether to copy it).
        self.passed: list[tuple[int, int, bool]] = []
        for k, leaf in enumerate(signature.outputs):
            if leaf.kind == "input":
                self.passed.append((k, position[leaf.source], leaf.copy))
            elif leaf.kind == "constant":
                outputs.append(OutputSpec("python", value=leaf.value))
            else:
                outputs.append(OutputSpec(leaf.kind, index=leaf.port, dtype=leaf.dtype))
        self.partition = CompiledPartition(compiled, inputs, outputs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors = self.signature.bind(args, kwargs)
        values = self.partition(*tensors)
        if self.passed:
            values = list(values)
            for k, i, copy in self.passed:  # in increasing k: each lands at its own place
                values.insert(k, tensors[i].clone() if copy else tensors[i])
        return self.signature.rebuild(values)
