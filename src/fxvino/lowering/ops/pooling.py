"""Max, average and adaptive pooling."""

from __future__ import annotations

import itertools
import math

import numpy as np
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


def _fit_kernel(node: torch.fx.Node, kernel: list[int], padding: list[int], dilation: list[int]) -> list[int]:
    """The kernel cut to the padded input where it is larger (static sizes, no dilation).

    With ``ceil_mode`` PyTorch accepts a window larger than the padded input (EfficientNet's
    head pools a 7x7 map with kernel 1280) and gives one output over the whole padded extent,
    averaged over ``min(kernel, size + 2 * pad)``; OpenVINO rejects such a kernel. The cut kernel
    computes the same window and divisor.
    """
    sizes = list(h.meta(node.args[0]).shape)[-len(kernel) :]
    return [
        min(k, i + 2 * p) if isinstance(i, int) and d == 1 else k
        for k, i, p, d in zip(kernel, sizes, padding, dilation, strict=True)
    ]


@lowers(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default, validator=_maxpool_ok)
def max_pool_with_indices(ctx, node, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    spatial = 2 if node.target is aten.max_pool2d_with_indices.default else 3
    kernel = _expand(kernel_size, spatial)
    stride = _expand(stride, spatial, kernel)
    padding = _expand(padding if isinstance(padding, (list, tuple)) else [padding], spatial)
    dilation = _expand(dilation if isinstance(dilation, (list, tuple)) else [dilation], spatial)
    kernel = _fit_kernel(node, kernel, padding, dilation)
    x, unbatched = _batched(x, kernel)
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
    values, indices = pool.output(0), pool.output(1)
    if 1 in h.used_outputs(node):
        found = _window_argmax(x, values, kernel, stride, padding, dilation)
        values, indices = found if found is not None else (values, indices)
    if unbatched:  # indices count within each channel's plane, so they need no change
        values, indices = h.squeeze(values, 0), h.squeeze(indices, 0)
    return (values, indices)


def _window_argmax(x, values, kernel, stride, padding, dilation) -> tuple[ov.Output, ov.Output] | None:
    """MaxPool's values and indices by a scan over the window offsets (static float sizes), else
    None; ``values`` (OpenVINO's MaxPool) gives the output sizes only.

    The CPU plugin runs a MaxPool whose indices are used in a reference kernel: ResNet-50's stem
    pool took 495 ms of a 780 ms batch-8 training forward, against 4 ms for the values alone.
    Each window offset is a strided slice of the input padded with -inf; the index is PyTorch's:
    the first in-bounds position holding the maximum in scan order, or the last NaN, and the value
    is read there (OpenVINO's own value differs for a window of -inf or one holding NaN). One
    scan finds both, as PyTorch's kernel does; matching each offset against the MaxPool's values
    and then each against NaN took 54 ops and the MaxPool.
    """
    if not h.dtype_of(x).is_floating_point:
        return None
    sizes = h.static_shape(x)
    spatial = len(kernel)
    in_sizes, out_sizes = sizes[-spatial:], h.static_shape(values)[-spatial:]
    if None in in_sizes or None in out_sizes:
        return None
    pad_end = [
        max(0, (o - 1) * s + (k - 1) * d + 1 - (i + p))
        for o, s, k, d, i, p in zip(out_sizes, stride, kernel, dilation, in_sizes, padding, strict=True)
    ]
    lowest = h.cast_like(float("-inf"), x)
    xp = ops.pad(
        x, h.const([0, 0, *padding], torch.int64), h.const([0, 0, *pad_end], torch.int64), "constant", lowest
    ).output(0)
    axes = h.const(list(range(2, 2 + spatial)), torch.int64)
    grids = np.meshgrid(*[np.arange(o) for o in out_sizes], indexing="ij")
    plane_strides = [math.prod(in_sizes[a + 1 :]) for a in range(spatial)]
    windows = []  # (slice, flat index in the input plane) per offset, in scan order
    first = np.full(out_sizes, -1, np.int32)  # PyTorch's index where no value beats -inf
    for offset in itertools.product(*[range(k) for k in kernel]):
        coords = [g * s - p + k * d for g, s, p, k, d in zip(grids, stride, padding, offset, dilation, strict=True)]
        inside = np.logical_and.reduce([(c >= 0) & (c < i) for c, i in zip(coords, in_sizes, strict=True)])
        if not inside.any():
            continue
        begin = [k * d for k, d in zip(offset, dilation, strict=True)]
        end = [b + (o - 1) * s + 1 for b, o, s in zip(begin, out_sizes, stride, strict=True)]
        window = ops.slice(
            xp, h.const(begin, torch.int64), h.const(end, torch.int64), h.const(stride, torch.int64), axes
        ).output(0)
        flat = sum(c * ps for c, ps in zip(coords, plane_strides, strict=True)).astype(np.int32)
        first = np.where((first < 0) & inside, flat, first)
        windows.append((window, h.const(flat, torch.int32)))

    # PyTorch's scan, offset by offset over whole planes: a value replaces the running maximum
    # when it is greater or NaN, so the first maximum and the last NaN win. Positions outside
    # the input hold -inf, which never does. (Less, not Greater: the plugin's Greater is true
    # when either side is NaN, its Less is false, as IEEE's comparisons are.)
    index, value = h.const(first, torch.int32), lowest
    for window, flat in windows:
        taken = ops.logical_or(ops.less(value, window), ops.is_nan(window)).output(0)
        index, value = ops.select(taken, flat, index).output(0), ops.select(taken, window, value).output(0)
    return value, h.cast(index, torch.int64)


_AVG_SPATIAL = {aten.avg_pool1d.default: 1, aten.avg_pool2d.default: 2, aten.avg_pool3d.default: 3}


def _static_spatial(node: torch.fx.Node) -> tuple[list[int], list[int]] | None:
    """(input, output) spatial sizes when both are static."""
    out = list(h.meta(node).shape)
    spatial = _AVG_SPATIAL[node.target]
    inp = list(h.meta(node.args[0]).shape)[-spatial:]
    sizes = inp + out[-spatial:]
    return (inp, out[-spatial:]) if all(isinstance(s, int) for s in sizes) else None


def _avgpool_ok(node: torch.fx.Node) -> str | None:
    override = node.args[6] if len(node.args) > 6 else node.kwargs.get("divisor_override")
    if override and _static_spatial(node) is None:
        return "divisor_override needs static spatial sizes"
    if not h.out_dtype(node).is_floating_point and _static_spatial(node) is None:
        return "an integer average pool needs static spatial sizes (its divisors are constants)"
    return None


def avg_divisors(in_sizes, out_sizes, kernel, stride, padding, count_include_pad, divisor_override) -> np.ndarray:
    """ATen's per-output-position divisor of avg_pool (ceil mode and padding included)."""
    per_axis_full, per_axis_clip = [], []
    for i, o, k, s, p in zip(in_sizes, out_sizes, kernel, stride, padding, strict=True):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, i + p)
        per_axis_full.append(end - start)
        per_axis_clip.append(np.minimum(end, i) - np.maximum(start, 0))
    if divisor_override:
        return np.full(out_sizes, divisor_override, np.float64)
    parts = per_axis_full if count_include_pad else per_axis_clip
    div = parts[0].astype(np.float64)
    for p in parts[1:]:
        div = np.multiply.outer(div, p)
    return np.where(div > 0, div, 1)


@lowers(aten.avg_pool2d.default, aten.avg_pool3d.default, aten.avg_pool1d.default, validator=_avgpool_ok)
def avg_pool(
    ctx, node, x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None
):
    spatial = _AVG_SPATIAL[node.target]
    kernel = _expand(kernel_size, spatial)
    stride = _expand(stride, spatial, kernel)
    padding = _expand(padding if isinstance(padding, (list, tuple)) else [padding], spatial)
    shape = list(h.meta(node).shape)
    if 0 in shape and all(isinstance(s, int) for s in shape):
        # Nothing to average (AvgPool rejects a zero batch): an empty tensor of the shape.
        return ops.broadcast(h.cast_like(0, x), h.as_shape(shape)).output(0)
    kernel = _fit_kernel(node, kernel, padding, [1] * spatial)
    x, unbatched = _batched(x, kernel)
    args = (node, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    out = _avg_pool(*args) if h.out_dtype(node).is_floating_point else _integer_avg_pool(*args)
    return h.squeeze(out, 0) if unbatched else out


def _integer_avg_pool(node, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    """torch's integer average: the exact window sum divided by ATen's divisor, truncated.

    AvgPool computes in float and rounds to nearest (7 / 3 gave 2.33 -> 2 but -2 / 3 gave -1,
    torch 0), and a float sum is not exact beyond 2^24: the windows are summed as strided slices
    in integer arithmetic instead, and divided with the exact integer division.
    """
    inp, out = _static_spatial(node)
    dtype = h.wrapping_dtype(h.out_dtype(node))
    x = h.cast(x, dtype)
    # Zero-pad so that every window, a ceil_mode overhang included, lies inside.
    extra = [
        max(0, (o - 1) * s + k - (i + 2 * p)) for i, o, s, k, p in zip(inp, out, stride, kernel, padding, strict=True)
    ]
    begins = h.const([0, 0, *padding], torch.int64)
    ends = h.const([0, 0, *(p + e for p, e in zip(padding, extra, strict=True))], torch.int64)
    x = ops.pad(x, begins, ends, "constant", h.const(0, dtype)).output(0)
    axes = h.const(list(range(2, 2 + len(kernel))), torch.int64)
    total = None
    for offset in itertools.product(*[range(k) for k in kernel]):
        end = [b + (o - 1) * s + 1 for b, o, s in zip(offset, out, stride, strict=True)]
        window = ops.slice(
            x, h.const(list(offset), torch.int64), h.const(end, torch.int64), h.const(stride, torch.int64), axes
        )
        total = window.output(0) if total is None else ops.add(total, window).output(0)
    divisors = avg_divisors(inp, out, kernel, stride, padding, count_include_pad, divisor_override)
    return h.trunc_div(total, h.const(divisors.astype(np.int64), dtype))


def _avg_pool(node, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    spatial = len(kernel)

    def pool(x, pads, exclude_pad, ceil=ceil_mode):
        rounding = "ceil_torch" if ceil else "floor"
        # Explicit dilations: omitting them crashes compile_model (opset16 AvgPool).
        return ops.avg_pool(x, stride, pads, pads, kernel, exclude_pad, rounding, dilations=[1] * spatial).output(0)

    if not count_include_pad and divisor_override is None:
        return pool(x, padding, True)
    begins = h.const([0, 0, *padding], torch.int64)
    if divisor_override is None:
        # PyTorch counts the zero padding but not a ceil_mode window's overhang past it: pad
        # explicitly and let AvgPool exclude only the overhang.
        x = ops.pad(x, begins, begins, "constant", h.cast_like(0, x)).output(0)
        return pool(x, [0] * spatial, True)
    # The window sums over divisor_override. Zero-pad far enough that no window overhangs, so
    # the mean of every window is its sum over the kernel size.
    inp, out = _static_spatial(node) or ([], [])
    extra = [
        max(0, (o - 1) * s + k - (i + 2 * p)) for i, o, s, k, p in zip(inp, out, stride, kernel, padding, strict=True)
    ]
    ends = h.const([0, 0, *(p + e for p, e in zip(padding, extra, strict=True))], torch.int64)
    x = ops.pad(x, begins, ends, "constant", h.cast_like(0, x)).output(0)
    mean = pool(x, [0] * spatial, False, ceil=False)
    return ops.multiply(mean, h.cast_like(math.prod(kernel) / divisor_override, x)).output(0)


def _batched(x, output_size) -> tuple[ov.Output, bool]:
    """OpenVINO's adaptive pools need (N, C, *spatial); PyTorch also takes unbatched (C, *spatial)."""
    unbatched = h.rank(x) == len(output_size) + 1
    return (h.unsqueeze(x, 0) if unbatched else x), unbatched


@lowers(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool1d.default)
def adaptive_avg_pool(ctx, node, x, output_size):
    x, unbatched = _batched(x, output_size)
    out = ops.adaptive_avg_pool(x, h.as_shape(output_size)).output(0)
    return h.squeeze(out, 0) if unbatched else out


@lowers(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default, aten.adaptive_max_pool1d.default)
def adaptive_max_pool(ctx, node, x, output_size):
    x, unbatched = _batched(x, output_size)
    # i32 indices: the CPU plugin rejects an i64 index output ("does not support i64 for use with oneDNN").
    pool = ops.adaptive_max_pool(x, h.as_shape(output_size), "i32")
    values, indices = pool.output(0), h.cast(pool.output(1), torch.int64)
    if unbatched:
        values, indices = h.squeeze(values, 0), h.squeeze(indices, 0)
    return (values, indices)
