"""Scalars broadcast to full-size tensors, kept from becoming full-size constants.

Lowerings of ``zeros_like``, ``full_like``, ``empty`` and friends broadcast a scalar to a shape.
When that shape is static, OpenVINO folds the Broadcast into a constant of the whole size, which
the compiled model holds for its life: BERT-base's training graphs held twelve 6 MB
``where(..., 0)`` fillers each and a 92 MB zero tensor for the embedding gradient (GPT-2's is
154 MB), on top of the memory that eager PyTorch needs. So, once a graph is lowered:

- an elementwise consumer that already gets the full shape from another input takes the scalar
  itself (numpy broadcasting does the rest, and reading a scalar costs nothing);
- where the full tensor is needed (the data of a scatter, a graph output), the scalar is made a
  run-time value, so the Broadcast runs on each call instead of being folded;
- a sum-scatter into zeros that is then added to a tensor of its shape scatters into that tensor
  instead, and the zeros go. A model whose embedding is tied to its output layer (GPT-2) sums
  the two gradients: the embedding's, a scatter into 154 MB of zeros, was held three times over
  (zeros, scatter, sum) at the end of its backward.
"""

from __future__ import annotations

import math

import numpy as np
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
        if _scatter_into_addend(op):
            changed = True
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


def _scatter_into_addend(zeros: ov.Node) -> bool:
    """Whether ``zeros`` (a broadcast scalar) was the base of a sum-scatter whose only reader adds
    a tensor of the same shape and type, now rewired to scatter into that tensor instead."""
    readers = list(zeros.output(0).get_target_inputs())
    if len(readers) != 1 or readers[0].get_index() != 0 or np.any(zeros.input_value(0).get_node().get_data()):
        return False
    scatter = readers[0].get_node()
    if scatter.get_type_name() != "ScatterNDUpdate" or scatter.get_attributes().get("reduction") != "sum":
        return False
    users = list(scatter.output(0).get_target_inputs())
    if len(users) != 1 or users[0].get_node().get_type_name() != "Add":
        return False
    add = users[0].get_node()
    addend = add.input_value(1 - users[0].get_index())
    if addend.get_partial_shape() != zeros.get_output_partial_shape(0) or addend.get_element_type() != (
        zeros.get_output_element_type(0)
    ):
        return False
    into = ops.scatter_nd_update(addend, scatter.input_value(1), scatter.input_value(2), "sum")
    add.output(0).replace(into.output(0))
    return True
