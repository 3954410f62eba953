"""Infinities of bf16 constants, given back at run time where the CPU plugin clamps them.

On a CPU without bf16 kernels the plugin converts a bf16 graph to f32 as it compiles, and its
conversion of constants clamps +-inf to +-FLT_MAX (OpenVINO 2026.4; f16 and f32 constants keep
theirs; openvinotoolkit/openvino#35484): ``x + w`` with ``w`` holding -inf and ``x`` inf gave inf
instead of NaN, ``exp(w) * x`` gave +-FLT_MAX * x. The clamp is told apart from a real value
by its size: bf16's largest finite value is 3.3895e38, below FLT_MAX (3.4028e38), so in the
converted graph a bf16 value beyond it can only be a clamped infinity.

So where the device widens bf16, each value computed from a bf16 Constant that holds an
infinity is guarded where it leaves the constant part of the graph (at its first reader that is
not constant, so all of the constant part still folds): ``Select(|v| > 3.3895e38, v * inf, v)``,
with ``inf`` computed at run time (``1 / 0`` of a zero OpenVINO cannot fold), which the
conversion cannot clamp. The guard costs one elementwise pass over the value per call, and only
graphs with such a constant have it. An infinity that folding makes out of finite constants
(``exp`` of 100 in bf16) is not guarded.
"""

from __future__ import annotations

from collections.abc import Collection

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.constant_values import ConstantValues

BF16_MAX = torch.finfo(torch.bfloat16).max


def keep_bf16_infinities(model: ov.Model, widened: Collection[torch.dtype]) -> int:
    """Rewrites ``model`` in place (see the module doc); returns how many values it guarded."""
    if torch.bfloat16 not in widened:
        return 0
    constant = ConstantValues()
    tainted: set[ov.Node] = set()  # computed from constants, one of them a bf16 holding inf
    frontier: list[ov.Output] = []
    for node in model.get_ordered_ops():
        if not constant(node):
            continue
        if node.get_type_name() == "Constant":
            if node.get_output_element_type(0) == ov.Type.bf16 and _holds_infinity(node.output(0)):
                tainted.add(node)
        elif any(node.input_value(i).get_node() in tainted for i in range(node.get_input_size())):
            tainted.add(node)
        if node not in tainted:
            continue
        for output in node.outputs():
            readers = output.get_target_inputs()
            if output.get_element_type() == ov.Type.bf16 and any(not constant(r.get_node()) for r in readers):
                frontier.append(output)
    if not frontier:
        return 0
    always = h.always_true(model)
    if always is None:  # no input to make a run-time value of (static or dynamic)
        return 0
    zero = ops.convert(ops.logical_not(always), ov.Type.bf16)
    infinity = ops.divide(h.const(1.0, torch.bfloat16), zero).output(0)
    for value in frontier:
        readers = [r for r in value.get_target_inputs() if not constant(r.get_node())]
        clamped = ops.greater(ops.abs(value), h.const(BF16_MAX, torch.bfloat16))
        guarded = ops.select(clamped, ops.multiply(value, infinity), value).output(0)
        for reader in readers:
            reader.replace_source_output(guarded)
    model.validate_nodes_and_infer_types()
    return len(frontier)


def _holds_infinity(value: ov.Output) -> bool:
    data = h.constant_value(value)
    return data is not None and bool(torch.isinf(data).any())
