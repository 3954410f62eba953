"""Gathers, embedding lookup and advanced indexing."""

from __future__ import annotations

import openvino.opset16 as ops
import torch

from fxvino.lowering import eager_checks
from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten.embedding.default)
def embedding(ctx, node, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    indices = eager_checks.along(ctx, weight, 0, indices)
    return ops.gather(weight, h.cast(indices, torch.int64), h.const(0, torch.int64)).output(0)


@lowers(aten.index_select.default)
def index_select(ctx, node, x, dim, index):
    index = eager_checks.along(ctx, x, dim, index)
    d = h.norm_dim(dim, h.rank(x))
    if h.rank(x) == 0:
        return x
    return ops.gather(x, h.cast(index, torch.int64), h.const(d, torch.int64)).output(0)


@lowers(aten.gather.default)
def gather(ctx, node, x, dim, index, *, sparse_grad=False):
    index = eager_checks.along(ctx, x, dim, index)
    if h.rank(x) == 0 or h.rank(index) != h.rank(x):
        # torch allows these only when every index is 0 (a 0-d x) or there is no index at all (an
        # empty index of another rank): the result is x's one value, or nothing, in index's shape.
        scalar = x if h.rank(x) == 0 else h.cast_like(h.const(0, torch.int64), x)
        return ops.broadcast(scalar, h.shape_of(index)).output(0)
    d = h.norm_dim(dim, h.rank(x))
    index = h.cast(index, torch.int64)
    # torch allows index smaller than x in non-gather dims: slice x down to index's extent.
    ishape, xshape = h.static_shape(index), h.static_shape(x)
    if ishape != xshape or None in ishape:
        ends = [h.dim(index, i) if i != d else h.dim(x, i) for i in range(h.rank(x))]
        # StridedSlice, not Slice: the CPU plugin drops a Slice feeding GatherElements and then
        # rejects the shapes (OpenVINO 2026.4).
        zeros = [0] * h.rank(x)
        x = ops.strided_slice(
            x, h.const(zeros, torch.int64), h.as_shape(ends), h.const([1] * h.rank(x), torch.int64), zeros, zeros
        ).output(0)
    return ops.gather_elements(x, index, d).output(0)


def _index_ok(node: torch.fx.Node) -> str | None:
    indices = node.args[1]
    for i in indices:
        if i is not None and h.meta(i).dtype in (torch.bool, torch.uint8) and h.meta(i).dim() == 0:
            return "indexing with a 0-d boolean mask"
    return None


def _mask_to_positions(indices: list) -> list:
    """Boolean masks become the int index tensors of their True positions (NonZero), one per dim
    they cover: ``x[mask]`` is ``x[mask.nonzero().unbind(1)]`` (a data-dependent size)."""
    out: list = []
    for i in indices:
        if i is None or h.dtype_of(i) not in (torch.bool, torch.uint8):
            out.append(i)
            continue
        found = ops.non_zero(i, "i64").output(0)  # [rank, N]
        rank = h.rank(i)
        if rank == 1:
            out.append(h.squeeze(found, 0))
        else:
            parts = ops.split(found, h.const(0, torch.int64), rank)
            out.extend(h.squeeze(parts.output(k), 0) for k in range(rank))
    return out


@lowers(aten.index.Tensor, validator=_index_ok)
def index(ctx, node, x, indices):
    """x[i0, i1, ...] with broadcastable int index tensors (None keeps a dim whole).

    Indexed dims move to the front and GatherND picks them; torch keeps the result dims in
    place of the indexed block when those dims are adjacent, else puts them first.
    """
    indices = _mask_to_positions(eager_checks.each_along(ctx, x, indices))
    r = h.rank(x)
    present = [d for d, i in enumerate(indices) if i is not None]
    rest = [d for d in range(r) if d not in present]
    xt = h.transpose(x, present + rest) if present != list(range(len(present))) else x
    idx = [h.cast(indices[d], torch.int64) for d in present]
    target = h.broadcast_shape(*idx)
    brank = max(h.rank(i) for i in idx)
    wrapped = []
    for d, i in zip(present, idx, strict=True):
        i = h.wrap_negative(i, h.dim(x, d))
        wrapped.append(h.unsqueeze(ops.broadcast(i, target).output(0), brank))
    stacked = ops.concat(wrapped, brank).output(0) if len(wrapped) > 1 else wrapped[0]
    out = ops.gather_nd(xt, stacked, 0).output(0)
    lead = present[0]
    adjacent = present == list(range(lead, lead + len(present)))
    if adjacent and lead != 0:
        out_rank = len(h.meta(node).shape)
        order = list(range(brank, brank + lead)) + list(range(brank)) + list(range(brank + lead, out_rank))
        out = h.transpose(out, order)
    return out
