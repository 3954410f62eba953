"""Reductions over dimensions."""

from __future__ import annotations

import openvino.opset16 as ops
import torch

from fxvino.lowering import eager_checks
from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers
from fxvino.lowering.rounding import op_result, opmath_operands

aten = torch.ops.aten


def _axes(x, dims):
    r = h.rank(x)
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return h.const(list(range(r)), torch.int64)
    return h.const(h.norm_dims(dims, r), torch.int64)


def _scalar_input(x):
    """Reductions over a 0-d tensor reduce nothing; OpenVINO wants rank >= 1 there."""
    return h.rank(x) == 0


@lowers(aten.sum.dim_IntList, aten.sum.default)
def sum_(ctx, node, x, dim=None, keepdim=False, *, dtype=None):
    if _scalar_input(x):
        return h.cast(x, h.out_dtype(node))
    eager_checks.stays_int32(ctx, node, lambda: eager_checks.total_magnitude(x, _axes(x, dim)))
    x = h.cast(x, h.wrapping_dtype(h.out_dtype(node)))
    return h.cast(ops.reduce_sum(x, _axes(x, dim), keepdim).output(0), h.out_dtype(node))


@lowers(aten.mean.dim, aten.mean.default)
def mean(ctx, node, x, dim=None, keepdim=False, *, dtype=None):
    x = h.cast(x, h.out_dtype(node))
    if _scalar_input(x):
        return x
    axes = _axes(x, dim)
    shape = h.static_shape(x)
    if any(shape[a] == 0 for a in axes.get_node().get_vector()):
        # ReduceMean over nothing gives 0; torch gives NaN (0/0). (Dynamo never makes a 0 size
        # symbolic, so a static check covers every empty reduction.)
        return ops.divide(ops.reduce_sum(x, axes, keepdim), h.const(float("nan"), h.dtype_of(x))).output(0)
    return ops.reduce_mean(x, axes, keepdim).output(0)


@lowers(aten.prod.dim_int, aten.prod.default)
def prod(ctx, node, x, dim=None, keepdim=False, *, dtype=None):
    if _scalar_input(x):
        return h.cast(x, h.out_dtype(node))
    eager_checks.stays_int32(ctx, node, lambda: eager_checks.product_magnitude(x, _axes(x, dim)))
    x = h.cast(x, h.wrapping_dtype(h.out_dtype(node)))
    return h.cast(ops.reduce_prod(x, _axes(x, dim), keepdim).output(0), h.out_dtype(node))


@lowers(aten.amax.default)
def amax(ctx, node, x, dim=(), keepdim=False):
    if _scalar_input(x):
        return x
    return h.reduce_extreme(x, _axes(x, dim), True, keepdim)


@lowers(aten.amin.default)
def amin(ctx, node, x, dim=(), keepdim=False):
    if _scalar_input(x):
        return x
    return h.reduce_extreme(x, _axes(x, dim), False, keepdim)


@lowers(aten.any.default, aten.any.dim, aten.any.dims)
def any_(ctx, node, x, dim=None, keepdim=False):
    x = h.cast(x, torch.bool)
    if _scalar_input(x):
        return x
    return ops.reduce_logical_or(x, _axes(x, dim), keepdim).output(0)


@lowers(aten.all.default, aten.all.dim, aten.all.dims)
def all_(ctx, node, x, dim=None, keepdim=False):
    x = h.cast(x, torch.bool)
    if _scalar_input(x):
        return x
    return ops.reduce_logical_and(x, _axes(x, dim), keepdim).output(0)


@lowers(aten.var.correction, aten.var.dim)
def var(ctx, node, x, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if node.target is aten.var.dim:
        correction = 1 if unbiased in (None, True) else 0
    elif correction is None:
        correction = 1
    # A 16-bit variance is computed in f32 and rounded once, as ATen's kernel does: in f16 the
    # plugin divided by a reciprocal of the count rounded to f16 (18 of 64 variances off eager's).
    out = h.out_dtype(node)
    (x,) = opmath_operands(node, h.cast(x, out))
    dtype = h.dtype_of(x)
    if _scalar_input(x):
        x = h.unsqueeze(x, 0)
        dim = None
    axes = _axes(x, dim)
    mu = ops.reduce_mean(x, axes, True)
    sq = ops.reduce_sum(ops.multiply(ops.subtract(x, mu), ops.subtract(x, mu)), axes, keepdim)
    n = ops.reduce_prod(ops.gather(h.shape_of(x), axes, h.const(0, torch.int64)), h.const(0, torch.int64), False)
    denom = ops.subtract(h.cast(n.output(0), dtype), h.const(correction, dtype))
    # torch divides by max(N - correction, 0): too few elements give 0/0 = nan (not a negative count).
    denom = ops.maximum(denom, h.const(0, dtype))
    return op_result(ops.divide(sq, denom).output(0), out)


@lowers(aten.var_mean.correction)
def var_mean(ctx, node, x, dim=None, *, correction=None, keepdim=False):
    """(var, mean): the variance as :func:`var` computes it, and the mean over the same dims."""
    variance = var(ctx, node, x, dim, keepdim=keepdim, correction=correction)
    mu = mean(ctx, node, x, dim, keepdim)
    return (variance, mu)


@lowers(aten.linalg_vector_norm.default)
def linalg_vector_norm(ctx, node, x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The p-norm over ``dim``: L1/L2 map to ReduceL1/ReduceL2, +-inf to max/min of |x|,
    0 to the count of non-zeros, any other p to sum(|x|^p)^(1/p)."""
    x = ops.abs(h.cast(x, h.out_dtype(node))).output(0)
    zero = h.cast_like(h.const(0.0, torch.float32), x)
    if ord == 0:
        x = h.cast_like(ops.not_equal(x, zero).output(0), x)
    if _scalar_input(x):
        return x
    axes = _axes(x, dim)
    if ord == 2:
        return ops.reduce_l2(x, axes, keepdim).output(0)
    if ord in (0, 1):
        return ops.reduce_sum(x, axes, keepdim).output(0)
    if ord == float("inf"):
        return ops.reduce_max(x, axes, keepdim).output(0)
    if ord == float("-inf"):
        return ops.reduce_min(x, axes, keepdim).output(0)
    p = h.cast_like(h.const(float(ord), torch.float32), x)
    powered = ops.reduce_sum(ops.power(x, p), axes, keepdim)
    return ops.power(powered, ops.divide(h.cast_like(h.const(1.0, torch.float32), x), p)).output(0)


@lowers(aten.dist.default)
def dist(ctx, node, a, b, p=2):
    """``torch.dist``: the p-norm of the broadcast difference over all its elements."""
    a, b = h.to_out(node, a, b)
    return linalg_vector_norm(ctx, node, ops.subtract(a, b).output(0), ord=float(p))
