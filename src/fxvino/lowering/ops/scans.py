"""Scans and order statistics: cumprod, cummax/cummin, logcumsumexp, kthvalue, median,
nanmedian, mode, searchsorted and bucketize.

OpenVINO has CumSum but no other scan, so cumprod, cummax/cummin and logcumsumexp are
Hillis-Steele scans: ``ceil(log2 n)`` steps, each combining every element with the one ``s``
places before it (a Pad that shifts by ``s``). That needs the scan length when lowering, so a
dynamic length stays in PyTorch. The combining steps are exact for cummax/cummin and integer
products; float products and log-add-exps round in another order than torch's sequential loop
(which accumulates float32 in double), a few ulps at most for the lengths models use.

Order statistics reuse the stable sort of :mod:`sorting` (NaN after +inf, ties in index order)
and pick a position per row: the lower median, the first NaN for median, the lower median of
the numbers for nanmedian.
"""

from __future__ import annotations

import math

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import eager_checks, precise
from fxvino.lowering import helpers as h
from fxvino.lowering.ops.sorting import exact_key, first_extreme, positions, ranked, sorted_along
from fxvino.lowering.registry import lowers
from fxvino.utils.dtypes import SIXTEEN_BIT_FLOATS

aten = torch.ops.aten


# ----------------------------------------------------------------------------- doubling scans


def _scan_length(node, dim_index: int = 1) -> int | torch.SymInt:
    x = h.meta(node.args[0])
    dim = node.kwargs.get("dim", node.args[dim_index] if len(node.args) > dim_index else -1)
    return x.shape[h.norm_dim(dim, x.dim())] if x.dim() else 1


def _static_scan(node) -> str | None:
    if not isinstance(_scan_length(node), int):
        return "a scan along a dynamic dimension (the doubling scan needs its length)"
    return None


def _shifted(x: ov.Output, s: int, axis: int, fill) -> ov.Output:
    """``x`` moved ``s`` places along ``axis``, the first ``s`` places holding ``fill``."""
    r = h.rank(x)
    begin = h.const([s if d == axis else 0 for d in range(r)], torch.int64)
    end = h.const([-s if d == axis else 0 for d in range(r)], torch.int64)
    return ops.pad(x, begin, end, "constant", h.const(fill, h.dtype_of(x))).output(0)


def _scan(values: list[ov.Output], combine, fills: list, axis: int, n: int) -> list[ov.Output]:
    """Inclusive scan of an associative ``combine(earlier, later)`` over tuples of tensors;
    ``fills`` are what the shifted-in places hold (``combine`` must treat them as nothing)."""
    s = 1
    while s < n:
        earlier = [_shifted(v, s, axis, f) for v, f in zip(values, fills, strict=True)]
        values = combine(earlier, values)
        s *= 2
    return values


def _scan_axis(x: ov.Output, dim: int) -> tuple[int, int]:
    """The scan's axis and its (static) length."""
    axis = h.norm_dim(dim, h.rank(x))
    return axis, h.static_shape(x)[axis]


def _scan_dtype(out: torch.dtype) -> torch.dtype:
    # torch's CPU scans accumulate half types in float32; 8-bit products wrap in i32.
    return torch.float32 if out in SIXTEEN_BIT_FLOATS else h.wrapping_dtype(out)


def _cumprod_ok(node) -> str | None:
    if h.out_dtype(node) == torch.bool:
        return "a bool running product"
    return _static_scan(node)


@lowers(aten.cumprod.default, validator=_cumprod_ok)
def cumprod(ctx, node, x, dim, *, dtype=None):
    out = h.out_dtype(node)
    x = h.cast(x, _scan_dtype(out))
    if h.rank(x) == 0:
        return h.cast(x, out)
    axis = h.const([h.norm_dim(dim, h.rank(x))], torch.int64)
    eager_checks.stays_int32(ctx, node, lambda: eager_checks.product_magnitude(x, axis, running=True))

    def multiply(earlier, later):
        return [ops.multiply(earlier[0], later[0]).output(0)]

    return h.cast(_scan([x], multiply, [1], *_scan_axis(x, dim))[0], out)


def _cum_extreme(x: ov.Output, dim: int, largest: bool) -> list[ov.Output]:
    """torch's cummax/cummin: a later element takes over when it ties the running extreme (the
    last index of equal values) or is NaN (so NaN stays, indexed by the latest NaN)."""
    r = h.rank(x)
    if r == 0:
        return [x, h.const(0, torch.int64)]
    axis = h.norm_dim(dim, r)
    n = h.static_shape(x)[axis]
    key = exact_key(x)
    idx = ops.broadcast(positions(n, axis, r), h.shape_of(key)).output(0)
    floating = h.dtype_of(key).is_floating_point

    def combine(earlier, later):
        (va, ia), (vb, ib) = earlier, later
        # Less/LessEqual are false on NaN (the plugin's Greater* are not); ia < 0: shifted-in.
        wins = ops.less_equal(va, vb) if largest else ops.less_equal(vb, va)
        if floating:
            wins = ops.logical_or(ops.is_nan(vb), ops.logical_and(ops.logical_not(ops.is_nan(va)), wins))
        take = ops.logical_or(ops.less(ia, h.const(0, torch.int64)), wins)
        return [ops.select(take, vb, va).output(0), ops.select(take, ib, ia).output(0)]

    _, idx = _scan([key, idx], combine, [0, -1], axis, n)
    return [ops.gather_elements(x, idx, axis).output(0), idx]


@lowers(aten.cummax.default, validator=_static_scan)
def cummax(ctx, node, x, dim):
    return _cum_extreme(x, dim, largest=True)


@lowers(aten.cummin.default, validator=_static_scan)
def cummin(ctx, node, x, dim):
    return _cum_extreme(x, dim, largest=False)


def _log_add_exp(a: ov.Output, b: ov.Output) -> ov.Output:
    """log(exp(a) + exp(b)) of NaN-free operands; equal infinities give themselves."""
    hi, lo = ops.maximum(a, b), ops.minimum(a, b)
    out = ops.add(hi, precise.log1p_of_unit(ops.exp(ops.subtract(lo, hi)).output(0)))
    same_inf = ops.logical_and(ops.equal(a, b), ops.is_inf(a))
    return ops.select(same_inf, hi, out).output(0)


@lowers(aten.logcumsumexp.default, validator=_static_scan)
def logcumsumexp(ctx, node, x, dim):
    out = h.out_dtype(node)
    x = h.cast(x, _scan_dtype(out))
    if h.rank(x) == 0:
        return h.cast(x, out)
    axis, n = _scan_axis(x, dim)
    dtype = h.dtype_of(x)
    nan = ops.is_nan(x).output(0)
    plain = ops.select(nan, h.infinity(dtype, False), x).output(0)

    def combine(earlier, later):
        return [_log_add_exp(earlier[0], later[0])]

    y = _scan([plain], combine, [-math.inf], axis, n)[0]
    # NaN propagates from where it appears; the plugin's Maximum/Exp would drop it.
    seen = ops.cumsum(h.cast(nan, torch.int32), h.const(axis, torch.int64))
    y = ops.select(ops.greater(seen, h.const(0, torch.int32)), h.const(math.nan, dtype), y).output(0)
    return h.cast(y, out)


# ----------------------------------------------------------------------------- order statistics


def _pick(values: ov.Output, idx: ov.Output, position: ov.Output, axis: int) -> list[ov.Output]:
    """values/indices at ``position`` (i64, size 1 along ``axis``) of each row, keeping the axis."""
    return [ops.gather_elements(values, position, axis).output(0), ops.gather_elements(idx, position, axis).output(0)]


def _row_position(v: ov.Output, axis: int, n: ov.Output) -> ov.Output:
    """A position per row of ``v`` (i64, size 1 along ``axis``) holding ``n``."""
    shape = ops.scatter_update(
        h.shape_of(v), h.const([axis], torch.int64), h.const([1], torch.int64), h.const(0, torch.int64)
    )
    return ops.broadcast(h.i64(n), shape).output(0)


def _median(x: ov.Output, axis: int, ignore_nan: bool) -> list[ov.Output]:
    """(value, index) of the lower median along ``axis``, keeping the axis.

    median: the first NaN of a row holding any (stable ascending order puts NaN last, in index
    order). nanmedian: the lower median of the row's numbers; NaN (the first) if it has none.
    """
    values, idx = sorted_along(x, axis, False)
    n = h.dim(x, axis)
    two = h.const(2, torch.int64)
    if not h.dtype_of(x).is_floating_point:
        half = h.floor_div(ops.subtract(n, h.const(1, torch.int64)).output(0), two)
        return _pick(values, idx, _row_position(values, axis, half), axis)
    nans = ops.reduce_sum(h.cast(ops.is_nan(x).output(0), torch.int64), h.const([axis], torch.int64), True).output(0)
    numbers = ops.subtract(n, nans).output(0)
    lower = ops.maximum(ops.subtract(numbers, h.const(1, torch.int64)), h.const(0, torch.int64)).output(0)
    position = h.floor_div(lower, two)
    if not ignore_nan:
        position = ops.select(ops.greater(nans, h.const(0, torch.int64)), numbers, position).output(0)
    return _pick(values, idx, position, axis)


def _non_empty(node) -> str | None:
    x = h.meta(node.args[0])
    if x.numel() == 0:
        return "median of an empty tensor"
    return None


@lowers(aten.median.default, validator=_non_empty)
def median(ctx, node, x):
    return h.reshape(_median(h.reshape(x, [-1]), 0, ignore_nan=False)[0], [])


@lowers(aten.nanmedian.default, validator=_non_empty)
def nanmedian(ctx, node, x):
    return h.reshape(_median(h.reshape(x, [-1]), 0, ignore_nan=True)[0], [])


def _median_dim(x, dim, keepdim, ignore_nan) -> list[ov.Output]:
    r = h.rank(x)
    if r == 0:
        return [x, h.const(0, torch.int64)]
    axis = h.norm_dim(dim, r)
    out = _median(x, axis, ignore_nan)
    return out if keepdim else [h.squeeze(v, axis) for v in out]


@lowers(aten.median.dim, validator=_non_empty)
def median_dim(ctx, node, x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, ignore_nan=False)


@lowers(aten.nanmedian.dim, validator=_non_empty)
def nanmedian_dim(ctx, node, x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, ignore_nan=True)


def _kthvalue_ok(node) -> str | None:
    if not h.meta(node.args[0]).dtype.is_floating_point:
        # Floats can tie too (the same caveat then holds), but integer inputs usually do.
        return (
            "kthvalue of integers: torch's quickselect answers one of equal values' indices "
            "in an order only its own loop gives, and integer inputs are full of ties"
        )
    return _non_empty(node)


@lowers(aten.kthvalue.default, validator=_kthvalue_ok)
def kthvalue(ctx, node, x, k, dim=-1, keepdim=False):
    # NaN rank largest, as in torch; which index of tied values is returned is unspecified.
    r = h.rank(x)
    if r == 0:
        return [x, h.const(0, torch.int64)]
    axis = h.norm_dim(dim, r)
    values, idx = ranked(x, k, axis, largest=False)
    last = ops.subtract(h.i64(k), h.const(1, torch.int64)).output(0)
    out = _pick(values, idx, _row_position(values, axis, last), axis)
    return out if keepdim else [h.squeeze(v, axis) for v in out]


def _run_ends(values: ov.Output, axis: int) -> tuple[ov.Output, ov.Output]:
    """For sorted ``values``: each element's run number (i32, from 0) among runs of equal
    values, and each run's length (i32, indexed by run number, 0 past the last run)."""
    r = h.rank(values)
    key = exact_key(values)
    begin = h.const([1 if d == axis else 0 for d in range(r)], torch.int64)
    end = h.const([-1 if d == axis else 0 for d in range(r)], torch.int64)
    before = ops.pad(key, begin, end, "edge").output(0)
    run = ops.cumsum(h.cast(ops.not_equal(key, before).output(0), torch.int32), h.const(axis, torch.int64)).output(0)
    zeros = ops.multiply(run, h.const(0, torch.int32))
    ones = ops.add(zeros, h.const(1, torch.int32))
    counts = ops.scatter_elements_update(zeros, run, ones, h.const(axis, torch.int64), "sum").output(0)
    return run, counts


@lowers(aten.mode.default, validator=_non_empty)
def mode(ctx, node, x, dim=-1, keepdim=False):
    # torch: the smallest of the most frequent values, with the index of its last element in
    # std::sort's order (index order up to 16 elements, where it is an insertion sort; beyond,
    # torch's index among equal values is unspecified). NaN make torch's sort order undefined.
    r = h.rank(x)
    if r == 0:
        return [x, h.const(0, torch.int64)]
    axis = h.norm_dim(dim, r)
    # Along the last axis: along an outer axis the plugin picked wrong runs beyond the first
    # slice (torch.mode(x, 1) of a 5x5x5 tensor; the summing ScatterElementsUpdate alone was
    # right, the cause is not isolated).
    perm = list(range(r))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    values, idx = sorted_along(h.transpose(x, perm) if axis != r - 1 else x, r - 1, False)
    run, counts = _run_ends(values, r - 1)
    best = h.cast(first_extreme(counts, r - 1, True)[1], torch.int32)
    last = ops.reduce_sum(h.cast(ops.less_equal(run, best).output(0), torch.int64), h.const([r - 1], torch.int64), True)
    out = _pick(values, idx, ops.subtract(last, h.const(1, torch.int64)).output(0), r - 1)
    out = [h.transpose(v, perm) for v in out] if axis != r - 1 else out
    return out if keepdim else [h.squeeze(v, axis) for v in out]


# ----------------------------------------------------------------------------- searchsorted


def _search_ok(node) -> str | None:
    tensors = [h.meta(a) for a in node.args[:2] if isinstance(a, torch.fx.Node)]
    if any(t.dtype.is_complex or t.dtype == torch.bool for t in tensors):
        return "searchsorted of bool or complex values"
    # Only the kernel checks ``side`` (the meta function does not): left to PyTorch, a value eager
    # rejects raises eager's error instead of being taken for "left".
    side = node.kwargs.get("side")
    if side not in (None, "left", "right"):
        return f"searchsorted side={side!r}, which torch rejects (valid: 'left', 'right')"
    return None


def _search_dtype(args) -> torch.dtype:
    """The type torch compares in: the operands' promoted type; a Python number counts as
    float32 or int64 (torch's double compares as float32 on the CPU plugin anyway), and half
    types widen to float32 (so a Python number is not rounded to them)."""
    dtypes = [h.meta(a).dtype if isinstance(a, torch.fx.Node) else h.dtype_of(a) for a in args]
    common = torch.promote_types(*dtypes)
    return h.opmath_dtype(common)


def _search(ctx, node, boundaries, values, right: bool, out_int32: bool, sorter=None) -> ov.Output:
    """torch.searchsorted: lower (upper with ``right``) bound of each value in the innermost
    rows of ``boundaries``; a NaN value goes past the end, as torch's ``!(b >= v)`` search."""
    common = _search_dtype(node.args[:2])
    boundaries, values = h.cast(boundaries, common), h.cast(values, common)
    if sorter is not None:  # (a position out of range read an unwritten buffer)
        sorter = eager_checks.along(ctx, boundaries, -1, sorter)
        boundaries = ops.gather_elements(boundaries, sorter, h.rank(boundaries) - 1).output(0)
    boundaries, values = exact_key(boundaries), exact_key(values)
    scalar = h.rank(values) == 0
    if scalar:
        values = h.reshape(values, [1])
    found = ops.search_sorted(boundaries, values, right).output(0)
    if h.dtype_of(values).is_floating_point:
        end = h.dim(boundaries, h.rank(boundaries) - 1)
        found = ops.select(ops.is_nan(values), h.cast(end, h.dtype_of(found)), found).output(0)
    if scalar:
        found = h.reshape(found, [])
    return h.cast(found, torch.int32 if out_int32 else torch.int64)


@lowers(aten.searchsorted.Tensor, aten.searchsorted.Scalar, validator=_search_ok)
def searchsorted(ctx, node, sorted_sequence, x, *, out_int32=False, right=False, side=None, sorter=None):
    return _search(ctx, node, sorted_sequence, x, right or side == "right", out_int32, sorter)


@lowers(aten.bucketize.Tensor, aten.bucketize.Scalar, validator=_search_ok)
def bucketize(ctx, node, x, boundaries, *, out_int32=False, right=False):
    return _search(ctx, node, boundaries, x, right, out_int32)
