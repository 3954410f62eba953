"""Absolute values of rank-1 tensors, kept from an OpenVINO rewrite that drops them wrongly.

OpenVINO 2026.4's ``AbsSinking`` (in the shape-subgraph simplification the CPU plugin runs
while compiling) removes an ``Abs`` whose output has rank 1 when bound evaluation says its input
is never negative, and for a value computed from constants, or from a ShapeOf, that evaluation
is wrong: ``(w - 3).abs() + x`` over a 1-D weight too large for fxvino to fold in torch (300,000
floats) differed from eager by up to 15.2, and ``|[3, 100] - shape(x)|`` over a (5, 7) input
gave ``[-2, 93]``. It dropped the Abs after Subtract, Negative, Multiply, Select, Minimum,
Concat, Convert and reshapes, in f32, f16, i32 and i64, and left Abs of rank 0 or of rank 2 and
above alone; constant folding on its own computes them right.

So, once a graph is lowered, each ``Abs`` of rank 1 is computed as rank 2, ``Reshape(Abs(
Reshape(x, [1, -1])), [-1])``, which the rewrite does not match. The reshapes move no data.
"""

from __future__ import annotations

import openvino as ov
import openvino.opset16 as ops

from fxvino.lowering import helpers as h


def keep_rank1_abs(model: ov.Model) -> int:
    """Rewrites ``model`` in place (see the module doc); returns how many Abs it rewrote."""
    rewritten = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Abs" or node.get_output_partial_shape(0).rank != ov.Dimension(1):
            continue
        x = node.input_value(0)
        as_row = ops.reshape(x, h.i64([1, -1]), special_zero=False)
        node.output(0).replace(ops.reshape(ops.abs(as_row), h.i64([-1]), special_zero=False).output(0))
        rewritten += 1
    if rewritten:
        model.validate_nodes_and_infer_types()
    return rewritten
