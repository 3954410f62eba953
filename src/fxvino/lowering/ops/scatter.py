"""Scatters and writes into copies: scatter*, index_put, *_scatter, copy/fill, diagonal,
embedding bags and as_strided.

Every op here returns a new value: "writing" into ``self`` is a ScatterElementsUpdate,
ScatterNDUpdate, ScatterUpdate or Select over ``self``'s value. Index conventions follow
torch: negative positions are wrapped explicitly where torch accepts them, and reductions over
duplicate indices use OpenVINO's scatter reductions so duplicates accumulate.
"""

from __future__ import annotations

import math

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import sympy
import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import guarding_hint_or_throw, has_guarding_hint, statically_known_true
from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

from fxvino.lowering import eager_checks
from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers
from fxvino.lowering.rounding import op_operand, op_result

aten = torch.ops.aten
INT64_MAX = 2**63 - 1

# torch reduction names -> ScatterElementsUpdate-12 reduction names.
_SCATTER_REDUCE = {"sum": "sum", "prod": "prod", "mean": "mean", "amax": "max", "amin": "min"}
_SCATTER_LEGACY_REDUCE = {"add": "sum", "multiply": "prod"}


# ----------------------------------------------------------------------------- private helpers


def _is_empty(x: h.Value) -> bool:
    """True when ``x`` is known at lowering time to have no elements."""
    return 0 in h.static_shape(x)


def _static_dim(x: h.Value, d: int) -> int | h.Value:
    """Size of dim ``d``: a Python int when static, else an i64 scalar Output."""
    known = h.static_shape(x)[d]
    return known if known is not None else h.dim(x, d)


def _dims(x: h.Value, ds: list[int]) -> h.Value:
    """1-D i64 tensor of the sizes of ``x``'s dims ``ds`` (a constant when static)."""
    return h.as_shape([_static_dim(x, d) for d in ds])


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _flat(x: h.Value) -> h.Value:
    return h.reshape(x, [-1])


def _scatter_elements(x, dim, index, updates, reduction="none", use_init_val=True):
    """torch.scatter family on ScatterElementsUpdate-12.

    ``updates`` is a tensor (sliced down to ``index``'s extent, as torch only reads that part)
    or a scalar (broadcast to ``index``'s shape).
    """
    dtype = h.dtype_of(x)
    r = h.rank(x)
    index = h.cast(index, torch.int64)
    if _is_empty(index):
        return x
    if r == 0:
        # ScatterElementsUpdate needs rank >= 1: run on a 1-element vector.
        one = [1]
        x1, i1 = h.reshape(x, one), h.reshape(index, one)
        u1 = h.reshape(h.cast(updates, dtype), one) if h.is_output(updates) else updates
        out = _scatter_elements(x1, 0, i1, u1, reduction, use_init_val)
        return h.reshape(out, [])
    d = h.norm_dim(dim, r)
    if h.is_output(updates):
        updates = h.cast(updates, dtype)
        ishape, ushape = h.static_shape(index), h.static_shape(updates)
        if ishape != ushape or None in ishape:
            zeros = h.const([0] * h.rank(index), torch.int64)
            ones = h.const([1] * h.rank(index), torch.int64)
            updates = ops.slice(updates, zeros, h.shape_of(index), ones).output(0)
    else:
        updates = ops.broadcast(h.cast(updates, dtype), h.shape_of(index)).output(0)
    return ops.scatter_elements_update(
        x, index, updates, h.const(d, torch.int64), reduction=reduction, use_init_val=use_init_val
    ).output(0)


# ----------------------------------------------------------------------------- scatter


@lowers(aten.scatter.src)
def scatter_src(ctx, node, x, dim, index, src):
    index = eager_checks.along(ctx, x, dim, index)
    return _scatter_elements(x, dim, index, src)


@lowers(aten.scatter.value)
def scatter_value(ctx, node, x, dim, index, value):
    index = eager_checks.along(ctx, x, dim, index)
    return _scatter_elements(x, dim, index, value)


def _legacy_reduce_ok(node):
    reduce = node.kwargs.get("reduce", node.args[4] if len(node.args) > 4 else None)
    if reduce not in _SCATTER_LEGACY_REDUCE:
        return f"scatter reduce={reduce!r} is not one of {sorted(_SCATTER_LEGACY_REDUCE)}"
    return None


@lowers(aten.scatter.reduce, validator=_legacy_reduce_ok)
def scatter_reduce_legacy(ctx, node, x, dim, index, src, *, reduce):
    index = eager_checks.along(ctx, x, dim, index)
    return _scatter_elements(x, dim, index, src, _SCATTER_LEGACY_REDUCE[reduce])


@lowers(aten.scatter.value_reduce, validator=_legacy_reduce_ok)
def scatter_value_reduce(ctx, node, x, dim, index, value, *, reduce):
    index = eager_checks.along(ctx, x, dim, index)
    return _scatter_elements(x, dim, index, value, _SCATTER_LEGACY_REDUCE[reduce])


@lowers(aten.scatter_add.default)
def scatter_add(ctx, node, x, dim, index, src):
    index = eager_checks.along(ctx, x, dim, index)
    eager_checks.stays_int32(ctx, node, lambda: eager_checks.accumulated_magnitude(x, src))
    return _scatter_elements(x, dim, index, src, "sum")


def _scatter_reduce_ok(node):
    reduce = node.args[4] if len(node.args) > 4 else node.kwargs.get("reduce")
    if reduce not in _SCATTER_REDUCE:
        return f"scatter_reduce reduce={reduce!r} is not one of {sorted(_SCATTER_REDUCE)}"
    return None


@lowers(aten.scatter_reduce.two, validator=_scatter_reduce_ok)
def scatter_reduce(ctx, node, x, dim, index, src, reduce, *, include_self=True):
    index = eager_checks.along(ctx, x, dim, index)
    if reduce in ("sum", "mean"):
        eager_checks.stays_int32(ctx, node, lambda: eager_checks.accumulated_magnitude(x, src))
    if reduce == "mean" and not h.dtype_of(x).is_floating_point:
        # torch floors integer means; OpenVINO's CPU "mean" truncates toward zero: sum / count here.
        total = _scatter_elements(x, dim, index, src, "sum", bool(include_self))
        init = ops.broadcast(h.const(1 if include_self else 0, torch.int64), h.shape_of(x)).output(0)
        count = _scatter_elements(init, dim, index, 1, "sum")
        one = h.const(1, torch.int64)
        mean = h.floor_div(h.cast(total, torch.int64), ops.maximum(count, one).output(0))
        return ops.select(ops.greater_equal(count, one), h.cast(mean, h.dtype_of(x)), x).output(0)
    return _scatter_elements(x, dim, index, src, _SCATTER_REDUCE[reduce], bool(include_self))


@lowers(aten.index_reduce.default, validator=_scatter_reduce_ok)
def index_reduce(ctx, node, x, dim, index, source, reduce, *, include_self=True):
    """``index_reduce``: ``scatter_reduce`` with ``index`` laid along ``dim`` of ``source``."""
    r = h.rank(source)
    if r == 0:
        full = h.reshape(index, [])
    else:
        d = h.norm_dim(dim, r)
        full = h.reshape(index, [-1 if i == d else 1 for i in range(r)])
        full = ops.broadcast(full, h.shape_of(source)).output(0)
    return scatter_reduce(ctx, node, x, dim, full, source, reduce, include_self=include_self)


@lowers(aten.bincount.default)
def bincount(ctx, node, x, weights=None, minlength=0):
    """How often each value of a 1-d non-negative integer tensor occurs (or its summed weights):
    a summing scatter into ``max(x) + 1`` bins, at least ``minlength`` (a data-dependent length)."""
    dtype = h.out_dtype(node)
    if h.static_shape(x)[0] == 0:  # no values: minlength zeros (ReduceMax has nothing to reduce)
        return h.const(np.zeros(minlength), dtype)
    x = h.cast(x, torch.int64)
    top = ops.add(ops.reduce_max(x, h.const([0], torch.int64), True), h.const([1], torch.int64))
    bins = ops.maximum(top, h.const([minlength], torch.int64)).output(0)
    zeros = ops.broadcast(h.const(0, dtype), bins).output(0)
    updates = 1 if weights is None else h.cast(weights, dtype)
    return _scatter_elements(zeros, 0, x, updates, "sum")


# ----------------------------------------------------------------------------- index_put


def _is_mask(v) -> bool:
    return v is not None and h.meta(v).dtype in (torch.bool, torch.uint8)


def _index_put_ok(node):
    indices = node.args[1]
    masks = [i for i in indices if _is_mask(i)]
    if not masks:
        return None
    others = [i for i in indices if i is not None and not _is_mask(i)]
    if len(masks) > 1 or others:
        return "a boolean mask index combined with other index tensors has a data-dependent shape"
    if h.meta(masks[0]).dim() == 0:
        return "a 0-d boolean mask index adds a data-dependent dimension"
    return None


@lowers(aten.index_put.default, validator=_index_put_ok)
def index_put(ctx, node, x, indices, values, accumulate=False):
    """``x[indices] = values`` (or ``+=`` with ``accumulate``) on a copy of ``x``."""
    indices = eager_checks.each_along(ctx, x, indices)
    dtype = h.out_dtype(node)
    if accumulate:
        eager_checks.stays_int32(ctx, node, lambda: eager_checks.accumulated_magnitude(x, values))
    if dtype == torch.bool and accumulate:  # adds reject booleans; torch's sum of them is "any"
        return h.cast(_index_put(x, indices, values, True, torch.int32), torch.bool)
    return _index_put(x, indices, values, accumulate, dtype)


def _index_put(x, indices, values, accumulate: bool, dtype: torch.dtype) -> ov.Output:
    x = h.cast(x, dtype)
    values = h.cast(values, dtype)
    r = h.rank(x)
    indices = list(indices)
    present = [d for d, i in enumerate(indices) if i is not None]
    if not present:
        values = ops.broadcast(values, h.shape_of(x)).output(0)
        return ops.add(x, values).output(0) if accumulate else values
    mask_pos = [d for d in present if h.dtype_of(indices[d]) in (torch.bool, torch.uint8)]
    if mask_pos:
        return _index_put_mask(x, mask_pos[0], indices[mask_pos[0]], values, accumulate)
    indices = indices + [None] * (r - len(indices))
    rest = [d for d in range(r) if d not in present]
    perm = present + rest
    xt = h.transpose(x, perm) if perm != list(range(r)) else x
    idx = [h.cast(indices[d], torch.int64) for d in present]
    zero = h.const(0, torch.int64)
    acc = ops.broadcast(zero, h.shape_of(idx[0])).output(0)
    for i in idx[1:]:
        acc = ops.add(acc, ops.broadcast(zero, h.shape_of(i))).output(0)
    target = h.shape_of(acc)  # the broadcast shape of all index tensors
    brank = h.rank(acc)
    wrapped = []
    for d, i in zip(present, idx, strict=True):
        i = h.wrap_negative(i, _static_dim(x, d))
        wrapped.append(h.unsqueeze(ops.broadcast(i, target).output(0), brank))
    stacked = ops.concat(wrapped, brank).output(0) if len(wrapped) > 1 else wrapped[0]

    # values broadcast to the shape of x[indices] in torch's layout, then to index-dims-first.
    lead = present[0]
    adjacent = present == list(range(lead, lead + len(present)))
    if adjacent and lead != 0:
        before, after = list(range(lead)), list(range(lead + len(present), r))
        shape = ops.concat([_dims(x, before), target, _dims(x, after)], 0).output(0)
        values = ops.broadcast(values, shape).output(0)
        order = (
            list(range(lead, lead + brank)) + list(range(lead)) + list(range(lead + brank, lead + brank + len(after)))
        )
        values = h.transpose(values, order)
    else:
        shape = ops.concat([target, _dims(x, rest)], 0).output(0)
        values = ops.broadcast(values, shape).output(0)
    out = ops.scatter_nd_update(xt, stacked, values, "sum" if accumulate else None).output(0)
    return h.transpose(out, _inverse(perm)) if perm != list(range(r)) else out


def _index_put_mask(x, p, mask, values, accumulate):
    """``x[(:,) * p + (mask,)] = values``: the k-th True element takes the k-th value row.

    The rank of each True element in row-major order is ``cumsum(mask) - 1``; gathering the
    values at those ranks and selecting with the mask reproduces torch without the
    data-dependent ``nonzero``.
    """
    r = h.rank(x)
    k = h.rank(mask)
    t = r - p - k
    mask = h.cast(mask, torch.bool)
    # values broadcast to [x.shape[:p], n, x.shape[p+k:]] with n = 1 or the number of Trues.
    frame = ops.concat([_dims(x, list(range(p))), h.const([1], torch.int64), _dims(x, list(range(p + k, r)))], 0)
    frame = ops.broadcast(h.const(0, h.dtype_of(values)), frame).output(0)
    vb = ops.broadcast(values, h.broadcast_shape(values, frame)).output(0)
    if h.static_shape(vb)[p] == 0:
        return x
    pos = ops.subtract(ops.cumsum(h.cast(_flat(mask), torch.int64), h.const(0, torch.int64)), h.const(1, torch.int64))
    hi = ops.subtract(h.dim(vb, p), h.const(1, torch.int64))
    pos = ops.minimum(ops.maximum(pos, h.const(0, torch.int64)), hi).output(0)
    gathered = ops.gather(vb, pos, h.const(p, torch.int64)).output(0)
    gathered = ops.reshape(gathered, h.shape_of(x), False).output(0)
    m = h.unsqueeze(mask, list(range(p))) if p else mask
    m = h.unsqueeze(m, list(range(p + k, r))) if t else m
    if accumulate:
        zero = h.const(0, h.dtype_of(x))
        return ops.add(x, ops.select(m, gathered, zero)).output(0)
    return ops.select(m, gathered, x).output(0)


@lowers(aten.put.default)
def put(ctx, node, x, index, source, accumulate=False):
    """``x.flatten()[index] = source`` (or ``+=``), negative positions counted from the end."""
    index = h.cast(index, torch.int64)
    if _is_empty(index):
        return x
    flat = _flat(x)
    numel = h.static_shape(flat)[0]
    numel = numel if numel is not None else h.dim(flat, 0)
    idx = h.wrap_negative(eager_checks.in_range(ctx, _flat(index), numel, True), numel)
    src = h.cast(_flat(source), h.dtype_of(x))
    out = ops.scatter_nd_update(flat, h.unsqueeze(idx, 1), src, "sum" if accumulate else None).output(0)
    return ops.reshape(out, h.shape_of(x), False).output(0)


# ----------------------------------------------------------------------------- *_scatter


@lowers(aten.select_scatter.default)
def select_scatter(ctx, node, x, src, dim, index):
    d = h.norm_dim(dim, h.rank(x))
    idx = h.reshape(h.i64(h.wrap_negative(index, _static_dim(x, d))), [1])
    src = h.unsqueeze(h.cast(src, h.dtype_of(x)), d)
    return ops.scatter_update(x, idx, src, h.const(d, torch.int64)).output(0)


@lowers(aten.slice_scatter.default)
def slice_scatter(ctx, node, x, src, dim=0, start=None, end=None, step=1):
    d = h.norm_dim(dim, h.rank(x))
    size = _static_dim(x, d)
    start = 0 if start is None else start
    end = INT64_MAX if end is None else min(end, INT64_MAX) if isinstance(end, int) else end
    src = h.cast(src, h.dtype_of(x))
    if all(isinstance(v, int) for v in (size, start, end, step)):
        positions = list(range(*slice(start, end, step).indices(size)))
        if not positions:
            return x
        if positions == list(range(size)):
            return ops.broadcast(src, h.shape_of(x)).output(0)
        idx = h.const(positions, torch.int64)
    else:
        idx = ops.slice(h.arange(size), h.i64([start]), h.i64([end]), h.i64([step]), h.const([0], torch.int64))
        idx = idx.output(0)
    return ops.scatter_update(x, idx, src, h.const(d, torch.int64)).output(0)


def _diag_indices(x, offset, d1, d2):
    """``[L, 2]`` (row, col) pairs of the ``offset`` diagonal of dims ``d1``/``d2``; and L."""
    r0, c0 = max(-offset, 0), max(offset, 0)
    n1, n2 = _static_dim(x, d1), _static_dim(x, d2)
    if isinstance(n1, int) and isinstance(n2, int):
        n = max(min(n1 - r0, n2 - c0), 0)
        i = np.arange(n, dtype=np.int64)
        return h.const(np.stack([i + r0, i + c0], 1).reshape(n, 2), torch.int64), n
    n = ops.minimum(
        ops.subtract(h.i64(n1), h.const(r0, torch.int64)), ops.subtract(h.i64(n2), h.const(c0, torch.int64))
    )
    n = ops.maximum(n, h.const(0, torch.int64)).output(0)
    i = h.arange(n)
    rows = h.unsqueeze(ops.add(i, h.const(r0, torch.int64)).output(0), 1)
    cols = h.unsqueeze(ops.add(i, h.const(c0, torch.int64)).output(0), 1)
    return ops.concat([rows, cols], 1).output(0), n


def _diag_perm(r, dim1, dim2):
    d1, d2 = h.norm_dim(dim1, r), h.norm_dim(dim2, r)
    if d1 == d2:
        raise ValueError("diagonal dimensions cannot be identical")
    return d1, d2, [d1, d2] + [i for i in range(r) if i not in (d1, d2)]


@lowers(aten.diagonal.default, aten.diagonal_copy.default)
def diagonal(ctx, node, x, offset=0, dim1=0, dim2=1):
    """The diagonal as a value: other dims in order, the diagonal last."""
    r = h.rank(x)
    d1, d2, perm = _diag_perm(r, dim1, dim2)
    idx, _ = _diag_indices(x, offset, d1, d2)
    out = ops.gather_nd(h.transpose(x, perm), idx, 0).output(0)  # [L, *others]
    return h.transpose(out, list(range(1, r - 1)) + [0])


@lowers(aten.diagonal_scatter.default)
def diagonal_scatter(ctx, node, x, src, offset=0, dim1=0, dim2=1):
    r = h.rank(x)
    d1, d2, perm = _diag_perm(r, dim1, dim2)
    idx, n = _diag_indices(x, offset, d1, d2)
    if n == 0:
        return x
    src = h.transpose(h.cast(src, h.dtype_of(x)), [r - 2] + list(range(r - 2)))  # [L, *others]
    out = ops.scatter_nd_update(h.transpose(x, perm), idx, src).output(0)
    return h.transpose(out, _inverse(perm))


# ----------------------------------------------------------------------------- masked_scatter


@lowers(aten.masked_scatter.default)
def masked_scatter(ctx, node, x, mask, source):
    """The k-th True of ``mask`` (row-major) takes ``source.flatten()[k]``; via cumsum + gather."""
    dtype = h.out_dtype(node)
    x = h.cast(x, dtype)
    xb = ops.broadcast(x, h.broadcast_shape(x, mask)).output(0)
    shape = h.shape_of(xb)
    mask = ops.broadcast(h.cast(mask, torch.bool), shape).output(0)
    src = h.cast(_flat(source), dtype)
    if _is_empty(src):
        return xb
    pos = ops.subtract(ops.cumsum(h.cast(_flat(mask), torch.int64), h.const(0, torch.int64)), h.const(1, torch.int64))
    hi = ops.subtract(h.dim(src, 0), h.const(1, torch.int64))
    eager_checks.holds(ctx, ops.less_equal(pos, hi).output(0))  # torch: source has too few elements
    pos = ops.minimum(ops.maximum(pos, h.const(0, torch.int64)), hi).output(0)
    gathered = ops.reshape(ops.gather(src, pos, h.const(0, torch.int64)), shape, False).output(0)
    return ops.select(mask, gathered, xb).output(0)


# ----------------------------------------------------------------------------- copy / fill


@lowers(aten.copy.default)
def copy(ctx, node, x, src, non_blocking=False):
    """``self.copy_(src)`` as a value: ``src`` broadcast to ``self``'s shape in ``self``'s dtype."""
    return ops.broadcast(h.cast(src, h.out_dtype(node)), h.shape_of(x)).output(0)


@lowers(aten.fill.Scalar, aten.fill.Tensor)
def fill(ctx, node, x, value):
    eager_checks.stays_int32(ctx, node, lambda: eager_checks.as_f32(value))
    value = h.cast(value, h.out_dtype(node))
    if h.rank(value) != 0:
        value = h.reshape(value, [])
    return ops.broadcast(value, h.shape_of(x)).output(0)


# ----------------------------------------------------------------------------- as_strided


def _strided_layout(node) -> tuple[list[int], list[int], int] | str:
    """(size, stride, storage_offset) when as_strided can be a constant gather, else why not."""
    x = h.meta(node.args[0])
    first = 2 if node.target is aten.as_strided_scatter.default else 1  # (self, src, size, ...)
    size, stride = node.args[first], node.args[first + 1]
    offset = node.args[first + 2] if len(node.args) > first + 2 else node.kwargs.get("storage_offset")
    offset = 0 if offset is None else offset
    if not all(isinstance(v, int) for v in (*x.shape, *size, *stride, offset)):
        return "as_strided needs static input shape, size, stride and storage_offset"
    if not isinstance(x.storage_offset(), int) or x.storage_offset() != 0 or not x.is_contiguous():
        return "as_strided of a non-contiguous or offset view reads storage OpenVINO does not have"
    if any(st < 0 for st in stride) or offset < 0:
        return "as_strided with negative stride or offset"
    numel = math.prod(x.shape)
    if math.prod(size) and offset + sum((s - 1) * st for s, st in zip(size, stride, strict=True)) >= numel:
        return "as_strided reads past the input's elements (into storage OpenVINO does not have)"
    return list(size), list(stride), offset


def _as_strided_ok(node):
    layout = _strided_layout(node)
    return layout if isinstance(layout, str) else None


def _strided_positions(size, stride, offset) -> np.ndarray:
    pos = np.full(size, offset, dtype=np.int64)
    for d, (s, st) in enumerate(zip(size, stride, strict=True)):
        shape = [1] * len(size)
        shape[d] = s
        pos = pos + (np.arange(s, dtype=np.int64) * st).reshape(shape)
    return pos


def view_base(node: torch.fx.Node) -> torch.fx.Node:
    """The tensor whose storage ``node``'s as_strided reads: up its chain of view ops."""
    x = node.args[0]
    while (
        x.op == "call_function"
        and isinstance(x.target, torch._ops.OpOverload)
        and x.target.is_view
        and isinstance(x.args[0], torch.fx.Node)
    ):
        x = x.args[0]
    return x


def _layout(t: torch.Tensor) -> tuple[list, list, object]:
    return list(t.shape), list(t.stride()), t.storage_offset()


def _hinted(layout: tuple[list, list, object]) -> tuple[list[int], list[int], int] | None:
    """``layout`` at the example input's sizes (SymInts replaced by their hints), None without hints."""
    sizes, strides, offset = layout
    if not all(has_guarding_hint(v) for v in (*sizes, *strides, offset)):
        return None
    concrete = [int(guarding_hint_or_throw(v)) for v in (*sizes, *strides, offset)]
    n = len(sizes)
    return concrete[:n], concrete[n : 2 * n], concrete[2 * n]


def _is_static(layout: tuple[list, list, object]) -> bool:
    sizes, strides, offset = layout
    return all(isinstance(v, int) for v in (*sizes, *strides, offset))


def _gather_index(read, held) -> np.ndarray | str:
    """The flat (logical) index into the ``held`` tensor of every element the as_strided ``read`` takes,
    or why not (both layouts concrete: sizes, strides, storage offset).

    as_strided addresses storage. OpenVINO only has values, so each storage position read is mapped
    back to the element of the held tensor (the first non-view ancestor, whose fake tensor records
    its strides and offset) that lives there: views in between (transpose, slice, expand, another
    as_strided) change nothing. Positions outside it (a graph input that is itself a view of a
    larger storage) cannot be read.
    """
    if any(st < 0 for st in read[1]) or read[2] < 0:
        return "as_strided with negative stride or offset"
    held_pos = _strided_positions(*held).reshape(-1)
    read_pos = _strided_positions(*read)
    if read_pos.size == 0:
        return read_pos
    lookup = np.full(int(max(held_pos.max(initial=0), read_pos.max())) + 1, -1, dtype=np.int64)
    lookup[held_pos] = np.arange(held_pos.size, dtype=np.int64)
    index = lookup[read_pos]
    if (index < 0).any():
        return "as_strided reads storage outside the tensor its view chain starts from"
    return index


def _storage_order(t: torch.Tensor) -> list[int] | None:
    """The dims of ``t`` from outermost to innermost in storage, when its elements fill their span of
    storage without gaps or overlaps for *every* size its symbols can take (proved on the symbolic
    strides, not just the example's); else None. Transposed into that order and flattened, ``t``
    is its own storage from ``t.storage_offset()`` on."""
    sizes, strides, _ = _layout(t)
    hinted = _hinted(_layout(t))
    if hinted is None:
        return None
    order = sorted(range(t.dim()), key=lambda d: (-hinted[1][d], -hinted[0][d]))
    expected: object = 1
    for d in reversed(order):
        if isinstance(sizes[d], int) and sizes[d] == 1:  # a size-1 dim's stride is never used
            continue
        if not statically_known_true(strides[d] == expected):
            return None
        expected = expected * sizes[d]
    return order


def _expr_nodes(node: torch.fx.Node, base: torch.fx.Node) -> list[torch.fx.Node]:
    """Nodes whose symbolic sizes can supply the symbols of a storage offset: the view chain."""
    chain, x = [], node
    while isinstance(x, torch.fx.Node):
        chain.append(x)
        if x is base or x.op != "call_function":
            break
        x = x.args[0]
    return chain


def _symbols_of(n: torch.fx.Node) -> set:
    val = n.meta.get("val")
    if isinstance(val, torch.SymInt):
        return {val.node.expr}
    if isinstance(val, torch.Tensor):
        return {s.node.expr for s in val.shape if isinstance(s, torch.SymInt)}
    return set()


def _lowerable(v: object, carriers: list[torch.fx.Node]) -> bool:
    """Whether :func:`_sym_value` can compute ``v`` from sizes of ``carriers``."""
    if isinstance(v, int):
        return True
    expr = v.node.expr
    known = set().union(*(_symbols_of(n) for n in carriers))
    kinds = (sympy.Integer, sympy.Symbol, sympy.Add, sympy.Mul, FloorDiv, PythonMod, Mod)
    return expr.free_symbols <= known and all(isinstance(e, kinds) for e in sympy.preorder_traversal(expr))


def _sym_value(ctx, v: object) -> h.Value:
    """A SymInt (a storage offset: sums and products of sizes) as an i64 scalar computed in the graph
    from the sizes of already lowered tensors that carry its symbols."""
    if isinstance(v, int):
        return h.const(v, torch.int64)
    sources: dict = {}
    for n, lowered in ctx.env.items():
        val = n.meta.get("val")
        if isinstance(val, torch.SymInt) and h.is_output(lowered):
            sources.setdefault(val.node.expr, lowered)
        elif isinstance(val, torch.Tensor) and h.is_output(lowered):
            for d, s in enumerate(val.shape):
                if isinstance(s, torch.SymInt):
                    sources.setdefault(s.node.expr, (lowered, d))

    def lower(e) -> ov.Output:
        if isinstance(e, sympy.Integer):
            return h.const(int(e), torch.int64)
        if isinstance(e, sympy.Symbol):
            if e not in sources:
                raise NotImplementedError(f"no lowered tensor carries the size {e}")
            src = sources[e]
            return h.dim(*src) if isinstance(src, tuple) else h.cast(src, torch.int64)
        args = [lower(a) for a in e.args]
        if isinstance(e, (sympy.Add, sympy.Mul)):
            combine = ops.add if isinstance(e, sympy.Add) else ops.multiply
            out = args[0]
            for a in args[1:]:
                out = combine(out, a).output(0)
            return out
        if isinstance(e, FloorDiv):
            return h.floor_div(*args)
        if isinstance(e, (PythonMod, Mod)):
            return h.floor_mod(*args)
        raise NotImplementedError(f"storage offset {e} has an operation the lowering does not compute")

    return lower(v.node.expr)


def _read_layout(node: torch.fx.Node) -> tuple[list, list, object]:
    """The storage layout an as_strided(_copy) reads, from its arguments: an as_strided_copy's own
    output is a fresh contiguous tensor whose strides are not the ones it read through."""

    def val(v: object) -> object:  # symbolic arguments are nodes in the graph
        return v.meta["val"] if isinstance(v, torch.fx.Node) else v

    _, size, stride, *rest = node.args
    offset = val(rest[0] if rest else node.kwargs.get("storage_offset"))
    if offset is None:
        offset = h.meta(node.args[0]).storage_offset()
    return [val(s) for s in size], [val(s) for s in stride], offset


def _as_strided_reason(node: torch.fx.Node, base: torch.fx.Node) -> np.ndarray | str | None:
    """The constant gather index (static layouts), None (symbolic layouts, positions computed in the
    graph), or why the as_strided cannot read ``base``'s values."""
    read, held = _read_layout(node), _layout(h.meta(base))
    if _is_static(read) and _is_static(held):
        return _gather_index(read, held)
    example = (_hinted(read), _hinted(held))
    if None in example:
        return "as_strided of sizes without an example value (data-dependent)"
    found = _gather_index(*example)
    if isinstance(found, str):
        return found
    if _storage_order(h.meta(base)) is None:
        return "as_strided with symbolic sizes needs the tensor its view chain starts from to fill its storage densely"
    carriers = _expr_nodes(node, base)
    if not (_lowerable(read[2], carriers) and _lowerable(held[2], carriers)):
        return "as_strided with a storage offset not computable from the sizes of its view chain"
    return None


def _as_strided_view_ok(node):
    found = _as_strided_reason(node, view_base(node))
    return found if isinstance(found, str) else None


@lowers(aten.as_strided.default, aten.as_strided_copy.default, validator=_as_strided_view_ok)
def as_strided(ctx, node, x, size, stride, storage_offset=None):
    """A Gather from the storage image of the view chain's base: a constant index for static layouts;
    with symbolic sizes, ``offset + sum(arange(size[d]) * stride[d])`` computed in the graph from the
    base transposed into storage order and flattened (positions past it, possible only for sizes
    other than the example's, gather 0 where torch raises or reads another tensor's storage)."""
    base = view_base(node)
    if base not in ctx.env:  # the chain starts outside this partition: read what the input holds
        base = node.args[0]
    found = _as_strided_reason(node, base)
    if isinstance(found, str):
        raise ValueError(found)
    if found is not None:
        if found.size == 0:
            return ops.broadcast(h.cast_like(0, x), h.const(list(size), torch.int64)).output(0)
        return ops.gather(_flat(ctx.env[base]), h.const(found, torch.int64), h.const(0, torch.int64)).output(0)
    held = h.meta(base)
    order = _storage_order(held)
    image = ctx.env[base]
    if order != list(range(held.dim())):
        image = h.transpose(image, order)
    if storage_offset is None:
        storage_offset = _sym_value(ctx, h.meta(node.args[0]).storage_offset())
    pos = ops.subtract(h.i64(storage_offset), _sym_value(ctx, held.storage_offset())).output(0)
    r = len(size)
    for d, (s, st) in enumerate(zip(size, stride, strict=True)):
        steps = ops.multiply(h.arange(s), h.i64(st)).output(0)
        pos = ops.add(pos, h.reshape(steps, [-1 if i == d else 1 for i in range(r)])).output(0)
    return ops.gather(_flat(image), pos, h.const(0, torch.int64)).output(0)


@lowers(aten.as_strided_scatter.default, validator=_as_strided_ok)
def as_strided_scatter(ctx, node, x, src, size, stride, storage_offset=None):
    size, stride, offset = _strided_layout(node)
    pos = _strided_positions(size, stride, offset).reshape(-1, 1)
    if pos.size == 0:
        return x
    src = h.cast(_flat(src), h.dtype_of(x))
    out = ops.scatter_nd_update(_flat(x), h.const(pos, torch.int64), src).output(0)
    return ops.reshape(out, h.shape_of(x), False).output(0)


# ----------------------------------------------------------------------------- embedding bags


def _embedding_bag_ok(node):
    args = list(node.args) + [None] * (9 - len(node.args))
    names = ("weight", "indices", "offsets", "scale_grad_by_freq", "mode", "sparse", "per_sample_weights")
    names += ("include_last_offset", "padding_idx")
    a = {n: node.kwargs.get(n, v) for n, v in zip(names, args, strict=True)}
    mode = 0 if a["mode"] is None else a["mode"]
    if mode not in (0, 1, 2):
        return f"embedding_bag mode {mode} is not sum/mean/max"
    if h.used_outputs(node) - {0}:
        return "only the bag values are produced (not offset2bag, bag_size or max_indices)"
    if h.meta(a["indices"]).dim() != 1 or h.meta(a["offsets"]).dim() != 1:
        return "embedding_bag expects 1-D indices and offsets"
    if a["per_sample_weights"] is not None and mode != 0:
        return "per_sample_weights only go with mode='sum'"
    if not h.meta(node.args[0]).dtype.is_floating_point:
        return "embedding_bag of a non-float weight"
    return None


def _offsets_checked(ctx, offsets, n) -> None:
    """What torch requires of the offsets: the first is 0, none decreases, the last is at most ``n``."""
    i64 = torch.int64
    eager_checks.holds(ctx, ops.less_equal(offsets, h.i64(n)).output(0))
    eager_checks.holds(
        ctx, ops.equal(ops.gather(offsets, h.const([0], i64), h.const(0, i64)), h.const(0, i64)).output(0)
    )
    earlier = ops.slice(offsets, h.const([0], i64), h.const([-1], i64), h.const([1], i64))
    later = ops.slice(offsets, h.const([1], i64), h.const([np.iinfo(np.int64).max], i64), h.const([1], i64))
    eager_checks.holds(ctx, ops.less_equal(earlier, later).output(0))


@lowers(aten._embedding_bag.default, aten._embedding_bag_forward_only.default, validator=_embedding_bag_ok)
def embedding_bag(
    ctx,
    node,
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=0,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    """Bag b reduces ``weight[indices[offsets[b]:offsets[b+1]]]``; empty bags give zeros.

    Each index position gets its bag id (how many bag starts are <= it, minus one) and the
    gathered rows are reduced into their bag with ScatterNDUpdate (sum, or max). Rows of
    ``padding_idx`` and positions past the last offset (``include_last_offset``) take no part.
    16-bit sums and means are computed in f32 and rounded once, as ATen's kernels accumulate
    (summed in bf16 by the plugin's bf16 kernels, a bag of 8 rows was 3.5x further from the exact
    sum than eager's, 1,331 of 2,048 values off; a bag count past 256 is no bf16 number).
    """
    indices = eager_checks.along(ctx, weight, 0, indices)
    out_dtype = h.dtype_of(weight)
    dtype = out_dtype if mode == 2 else h.opmath_dtype(out_dtype)
    i64 = torch.int64
    idx = h.cast(indices, i64)
    offs = h.cast(offsets, i64)
    n = _static_dim(idx, 0)
    _offsets_checked(ctx, offs, n)
    pos = h.arange(n)
    if include_last_offset:
        starts = ops.slice(offs, h.const([0], i64), h.const([-1], i64), h.const([1], i64)).output(0)
        end = ops.gather(offs, h.const(-1, i64), h.const(0, i64)).output(0)
        valid = ops.less(pos, end).output(0)
    else:
        starts, valid = offs, None
    nbags = _static_dim(starts, 0)
    seg = ops.reduce_sum(
        h.cast(ops.less_equal(h.unsqueeze(starts, 0), h.unsqueeze(pos, 1)).output(0), i64), h.const(1, i64)
    )
    seg = ops.maximum(ops.subtract(seg, h.const(1, i64)), h.const(0, i64)).output(0)
    seg = h.unsqueeze(seg, 1)  # [N, 1] ScatterND indices
    if padding_idx is not None and padding_idx >= 0:
        keep = ops.not_equal(idx, h.const(padding_idx, i64)).output(0)
        valid = keep if valid is None else ops.logical_and(valid, keep).output(0)
    rows = ops.gather(weight, idx, h.const(0, i64)).output(0)  # [N, D]
    rows = op_operand(rows) if dtype != out_dtype else rows
    if per_sample_weights is not None:
        rows = ops.multiply(rows, h.unsqueeze(h.cast(per_sample_weights, dtype), 1)).output(0)
    width = _static_dim(weight, 1)
    out_shape = h.as_shape([nbags, width])
    zero = h.const(0, dtype)
    if mode == 2:
        lowest = h.const(-np.inf, dtype)
        if valid is not None:
            rows = ops.select(h.unsqueeze(valid, 1), rows, lowest).output(0)
        init = ops.broadcast(lowest, out_shape).output(0)
        out = ops.scatter_nd_update(init, seg, rows, "max").output(0)
    else:
        if valid is not None:
            rows = ops.select(h.unsqueeze(valid, 1), rows, zero).output(0)
        out = ops.scatter_nd_update(ops.broadcast(zero, out_shape), seg, rows, "sum").output(0)
        if mode == 0:
            return (op_result(out, out_dtype), None, None, None)
    ones = ops.broadcast(h.const(1, dtype), h.as_shape([n])).output(0)
    if valid is not None:
        ones = ops.select(valid, ones, zero).output(0)
    counts = ops.scatter_nd_update(ops.broadcast(zero, h.as_shape([nbags])), seg, ones, "sum").output(0)
    counts = h.unsqueeze(counts, 1)
    if mode == 1:
        out = ops.divide(out, ops.maximum(counts, h.const(1, dtype))).output(0)
    else:
        out = ops.select(ops.greater(counts, zero), out, zero).output(0)
    return (op_result(out, out_dtype), None, None, None)
