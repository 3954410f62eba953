"""Scalars broadcast to full-size tensors, kept from becoming full-size constants.

Lowerings of ``zeros_like``, ``full_like``, ``empty`` and friends broadcast a scalar to a shape.
When that shape is static, OpenVINO folds the Broadcast into a constant of the whole size, which
the compiled model holds for its life: BERT-base's training graphs held twelve 6 MB
``where(..., 0)`` fillers each and a 92 MB zero tensor for the embedding gradient (GPT-2's is
154 MB), on top of the memory that eager PyTorch needs. So, once a graph is lowered:

- an elementwise consumer that already gets the full shape from another input takes the scalar
  itself (numpy broadcasting does the rest, and reading a scalar costs nothing);
- where the full tensor is needed (the data of a scatter, a graph output), the scalar is made a
  run-time value, so the Broadcast runs on each call instead of being folded.
"""

from __future__ import annotations

import math

import openvino as ov
import openvino.opset16 as ops

from fxvino.lowering import helpers as h

# Smaller broadcasts are left alone: folding them costs little memory.
MIN_BYTES = 1 << 20

# Ops that broadcast their inputs numpy-style (Select's condition included).
_ELEMENTWISE = frozenset(
    {
        *("Select", "Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "Power"),
        *("SquaredDifference", "FloorMod", "Mod", "Equal", "NotEqual", "Less", "LessEqual"),
        *("Greater", "GreaterEqual", "LogicalAnd", "LogicalOr", "LogicalXor"),
        *("BitwiseAnd", "BitwiseOr", "BitwiseXor"),
    }
)


def keep_scalar_broadcasts_small(model: ov.Model) -> None:
    """Rewrites ``model`` in place (see the module doc)."""
    always_true, looked = None, False  # the run-time condition, made at most once
    changed = False
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Broadcast":
            continue
        value = op.input_value(0)
        out = op.output(0)
        shape = out.get_partial_shape()
        if (
            value.get_node().get_type_name() != "Constant"
            or not value.get_partial_shape().is_static
            or math.prod(value.get_shape()) != 1
            or not shape.is_static
            or math.prod(out.get_shape()) * out.get_element_type().size < MIN_BYTES
        ):
            continue
        for target in list(out.get_target_inputs()):
            if _takes_a_scalar(target, out):
                target.replace_source_output(value)
                changed = True
        if out.get_target_inputs():
            if not looked:
                always_true, looked = h.always_true(model), True
            if always_true is not None:
                op.input(0).replace_source_output(ops.select(always_true, value, value).output(0))
                changed = True
    if changed:
        model.validate_nodes_and_infer_types()


def _takes_a_scalar(target: ov.Input, full: ov.Output) -> bool:
    """Whether ``target``'s node gives the same result with a scalar in place of ``full``."""
    user = target.get_node()
    if user.get_type_name() not in _ELEMENTWISE or user.get_output_size() != 1:
        return False
    if user.get_attributes().get("auto_broadcast", "numpy") != "numpy":
        return False
    if user.output(0).get_partial_shape() != full.get_partial_shape():
        return False
    # Another input must carry the full shape on its own.
    return any(
        i.get_index() != target.get_index() and i.get_partial_shape() == full.get_partial_shape() for i in user.inputs()
    )
