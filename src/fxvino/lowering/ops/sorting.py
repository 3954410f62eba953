"""Sorting and selection: argmax/argmin, max/min (with and without dim), topk, sort, cumsum.

NaN: torch ranks NaN above every number (it propagates through max/min and argmax/argmin, and
sorts last ascending, first descending), while OpenVINO's ``TopK`` and ``ReduceMax`` give
arbitrary results on NaN, so every lowering masks NaN out and handles it explicitly.

Ties: argmax/argmin and max.dim/min.dim return the first index of the extreme, computed with
reductions (``ReduceMin`` of the positions that hold it). ``TopK(stable=True)`` is quadratic on
the CPU plugin (~1 s for one row of 16k), so sorts use the unstable ``TopK`` and then reorder
ties by index with a second ``TopK`` on a unique int32 key ``(run of equal values, index)``;
that key fits int32 up to :data:`_STABLE_LIMIT` elements. torch's topk leaves the order of
ties unspecified, so topk uses the unstable ``TopK`` only.
"""

from __future__ import annotations

import math

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import eager_checks
from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers
from fxvino.utils.dtypes import SIXTEEN_BIT_FLOATS

aten = torch.ops.aten

# Largest sort length whose tie-break key run * n + index, below (n + 1) * n, fits int32.
_STABLE_LIMIT = 46340


def _topk(key: ov.Output, k, axis: int, mode: str) -> tuple[ov.Output, ov.Output]:
    """TopK sorted by value, equal keys in any order. Returns (values, i64 indices)."""
    t = ops.topk(key, _scalar_k(k), axis, mode, "value", "i64", False)
    return t.output(0), t.output(1)


def _scalar_k(k) -> ov.Output:
    k = h.i64(k)
    return h.reshape(k, []) if h.rank(k) != 0 else k


def positions(k, axis: int, r: int) -> ov.Output:
    """0, 1, ..., k-1 (i64) laid along ``axis`` of a rank-``r`` tensor (size 1 elsewhere)."""
    j = ops.range(h.const(0, torch.int64), _scalar_k(k), h.const(1, torch.int64), "i64").output(0)
    return h.reshape(j, [-1 if d == axis else 1 for d in range(r)])


def exact_key(x: ov.Output) -> ov.Output:
    """``x`` in a type TopK/ReduceMax handle exactly: half types widen, bool becomes int32."""
    dtype = h.dtype_of(x)
    if dtype in SIXTEEN_BIT_FLOATS:
        return h.cast(x, torch.float32)
    if dtype == torch.bool:
        return h.cast(x, torch.int32)
    return x


# ----------------------------------------------------------------------------- argmax / max


def first_extreme(x: ov.Output, axis: int, largest: bool) -> tuple[ov.Output, ov.Output]:
    """(value, first index) of the max (min) along ``axis``, keeping the axis; NaN wins."""
    dtype = h.dtype_of(x)
    key = exact_key(x)
    axes = h.const([axis], torch.int64)
    if dtype.is_floating_point:
        nan = ops.is_nan(key).output(0)
        plain = ops.select(nan, h.infinity(h.dtype_of(key), not largest), key).output(0)
        m = h.reduce_plain_extreme(plain, axes, largest, True)
        any_nan = ops.reduce_logical_or(nan, axes, True).output(0)
        hit = ops.select(any_nan, nan, ops.equal(plain, m)).output(0)
        value = ops.select(any_nan, h.const(math.nan, h.dtype_of(key)), m).output(0)
    else:
        value = (ops.reduce_max if largest else ops.reduce_min)(key, axes, True).output(0)
        hit = ops.equal(key, value).output(0)
    n = h.dim(x, axis)
    idx = ops.reduce_min(ops.select(hit, positions(n, axis, h.rank(x)), n), axes, True).output(0)
    return h.cast(value, dtype), idx


def _arg_reduce(node, x, dim, keepdim, largest: bool) -> ov.Output:
    r = h.rank(x)
    out_rank = h.meta(node).dim()
    if r == 0:
        return h.reshape(h.const(0, torch.int64), [1] * out_rank)
    if dim is None:
        _, idx = first_extreme(h.reshape(x, [-1]), 0, largest)
        return h.reshape(idx, [1] * out_rank)
    axis = h.norm_dim(dim, r)
    _, idx = first_extreme(x, axis, largest)
    return idx if keepdim else h.squeeze(idx, axis)


@lowers(aten.argmax.default)
def argmax(ctx, node, x, dim=None, keepdim=False):
    return _arg_reduce(node, x, dim, keepdim, largest=True)


@lowers(aten.argmin.default)
def argmin(ctx, node, x, dim=None, keepdim=False):
    return _arg_reduce(node, x, dim, keepdim, largest=False)


def _reduce_dim(x, dim, keepdim, largest: bool) -> list[ov.Output]:
    r = h.rank(x)
    if r == 0:
        return [x, h.const(0, torch.int64)]
    axis = h.norm_dim(dim, r)
    values, idx = first_extreme(x, axis, largest)
    if not keepdim:
        values, idx = h.squeeze(values, axis), h.squeeze(idx, axis)
    return [values, idx]


@lowers(aten.max.dim)
def max_dim(ctx, node, x, dim, keepdim=False):
    return _reduce_dim(x, dim, keepdim, largest=True)


@lowers(aten.min.dim)
def min_dim(ctx, node, x, dim, keepdim=False):
    return _reduce_dim(x, dim, keepdim, largest=False)


def _reduce_all(x, largest: bool) -> ov.Output:
    r = h.rank(x)
    if r == 0:
        return x
    axes = h.const(list(range(r)), torch.int64)
    dtype = h.dtype_of(x)
    if dtype == torch.bool:
        reduce = ops.reduce_logical_or if largest else ops.reduce_logical_and
        return reduce(x, axes, False).output(0)
    reduce = ops.reduce_max if largest else ops.reduce_min
    if not dtype.is_floating_point:
        return reduce(x, axes, False).output(0)
    nan = ops.is_nan(x).output(0)
    m = h.reduce_plain_extreme(ops.select(nan, h.infinity(dtype, not largest), x).output(0), axes, largest, False)
    any_nan = ops.reduce_logical_or(nan, axes, False).output(0)
    return ops.select(any_nan, h.const(math.nan, dtype), m).output(0)


@lowers(aten.max.default)
def max_all(ctx, node, x):
    return _reduce_all(x, largest=True)


@lowers(aten.min.default)
def min_all(ctx, node, x):
    return _reduce_all(x, largest=False)


# ----------------------------------------------------------------------------- topk


def _count(mask: ov.Output, axis: int) -> ov.Output:
    return ops.reduce_sum(h.cast(mask, torch.int64), h.const([axis], torch.int64), True).output(0)


def _members(mask: ov.Output, k, axis: int) -> ov.Output:
    """Indices of up to ``k`` elements in ``mask``, ahead of the non-members."""
    return _topk(h.cast(mask, torch.int32), k, axis, "max")[1]


def ranked(x: ov.Output, k, axis: int, largest: bool) -> tuple[ov.Output, ov.Output]:
    """torch.topk on a tensor of rank >= 1: ``k`` elements, NaN counting as the largest.

    For floats the order is made of three classes, each selected by its own TopK and merged by
    position with the class sizes: NaN; the values that are neither NaN nor the infinity at the
    far end of the order (masked out with that infinity as the sentinel); that infinity.
    """
    dtype = h.dtype_of(x)
    mode = "max" if largest else "min"
    key = exact_key(x)
    if not dtype.is_floating_point:
        values, idx = _topk(key, k, axis, mode)
        return (values if key is x else ops.gather_elements(x, idx, axis).output(0)), idx
    nan = ops.is_nan(key).output(0)
    worst = h.infinity(h.dtype_of(key), not largest)
    tail = ops.equal(key, worst).output(0)
    plain = ops.logical_not(ops.logical_or(nan, tail)).output(0)
    ordered = [(plain, _topk(ops.select(plain, key, worst), k, axis, mode)[1]), (tail, _members(tail, k, axis))]
    nans = (nan, _members(nan, k, axis))
    idx = _merge([nans, *ordered] if largest else [*ordered, nans], k, axis, h.rank(x))
    return ops.gather_elements(x, idx, axis).output(0), idx


def _merge(classes, k, axis: int, r: int) -> ov.Output:
    """Concatenate per-class index lists: position j takes class c's (j - start_c)-th index."""
    starts = [None]  # None: the class starts at position 0
    for mask, _ in classes[:-1]:
        n = _count(mask, axis)
        starts.append(n if starts[-1] is None else ops.add(starts[-1], n).output(0))
    j = positions(k, axis, r)
    out = None
    for (_, idx), start, end in reversed(list(zip(classes, starts, [*starts[1:], None], strict=True))):
        if start is not None:
            shifted = ops.maximum(ops.subtract(j, start), h.const(0, torch.int64)).output(0)
            idx = ops.gather_elements(idx, shifted, axis).output(0)
        out = idx if out is None else ops.select(ops.less(j, end), idx, out).output(0)
    return out


def _empty_along(x: ov.Output, axis: int) -> list[ov.Output]:
    """(values, indices) with size 0 along ``axis``."""
    zero, one = h.const([0], torch.int64), h.const([1], torch.int64)
    values = ops.slice(x, zero, zero, one, h.const([axis], torch.int64)).output(0)
    return [values, h.cast(values, torch.int64)]


@lowers(aten.topk.default)
def topk(ctx, node, x, k, dim=-1, largest=True, sorted=True):
    # sorted=False leaves the order unspecified in torch; the sorted order is one valid answer.
    r = h.rank(x)
    if r == 0:
        return [x, h.const(0, torch.int64)]
    axis = h.norm_dim(dim, r)
    if isinstance(k, int) and k == 0:
        return _empty_along(x, axis)  # OpenVINO's TopK rejects k == 0
    return list(ranked(x, k, axis, largest))


# ----------------------------------------------------------------------------- sort


def sorted_along(x, dim, descending) -> list[ov.Output]:
    """Sort along ``dim``, ties in index order (NaN after +inf ascending, before it descending).

    Pass 1 sorts by value (NaN as +inf) with the unstable TopK. In that order, ``run`` numbers
    the runs of equal values; NaN are split off +inf as a run of their own. Pass 2 sorts by the
    unique int32 key ``run * n + index``, which puts ties in index order. Beyond
    :data:`_STABLE_LIMIT` elements (only possible with a dynamic length) the key is ``run``
    alone: values stay right, ties are in no particular order.
    """
    r = h.rank(x)
    if r == 0:
        return [x, h.const(0, torch.int64)]
    axis = h.norm_dim(dim, r)
    static_n = h.static_shape(x)[axis]
    if static_n == 0:
        return _empty_along(x, axis)
    n = h.dim(x, axis)
    key = exact_key(x)
    floating = h.dtype_of(x).is_floating_point
    if floating:
        nan = ops.is_nan(key).output(0)
        key = ops.select(nan, h.infinity(h.dtype_of(key), True), key).output(0)
    v1, idx1 = _topk(key, n, axis, "max" if descending else "min")
    r_axis = [1 if d == axis else 0 for d in range(r)]
    r_end = [-1 if d == axis else 0 for d in range(r)]
    before = ops.pad(v1, h.const(r_axis, torch.int64), h.const(r_end, torch.int64), "edge")
    run = ops.cumsum(h.cast(ops.not_equal(v1, before).output(0), torch.int32), h.const(axis, torch.int64)).output(0)
    if floating:
        # NaN and +inf share a run; NaN go after it ascending (run + 1), before it descending.
        nan_at = ops.gather_elements(h.cast(nan, torch.int32), idx1, axis).output(0)
        shift = nan_at if not descending else ops.subtract(h.const(1, torch.int32), nan_at).output(0)
        run = ops.add(run, shift).output(0)
    if static_n is not None and static_n > _STABLE_LIMIT:
        tie_key = run
    else:
        n32 = h.cast(n, torch.int32)
        tie_key = ops.add(ops.multiply(run, n32), h.cast(idx1, torch.int32)).output(0)
        if static_n is None:
            fits = ops.less_equal(n32, h.const(_STABLE_LIMIT, torch.int32))
            tie_key = ops.select(fits, tie_key, run).output(0)
    order = _topk(tie_key, n, axis, "min")[1]
    idx = ops.gather_elements(idx1, order, axis).output(0)
    return [ops.gather_elements(x, idx, axis).output(0), idx]


def _sort_length(node) -> int | torch.SymInt:
    x = h.meta(node.args[0])
    dim = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else -1)
    return x.shape[h.norm_dim(dim, x.dim())] if x.dim() else 1


@lowers(aten.sort.default)
def sort(ctx, node, x, dim=-1, descending=False):
    # torch's CPU sort leaves ties in index order up to 16 elements (insertion sort) and in no
    # specified order beyond; the stable order is always one valid answer.
    return sorted_along(x, dim, descending)


def _stable_sort_ok(node) -> str | None:
    if not node.kwargs.get("stable"):
        return None
    n = _sort_length(node)
    if not isinstance(n, int):
        return "stable sort along a dynamic dimension (exact only up to 46340 elements)"
    if n > _STABLE_LIMIT:
        return f"stable sort of {n} > {_STABLE_LIMIT} elements: OpenVINO's stable TopK is quadratic"
    return None


@lowers(aten.sort.stable, validator=_stable_sort_ok)
def sort_stable(ctx, node, x, *, stable=None, dim=-1, descending=False):
    return sorted_along(x, dim, descending)


# ----------------------------------------------------------------------------- cumsum


def _cumsum_ok(node) -> str | None:
    return "a bool running sum" if h.out_dtype(node) == torch.bool else None


@lowers(aten.cumsum.default, validator=_cumsum_ok)
def cumsum(ctx, node, x, dim, *, dtype=None):
    out = h.out_dtype(node)
    # torch's CPU kernel accumulates half-precision types in float32.
    x = h.cast(x, h.opmath_dtype(out))
    if h.rank(x) == 0:
        return h.cast(x, out)
    axis = h.norm_dim(dim, h.rank(x))
    eager_checks.stays_int32(ctx, node, lambda: eager_checks.total_magnitude(x, h.const([axis], torch.int64)))
    if out in (torch.float32, torch.float64):  # 16-bit types accumulate in plain float32
        return _compensated_cumsum(x, axis)
    return h.cast(ops.cumsum(x, h.const(axis, torch.int64)).output(0), out)


def _compensated_cumsum(x: ov.Output, axis: int) -> ov.Output:
    """A running sum as accurate as torch's, which accumulates float32 in double on CPU.

    A plain float32 CumSum drifts by O(n) ulps. For any computed running sum ``s``,
    ``sum(x[:i+1]) == s[i] + sum(d[:i+1])`` with ``d[j] = s[j-1] + x[j] - s[j]``; ``d`` is
    obtained exactly with TwoSum (``s[j-1] + x[j] == t + e``) and Sterbenz (``t - s[j]``), and
    its own running sum only needs to be approximate since it is tiny next to ``s``.
    """
    r = h.rank(x)
    s = ops.cumsum(x, h.const(axis, torch.int64)).output(0)
    begin = h.const([1 if d == axis else 0 for d in range(r)], torch.int64)
    end = h.const([-1 if d == axis else 0 for d in range(r)], torch.int64)
    prev = ops.pad(s, begin, end, "constant", h.const(0, h.dtype_of(x))).output(0)  # s shifted by one
    t = ops.add(prev, x)
    back = ops.subtract(t, prev)
    e = ops.add(ops.subtract(prev, ops.subtract(t, back)), ops.subtract(x, back))
    d = ops.add(ops.subtract(t, s), e)
    fixed = ops.add(s, ops.cumsum(d, h.const(axis, torch.int64))).output(0)
    # Past an inf or NaN the correction is NaN; the plain sum is then already torch's answer.
    return ops.select(ops.is_finite(s), fixed, s).output(0)
