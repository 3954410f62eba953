"""Max, average and adaptive pooling."""

from __future__ import annotations

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


def _expand(v, n, default=None):
    v = list(v) if v else list(default or [])
    return v * n if len(v) == 1 else v


def _maxpool_ok(node: torch.fx.Node) -> str | None:
    if h.used_outputs(node) - {0, 1}:
        return "unexpected outputs"
    return None


@lowers(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default, validator=_maxpool_ok)
def max_pool_with_indices(ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    spatial = 2 if node.target is aten.max_pool2d_with_indices.default else 3
    kernel = _expand(kernel_size, spatial)
    stride = _expand(stride, spatial, kernel)
    padding = _expand(padding if isinstance(padding, (list, tuple)) else [padding], spatial)
    dilation = _expand(dilation if isinstance(dilation, (list, tuple)) else [dilation], spatial)
    pool = ops.max_pool(
        x,
        stride,
        dilation,
        padding,
        padding,
        kernel,
        rounding_type="ceil_torch" if ceil_mode else "floor",
        index_element_type="i64",
        axis=2,
    )
    return (pool.output(0), pool.output(1))


def _avgpool_ok(node: torch.fx.Node) -> str | None:
    override = node.args[6] if len(node.args) > 6 else node.kwargs.get("divisor_override")
    return "divisor_override is not lowered" if override is not None else None


@lowers(aten.avg_pool2d.default, aten.avg_pool3d.default, aten.avg_pool1d.default, validator=_avgpool_ok)
def avg_pool(
    ctx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    spatial = h.rank(x) - 2
    kernel = _expand(kernel_size, spatial)
    stride = _expand(stride, spatial, kernel)
    padding = _expand(padding if isinstance(padding, (list, tuple)) else [padding], spatial)
    return ops.avg_pool(
        x,
        stride,
        padding,
        padding,
        kernel,
        not count_include_pad,
        rounding_type="ceil_torch" if ceil_mode else "floor",
        dilations=[1] * spatial,  # omitting them crashes compile_model (opset16 AvgPool)
    ).output(0)


def _batched(x, output_size) -> tuple[ov.Output, bool]:
    """OpenVINO's adaptive pools need (N, C, *spatial); PyTorch also takes unbatched (C, *spatial)."""
    unbatched = h.rank(x) == len(output_size) + 1
    return (h.unsqueeze(x, 0) if unbatched else x), unbatched


@lowers(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool1d.default)
def adaptive_avg_pool(ctx, node, x, output_size):
    x, unbatched = _batched(x, output_size)
    out = ops.adaptive_avg_pool(x, h.as_shape(output_size)).output(0)
    return h.squeeze(out, 0) if unbatched else out


@lowers(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool1d.default)
def adaptive_max_pool(ctx, node, x, output_size):
    x, unbatched = _batched(x, output_size)
    # i32 indices: the CPU plugin rejects an i64 index output ("does not support i64 for use with oneDNN").
    pool = ops.adaptive_max_pool(x, h.as_shape(output_size), "i32")
    values, indices = pool.output(0), h.cast(pool.output(1), torch.int64)
    if unbatched:
        values, indices = h.squeeze(values, 0), h.squeeze(indices, 0)
    return (values, indices)
