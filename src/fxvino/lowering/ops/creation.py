"""Tensors created inside the graph: full, arange, *_like, scalar_tensor."""

from __future__ import annotations

import openvino.opset16 as ops
import torch

from fxvino.lowering import eager_checks
from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers
from fxvino.utils.dtypes import ov_type

aten = torch.ops.aten


@lowers(aten.full.default)
def full(ctx, node, size, fill_value, **kwargs):
    eager_checks.stays_int32(ctx, node, lambda: eager_checks.as_f32(fill_value))
    dtype = h.out_dtype(node)
    return ops.broadcast(h.cast(fill_value, dtype), h.as_shape(size)).output(0)


@lowers(aten.scalar_tensor.default)
def scalar_tensor(ctx, node, value, **kwargs):
    eager_checks.stays_int32(ctx, node, lambda: eager_checks.as_f32(value))
    return h.cast(value, h.out_dtype(node))


@lowers(aten.full_like.default)
def full_like(ctx, node, x, fill_value, **kwargs):
    eager_checks.stays_int32(ctx, node, lambda: eager_checks.as_f32(fill_value))
    return ops.broadcast(h.cast(fill_value, h.out_dtype(node)), h.shape_of(x)).output(0)


@lowers(aten.zeros_like.default, aten.ones_like.default)
def zeros_ones_like(ctx, node, x, **kwargs):
    value = 0 if node.target is aten.zeros_like.default else 1
    return ops.broadcast(h.const(value, h.out_dtype(node)), h.shape_of(x)).output(0)


@lowers(aten.zeros.default, aten.ones.default)
def zeros_ones(ctx, node, size, **kwargs):
    value = 0 if node.target is aten.zeros.default else 1
    return ops.broadcast(h.const(value, h.out_dtype(node)), h.as_shape(size)).output(0)


# torch leaves empty tensors uninitialised; zeros are one valid reading of that memory.
@lowers(aten.empty.memory_format, aten.empty_strided.default, aten.empty_permuted.default)
def empty(ctx, node, size, *args, **kwargs):
    return ops.broadcast(h.const(0, h.out_dtype(node)), h.as_shape(size)).output(0)


@lowers(aten.empty_like.default)
def empty_like(ctx, node, x, **kwargs):
    return ops.broadcast(h.const(0, h.out_dtype(node)), h.shape_of(x)).output(0)


@lowers(aten.new_empty_strided.default, aten.new_empty.default)
def new_empty(ctx, node, x, size, *args, **kwargs):
    """``x.new_empty*(size)``: as ``empty``, with ``x`` only lending its dtype (backward graphs of
    Longformer's global attention make their gradient buffers this way)."""
    return empty(ctx, node, size)


@lowers(aten.arange.start_step, aten.arange.default, aten.arange.start)
def arange(ctx, node, *args, **kwargs):
    dtype = h.out_dtype(node)
    if node.target is aten.arange.default:
        start, end, step = 0, args[0], 1
    elif node.target is aten.arange.start:
        start, end, step = args[0], args[1], 1
    else:
        start, end, step = args[0], args[1], args[2] if len(args) > 2 else 1
    bound = lambda: ops.maximum(*(ops.abs(eager_checks.as_f32(e)) for e in (start, end))).output(0)  # noqa: E731
    eager_checks.stays_int32(ctx, node, bound)
    # Compute in f64/i64 then convert, as torch does for the element count.
    work = torch.int64 if not dtype.is_floating_point else torch.float32
    out = ops.range(h.cast(start, work), h.cast(end, work), h.cast(step, work), ov_type(work).get_type_name())
    return h.cast(out.output(0), dtype)
