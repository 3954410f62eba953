"""Data-dependent results: ``nonzero``, ``masked_select``, ``unique``, ``.item()`` and the
checks Dynamo emits beside them.

With ``torch._dynamo.config.capture_dynamic_output_shape_ops`` (``nonzero``, boolean-mask
indexing) or ``capture_scalar_outputs`` (``.item()``), a graph holds sizes and scalars known
only at run time (unbacked symbols ``u0``). OpenVINO computes them like any dynamic dimension:
NonZero has a data-dependent output shape, and the runtime reads every output's shape after
inference. Dynamo's range checks on those symbols (``_assert_scalar`` of ``u0 >= 0`` ...) hold by
construction for the values OpenVINO computes, so they lower to nothing.
"""

from __future__ import annotations

import operator

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import eager_checks
from fxvino.lowering import helpers as h
from fxvino.lowering.ops.sorting import sorted_along
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
):
    lowers(_check)(_no_op)


@lowers(aten._assert_async.msg)
def assert_async(ctx, node, condition, message):
    """A tensor condition PyTorch's decompositions assert (``one_hot``'s classes in range): one of
    the graph's checks, so a false one raises torch's error (eager_checks.py)."""
    eager_checks.holds(ctx, condition)


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


@lowers(aten.nonzero_static.default)
def nonzero_static(ctx, node, x, *, size, fill_value=-1):
    """``nonzero`` cut or padded to ``size`` rows (padding rows hold ``fill_value``): a static
    shape, so the rows past those found are a constant block appended before the cut."""
    found = nonzero(ctx, node, x)  # [n, rank]
    pad = h.const(np.full((size, h.rank(x)), fill_value, dtype=np.int64), torch.int64)
    both = ops.concat([found, pad], 0).output(0)
    zero, one = h.const([0], torch.int64), h.const([1], torch.int64)
    return ops.slice(both, zero, h.const([size], torch.int64), one, zero).output(0)


@lowers(aten.masked_select.default)
def masked_select(ctx, node, x, mask):
    """The elements of ``x`` where ``mask`` is true, in row-major order, after broadcasting the
    two together (a data-dependent length)."""
    target = h.broadcast_shape(x, mask)
    flat_x = h.reshape(ops.broadcast(x, target).output(0), [-1])
    flat_mask = h.reshape(ops.broadcast(mask, target).output(0), [-1])
    where = h.reshape(ops.non_zero(flat_mask, "i64").output(0), [-1])
    return ops.gather(flat_x, where, h.const(0, torch.int64)).output(0)


def _runs(values: ov.Output, order: ov.Output | None, like: ov.Output, flags: tuple[bool, bool]) -> tuple:
    """(first value of each run of equal elements, inverse, counts) of the 1-D ``values``.

    A run starts where an element differs from the one before it, so NaN (unequal to itself)
    are runs of one, and -0.0 joins a run of 0.0, as in torch's CPU kernels. ``order`` maps the
    position in ``values`` to the input's flat position (a sort's permutation; None: the same),
    so the inverse (each input element's run number) is scattered back through it and shaped
    like ``like``. Unrequested results (``flags``: inverse, counts) are empty, as torch's are.
    """
    zero = h.const(0, torch.int64)
    n = h.reshape(h.dim(values, 0), [1])
    before = ops.pad(values, h.const([1], torch.int64), h.const([-1], torch.int64), "edge").output(0)
    first = ops.equal(h.arange(h.dim(values, 0)), zero).output(0)  # equal to "before" unless NaN
    starts_run = ops.logical_or(first, ops.not_equal(values, before)).output(0)
    starts = h.reshape(ops.non_zero(starts_run, "i64").output(0), [-1])
    unique = ops.gather(values, starts, zero).output(0)
    empty = h.const(np.zeros(0, dtype=np.int64), torch.int64)
    inverse = counts = empty
    if flags[0]:
        run = ops.subtract(ops.cumsum(h.cast(starts_run, torch.int64), zero), h.const(1, torch.int64)).output(0)
        if order is not None:
            run = ops.scatter_elements_update(run, order, run, zero).output(0)
        inverse = ops.reshape(run, h.shape_of(like), False).output(0)
    if flags[1]:
        ends = ops.concat([starts, n], 0).output(0)
        m = h.reshape(h.dim(starts, 0), [1])
        one = h.const([1], torch.int64)
        counts = ops.subtract(
            ops.slice(ends, one, ops.add(m, one), one), ops.slice(ends, h.const([0], torch.int64), m, one)
        ).output(0)
    return unique, inverse, counts


def _empty_input(node: torch.fx.Node) -> str | None:
    x = h.meta(node.args[0])
    return "an input with no elements" if x.numel() == 0 else None


@lowers(aten._unique2.default, validator=_empty_input)
def unique(ctx, node, x, sorted=True, return_inverse=False, return_counts=False):
    """``torch.unique`` over the flattened input: a stable sort (NaN last, as torch's), then the
    runs of equal values. torch's CPU kernel sorts whatever ``sorted`` says, and so does this."""
    flat = h.reshape(x, [-1])
    values, order = sorted_along(flat, 0, False)
    return _runs(values, order, x, (return_inverse, return_counts))


def _consecutive_ok(node: torch.fx.Node) -> str | None:
    dim = node.kwargs.get("dim", node.args[3] if len(node.args) > 3 else None)
    return "unique_consecutive along a dim" if dim is not None else _empty_input(node)


@lowers(aten.unique_consecutive.default, validator=_consecutive_ok)
def unique_consecutive(ctx, node, x, return_inverse=False, return_counts=False, dim=None):
    """``torch.unique_consecutive`` over the flattened input: its runs of equal values."""
    return _runs(h.reshape(x, [-1]), None, x, (return_inverse, return_counts))
