"""Views and layout: functional ATen views become Reshape/Transpose/Slice on values."""

from __future__ import annotations

import openvino as ov
import openvino.opset16 as ops
import torch
import torch.fx

from fxvino.lowering import helpers as h
from fxvino.lowering.ops import linalg
from fxvino.lowering.registry import lowers

aten = torch.ops.aten
INT64_MAX = 2**63 - 1


@lowers(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(ctx, node, x, size):
    shape = list(h.meta(node).shape)
    if 0 in shape and all(isinstance(s, int) for s in shape):
        # Nothing to move: an empty tensor of the shape. Reshaping a zero-size input can fail in
        # OpenVINO's compile passes (a Transpose feeding it becomes a Reshape that reads 0 as
        # "copy this dim", e.g. pixel_shuffle of a (1, 1, 0, 1) input).
        return ops.broadcast(h.cast_like(h.const(0, torch.int64), x), h.as_shape(shape)).output(0)
    product = _unflattened_product(node, x)
    if product is not None:
        return product
    copied = _copying_target(node, x, shape)
    if copied is not None:
        return ops.reshape(x, h.const(copied, torch.int64), True).output(0)
    return h.reshape(x, size)


_FLAT_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _same_size(a: int | torch.SymInt, b: int | torch.SymInt) -> bool:
    """Whether two sizes are the same by construction (equal ints or one symbolic expression)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, torch.SymInt) and isinstance(b, torch.SymInt):
        return a.node.expr == b.node.expr
    return False


def _unflattened_product(node: torch.fx.Node, x: ov.Output) -> ov.Output | None:
    """The N-d product itself when ``node`` unflattens an ``nn.Linear``'s 2-D result.

    ``nn.Linear`` over ``[*lead, K]`` reaches the graph as ``view(mm(view(x, [-1, K]), w),
    [*lead, N])``; ``mm`` multiplies the N-d ``x`` directly and flattens its product
    (``linalg._unflattened``, ``linalg.flattened_product``). Returning that product here, instead
    of reshaping it back, leaves no shape arithmetic behind: with dynamic sizes the target
    ``[*lead, N]`` is computed from the inputs' shapes at run time, and the logits of an exported
    LLM must come straight from their MatMul for OpenVINO GenAI to compute only the last
    position's (its slice-before-matmul).
    """
    mm = node.args[0]
    if not isinstance(mm, torch.fx.Node) or mm.target not in (aten.mm.default, aten.addmm.default):
        return None
    flat = mm.args[0] if mm.target is aten.mm.default else mm.args[1]
    if not isinstance(flat, torch.fx.Node) or flat.target not in _FLAT_VIEWS:
        return None
    source = flat.args[0]
    if not isinstance(source, torch.fx.Node) or not isinstance(source.meta.get("val"), torch.Tensor):
        return None
    lead_in, lead_out = list(h.meta(source).shape[:-1]), list(h.meta(node).shape[:-1])
    if len(lead_in) != len(lead_out) or not all(_same_size(a, b) for a, b in zip(lead_in, lead_out, strict=True)):
        return None
    product = linalg.flattened_product(x)
    return product if product is not None and h.rank(product) == len(lead_out) + 1 else None


def _copying_target(node: torch.fx.Node, x: ov.Output, shape: list) -> list[int] | None:
    """A constant Reshape target (``special_zero``) for a view whose symbolic sizes are the
    input's own at the same positions, e.g. ``[b, s, H] -> [b, s, heads, head_dim]``: 0 copies
    the input's dim. Without it the target is gathered from the inputs' shapes at run time,
    which the CPU plugin's attention and RoPE patterns do not see through. None when a static
    size is 0 (it would read as "copy") or a symbolic one has no same-position twin."""
    if all(isinstance(s, int) for s in shape):
        return None  # a constant target already
    source = node.args[0]
    if not isinstance(source, torch.fx.Node) or not isinstance(source.meta.get("val"), torch.Tensor):
        return None
    in_shape = list(h.meta(source).shape)
    if h.rank(x) != len(in_shape):
        return None
    target = []
    for i, size in enumerate(shape):
        if isinstance(size, int):
            if size <= 0:
                return None
            target.append(size)
        elif i < len(in_shape) and _same_size(size, in_shape[i]):
            target.append(0)
        else:
            return None
    return target


@lowers(aten.permute.default)
def permute(ctx, node, x, dims):
    r = h.rank(x)
    return h.transpose(x, [h.norm_dim(d, r) for d in dims])


@lowers(aten.t.default)
def t(ctx, node, x):
    return h.transpose(x, [1, 0]) if h.rank(x) == 2 else x


@lowers(aten.transpose.int)
def transpose(ctx, node, x, dim0, dim1):
    r = h.rank(x)
    order = list(range(r))
    if r:
        a, b = h.norm_dim(dim0, r), h.norm_dim(dim1, r)
        order[a], order[b] = order[b], order[a]
    return h.transpose(x, order)


@lowers(
    aten.clone.default,
    aten.alias.default,
    aten.lift_fresh_copy.default,
    aten.contiguous.default,
    aten.detach.default,
    aten._assert_tensor_metadata.default,
)
def identity(ctx, node, x, *args, **kwargs):
    return x


@lowers(aten.expand.default)
def expand(ctx, node, x, size, *, implicit=False):
    r = h.rank(x)
    lead = len(size) - r
    target = []
    for i, s in enumerate(size):
        if isinstance(s, int) and s == -1:
            s = h.dim(x, i - lead)
        target.append(s)
    return ops.broadcast(x, h.as_shape(target)).output(0)


@lowers(aten.unsqueeze.default)
def unsqueeze(ctx, node, x, dim):
    return h.unsqueeze(x, h.norm_dim(dim, h.rank(x) + 1))


@lowers(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def squeeze(ctx, node, x, dim=None):
    r = h.rank(x)
    if r == 0:
        return x
    out_shape = h.meta(node).shape
    dims = h.norm_dims(dim, r) if dim is not None else list(range(r))
    # Squeeze only the dims torch squeezed (size 1); the meta shape tells which.
    in_shape = h.meta(node.args[0]).shape
    drop = [d for d in dims if isinstance(in_shape[d], int) and in_shape[d] == 1]
    if not drop:
        return x
    assert len(out_shape) == r - len(drop)
    return h.squeeze(x, drop)


@lowers(aten.cat.default)
def cat(ctx, node, tensors, dim=0):
    dtype = h.out_dtype(node)
    r = len(h.meta(node).shape)
    # torch skips 1-D empty tensors in cat (legacy behaviour).
    parts = [h.cast(t, dtype) for t in tensors if not (h.rank(t) == 1 and h.static_shape(t) == [0] and r != 1)]
    if len(parts) == 1:
        return parts[0]
    return ops.concat(parts, h.norm_dim(dim, r)).output(0)


@lowers(aten.slice.Tensor)
def slice_(ctx, node, x, dim=0, start=None, end=None, step=1):
    r = h.rank(x)
    d = h.norm_dim(dim, r)
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    if isinstance(end, int) and end >= INT64_MAX:
        end = INT64_MAX
    return ops.slice(x, h.i64([start]), h.i64([end]), h.i64([step]), h.const([d], torch.int64)).output(0)


@lowers(aten.select.int)
def select(ctx, node, x, dim, index):
    d = h.norm_dim(dim, h.rank(x))
    if isinstance(index, int) and index < 0:
        index = ops.add(h.dim(x, d), h.const(index, torch.int64)).output(0)
    return ops.gather(x, h.i64(index), h.const(d, torch.int64)).output(0)


@lowers(aten.split_with_sizes.default, aten.split_with_sizes_copy.default)
def split_with_sizes(ctx, node, x, split_sizes, dim=0):
    d = h.norm_dim(dim, h.rank(x))
    parts = ops.variadic_split(x, h.const(d, torch.int64), h.as_shape(split_sizes))
    return [parts.output(i) for i in range(len(split_sizes))]


@lowers(aten.split.Tensor)
def split(ctx, node, x, split_size, dim=0):
    sizes = [t.shape[h.norm_dim(dim, h.rank(x))] for t in h.meta(node)]
    return split_with_sizes(ctx, node, x, sizes, dim)


@lowers(aten.unbind.int)
def unbind(ctx, node, x, dim=0):
    d = h.norm_dim(dim, h.rank(x))
    n = len(h.meta(node))
    parts = ops.split(x, h.const(d, torch.int64), n)
    return [h.squeeze(parts.output(i), d) for i in range(n)]


@lowers(aten.flip.default)
def flip(ctx, node, x, dims):
    r = h.rank(x)
    out = x
    for d in h.norm_dims(dims, r):
        out = ops.slice(
            out,
            h.const([-1], torch.int64),
            h.const([-INT64_MAX], torch.int64),
            h.const([-1], torch.int64),
            h.const([d], torch.int64),
        ).output(0)
    return out


@lowers(aten.roll.default)
def roll(ctx, node, x, shifts, dims=()):
    if not dims:
        flat = h.reshape(x, [-1])
        rolled = ops.roll(flat, h.const(list(shifts), torch.int64), h.const([0], torch.int64)).output(0)
        return ops.reshape(rolled, h.shape_of(x), False).output(0)
    r = h.rank(x)
    return ops.roll(
        x, h.const(list(shifts), torch.int64), h.const([h.norm_dim(d, r) for d in dims], torch.int64)
    ).output(0)


@lowers(aten.unfold.default)
def unfold(ctx, node, x, dimension, size, step):
    """``x.unfold(dim, size, step)``: window ``i`` along ``dim`` is ``x[i*step : i*step+size]``,
    as a new last axis. One Gather with an ``[n, size]`` index (``i*step + j``), then the window
    axis moves to the end."""
    r = h.rank(x)
    if r == 0:  # a 0-d tensor unfolds into one window of its single value
        return h.unsqueeze(x, 0)
    d = h.norm_dim(dimension, r)
    length = h.dim(x, d)
    if isinstance(length, int) or h.static_shape(x)[d] is not None:
        count = (h.static_shape(x)[d] - size) // step + 1
    else:
        count = ops.add(
            h.floor_div(ops.subtract(length, h.const(size, torch.int64)), h.const(step, torch.int64)),
            h.const(1, torch.int64),
        ).output(0)
    starts = ops.multiply(h.arange(count), h.const(step, torch.int64))
    index = ops.add(h.unsqueeze(starts.output(0), 1), h.unsqueeze(h.arange(size), 0)).output(0)
    windows = ops.gather(x, index, h.const(d, torch.int64)).output(0)  # [..., n, size, ...]
    order = [*range(d + 1), *range(d + 2, r + 1), d + 1]
    return h.transpose(windows, order)


@lowers(aten.view_copy.default)
def view_copy(ctx, node, x, size):
    return view(ctx, node, x, size)


@lowers(aten.permute_copy.default)
def permute_copy(ctx, node, x, dims):
    return permute(ctx, node, x, dims)


@lowers(aten.narrow_copy.default)
def narrow_copy(ctx, node, x, dim, start, length):
    d = h.norm_dim(dim, h.rank(x))
    size = h.static_shape(x)[d]
    start = h.wrap_negative(start, size if size is not None else h.dim(x, d))
    if isinstance(start, int) and isinstance(length, int):
        return slice_(ctx, node, x, d, start, start + length)
    end = ops.add(h.i64(start), h.i64(length)).output(0)
    return slice_(ctx, node, x, d, start, end)


@lowers(aten.unbind_copy.int)
def unbind_copy(ctx, node, x, dim=0):
    return unbind(ctx, node, x, dim)
