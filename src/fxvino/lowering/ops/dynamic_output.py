"""Data-dependent results: ``nonzero``, ``.item()`` and the checks Dynamo emits beside them.

With ``torch._dynamo.config.capture_dynamic_output_shape_ops`` (``nonzero``, boolean-mask
indexing) or ``capture_scalar_outputs`` (``.item()``), a graph holds sizes and scalars known
only at run time (unbacked symbols ``u0``). OpenVINO computes them like any dynamic dimension:
NonZero has a data-dependent output shape, and the runtime reads every output's shape after
inference. Dynamo's range checks on those symbols (``_assert_scalar`` of ``u0 >= 0`` ...) hold by
construction for the values OpenVINO computes, so they lower to nothing.
"""

from __future__ import annotations

import operator

import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten.nonzero.default)
def nonzero(ctx, node, x):
    if h.rank(x) == 0:  # a 0-d input is one element at no coordinates: [1, 0] or [0, 0]
        x = h.unsqueeze(x, 0)
        found = ops.non_zero(x, "i64").output(0)  # [1, n]
        return h.transpose(ops.slice(found, *(h.const(v, torch.int64) for v in ([0], [0], [1], [0]))), [1, 0])
    return h.transpose(ops.non_zero(x, "i64").output(0), [1, 0])


@lowers(aten._local_scalar_dense.default)
def local_scalar_dense(ctx, node, x):
    """``.item()``: the element as a 0-d value (i64 for ints and bools, f64 for floats), which
    the graph uses as a symbolic int/float or returns to Python."""
    dtype = torch.float64 if h.is_float(h.dtype_of(x)) else torch.int64
    return h.cast(h.reshape(x, []), dtype)


def _no_op(ctx, node, *args, **kwargs):
    return None


for _check in (
    aten._assert_scalar.default,
    aten.sym_constrain_range_for_size.default,
    aten.sym_constrain_range.default,
    aten._assert_async.msg,
):
    lowers(_check)(_no_op)


def _sym_compare(builder):
    def lower(ctx, node, a, b):
        dtype = (
            torch.float64
            if any(isinstance(h.meta(n), (float, torch.SymFloat)) for n in node.args if isinstance(n, torch.fx.Node))
            or isinstance(a, float)
            or isinstance(b, float)
            else torch.int64
        )
        return builder(h.cast(a, dtype), h.cast(b, dtype)).output(0)

    return lower


def _sym_bool(node: torch.fx.Node) -> str | None:
    ok = isinstance(h.meta(node), (bool, torch.SymBool))
    return None if ok else "only comparisons of symbolic ints/floats are lowered"


for _op, _builder in {
    operator.ge: ops.greater_equal,
    operator.gt: ops.greater,
    operator.le: ops.less_equal,
    operator.lt: ops.less,
    operator.eq: ops.equal,
    operator.ne: ops.not_equal,
}.items():
    lowers(_op, validator=_sym_bool)(_sym_compare(_builder))


@lowers(torch.sym_ite)
def sym_ite(ctx, node, cond, a, b):
    """``torch.sym_ite(cond, a, b)``: Dynamo's symbolic if-then-else (``max(u0, 0)`` for a size)."""
    dtype = torch.float64 if any(isinstance(v, float) for v in (a, b)) else torch.int64
    if h.is_output(a) and h.is_output(b) and h.dtype_of(a) == h.dtype_of(b):
        dtype = h.dtype_of(a)
    return ops.select(h.cast(cond, torch.bool), h.cast(a, dtype), h.cast(b, dtype)).output(0)


@lowers(aten.repeat_interleave.Tensor)
def repeat_interleave(ctx, node, repeats, *, output_size=None):
    """``repeat_interleave(repeats)``: index ``i`` repeated ``repeats[i]`` times (a data-dependent
    length). Output element ``j`` is the number of cumulative counts at or below ``j``."""
    counts = h.cast(repeats, torch.int64)
    ends = ops.cumsum(counts, h.const(0, torch.int64)).output(0)
    total = output_size if output_size is not None else ops.reduce_sum(counts, h.const([0], torch.int64), False)
    j = h.arange(total if isinstance(total, int) else total.output(0) if hasattr(total, "output") else total)
    below = ops.less_equal(h.unsqueeze(ends, 0), h.unsqueeze(j, 1))
    return ops.reduce_sum(h.cast(below.output(0), torch.int64), h.const([1], torch.int64), False).output(0)
