"""Layer, group and batch norm: MVN / BatchNormInference / GroupNormalization kernels."""

from __future__ import annotations

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers
from fxvino.lowering.rounding import op_result, opmath_operands
from fxvino.utils.batch_norm import scale_and_shift
from fxvino.utils.dtypes import SIXTEEN_BIT_FLOATS

aten = torch.ops.aten


def _mean_rstd(x, axes, eps, keepdim=True):
    mean = ops.reduce_mean(x, axes, keepdim)
    centered = ops.subtract(x, ops.reduce_mean(x, axes, True))
    var = ops.reduce_mean(ops.multiply(centered, centered), axes, keepdim)
    rstd = ops.divide(h.const(1, h.dtype_of(x)), ops.sqrt(ops.add(var, h.const(eps, h.dtype_of(x)))))
    return mean.output(0), rstd.output(0)


@lowers(aten.native_layer_norm.default)
def native_layer_norm(ctx, node, x, normalized_shape, weight, bias, eps):
    """MVN, then the weight and bias. A 16-bit input is normalized and scaled in f32 and rounded
    once, as ATen's kernel computes it: with bf16 kernels the plugin rounded the bf16 MVN's
    output and product (868 of 4,096 values of an affine bf16 LayerNorm off eager's, 1.25x its
    error)."""
    r = h.rank(x)
    axes = h.const(list(range(r - len(normalized_shape), r)), torch.int64)
    (y,) = opmath_operands(node, x)
    y = ops.mvn(y, axes, True, float(eps), "inside_sqrt").output(0)
    if weight is not None:
        y = ops.multiply(y, h.cast_like(weight, y)).output(0)
    if bias is not None:
        y = ops.add(y, h.cast_like(bias, y)).output(0)
    y = op_result(y, h.out_dtype(node))
    used = h.used_outputs(node)
    if used <= {0}:
        return (y, None, None)
    mean, rstd = _mean_rstd(x, axes, eps)
    return (y, mean, rstd)


def _no_training(node):
    return None


@lowers(aten._native_batch_norm_legit_no_training.default)
def batch_norm_inference(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps):
    dtype = h.out_dtype(node)
    folded = _frozen_scale_and_shift(x, weight, bias, running_mean, running_var, eps)
    if folded is not None:
        y = ops.add(ops.multiply(x, folded[0]), folded[1]).output(0)
        return (h.cast(y, dtype), *_no_statistics(dtype))
    c = h.dim(x, 1)
    ones = ops.broadcast(h.const(1, dtype), h.unsqueeze(c, 0))
    zeros = ops.broadcast(h.const(0, dtype), h.unsqueeze(c, 0))
    # Mixed precision (autocast: bf16 activations, f32 statistics): BatchNormInference wants one
    # type. The statistics take the activations' type, as native bf16 inference does, so the
    # plugin still folds the normalisation into the preceding convolution (computing in f32
    # instead left ~100 per-call constant reorders in ResNet-50 and no fusion).
    w = weight if weight is not None else ones.output(0)
    b = bias if bias is not None else zeros.output(0)
    operands = [h.cast(v, h.dtype_of(x)) for v in (w, b, running_mean, running_var)]
    y = ops.batch_norm_inference(x, *operands, float(eps)).output(0)
    return (h.cast(y, dtype), *_no_statistics(dtype))


def _no_statistics(dtype: torch.dtype) -> tuple[ov.Output, ov.Output]:
    empty = h.const([], dtype)
    return empty, empty


def _frozen_scale_and_shift(x, weight, bias, mean, var, eps: float) -> tuple[ov.Output, ov.Output] | None:
    """For 16-bit activations and frozen statistics: eager's per-channel scale and shift, in f32
    by torch, rounded once to the activations' type; the plugin fuses them into the convolution
    before. Each statistic rounded to 16 bits first (BatchNormInference takes one type) put a
    ResNet-50 under autocast 2.1x further from f32 than eager's autocast, this 1.44x; applying
    them in f32 (eager's results exactly) made its calls 1.2x slower, the plugin fusing nothing."""
    dtype = h.dtype_of(x)
    if dtype not in SIXTEEN_BIT_FLOATS:
        return None
    params = (weight, bias, mean, var)
    values = [None if p is None else h.constant_value(p) for p in params]
    if any(v is None and p is not None for v, p in zip(values, params, strict=True)):
        return None  # statistics computed in the graph (not frozen)
    scale, shift = scale_and_shift(*values, eps)
    trailing = [1] * (h.rank(x) - 2)
    return tuple(h.owned_constant(v.to(dtype).view(-1, *trailing)) for v in (scale, shift))


@lowers(aten.native_group_norm.default)
def native_group_norm(ctx, node, x, weight, bias, n, c, hw, groups, eps):
    dtype = h.out_dtype(node)
    ch = h.dim(x, 1)
    if weight is None:
        weight = ops.broadcast(h.const(1, dtype), h.unsqueeze(ch, 0)).output(0)
    if bias is None:
        bias = ops.broadcast(h.const(0, dtype), h.unsqueeze(ch, 0)).output(0)
    if dtype == torch.bfloat16:
        # The CPU plugin has no bf16 GroupNormalization ("Unsupported operation" at compile on
        # bf16 machines): normalise in f32, as torch's bf16 kernel accumulates, and round once.
        x, weight, bias = (h.cast(v, torch.float32) for v in (x, weight, bias))
    y = h.cast(ops.group_normalization(x, weight, bias, int(groups), float(eps)).output(0), dtype)
    if h.used_outputs(node) <= {0}:
        return (y, None, None)
    grouped = ops.reshape(x, h.as_shape([n, groups, -1]), True).output(0)
    mean, rstd = _mean_rstd(grouped, h.const([2], torch.int64), eps, keepdim=False)
    return (y, h.cast(mean, h.out_dtype(node, 1)), h.cast(rstd, h.out_dtype(node, 2)))
