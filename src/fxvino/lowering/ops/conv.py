"""Convolution (1-3 spatial dims, grouped, transposed) onto OpenVINO's (Group)Convolution."""

from __future__ import annotations

import openvino.opset16 as ops
import torch

from fxvino.devices import cpu_deconvolution_kernel
from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


def _conv_ok(node: torch.fx.Node) -> str | None:
    x, w = node.args[0], node.args[1]
    if h.meta(x).dim() not in (3, 4, 5):
        return "only batched 1-3d convolutions are lowered"
    if any(not isinstance(s, int) for s in h.meta(w).shape):
        return "weights must have a static shape"
    return None


def _grouped_weight(w, groups: int):
    """PyTorch's (C_out, C_in/g, *k) or transposed (C_in, C_out/g, *k) weight as OpenVINO's
    (g, C_out/g, C_in/g, *k) or (g, C_in/g, C_out/g, *k): splitting the first axis is the same reshape."""
    shape = h.static_shape(w)
    return h.reshape(w, [groups, shape[0] // groups, *shape[1:]])


def _height_one(weight_shape, stride, padding, dilation, output_padding) -> bool:
    """Whether to run a 1-d transposed convolution as a 2-d one of height 1: the CPU plugin runs
    some 1-d ones on its generic GEMM kernel (on a Zen 4 every stride of 5 and 8 tried, stride 4
    with kernel 3 or 4, stride 3 with kernel 6 to 9), 2-2.6x slower than the 2-d form's brgemm
    kernel (an EnCodec or DAC decoder's upsampling: 512 to 256 channels, kernel 16, stride 8), while
    where 1-d has a kernel of its own it is up to 1.27x faster. So the plugin is asked
    (``devices.cpu_deconvolution_kernel``)."""
    c_in, c_out, k = weight_shape
    (s,), (p,), (d,), (o,) = stride, padding, dilation, output_padding
    kernel = cpu_deconvolution_kernel(c_in, c_out, (k,), (s,), (d,), (p,), (o,))
    if kernel is None or "gemm" not in kernel:
        return False
    two = cpu_deconvolution_kernel(c_in, c_out, (1, k), (1, s), (1, d), (0, p), (0, o))
    return two is not None and "gemm" not in two


@lowers(aten.convolution.default, validator=_conv_ok)
def convolution(ctx, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    x, w = h.to_out(node, x, w)
    spatial = h.rank(x) - 2
    stride, padding, dilation = (list(v) * (spatial if len(v) == 1 else 1) for v in (stride, padding, dilation))
    out_pad = list(output_padding) * (spatial if len(output_padding) == 1 else 1) or [0] * spatial
    if (
        transposed
        and groups == 1
        and spatial == 1
        and h.out_dtype(node) == torch.float32
        and _height_one(h.static_shape(w), stride, padding, dilation, out_pad)
    ):
        y = ops.convolution_backprop_data(
            h.unsqueeze(x, 2),
            h.unsqueeze(w, 2),
            [1, *stride],
            pads_begin=[0, *padding],
            pads_end=[0, *padding],
            dilations=[1, *dilation],
            output_padding=[0, *out_pad],
        ).output(0)
        y = h.squeeze(y, 2)
    elif transposed:
        backprop = ops.convolution_backprop_data if groups == 1 else ops.group_convolution_backprop_data
        y = backprop(
            x,
            w if groups == 1 else _grouped_weight(w, groups),
            stride,
            pads_begin=padding,
            pads_end=padding,
            dilations=dilation,
            output_padding=out_pad,
        ).output(0)
    elif groups == 1:
        y = ops.convolution(x, w, stride, padding, padding, dilation).output(0)
    else:
        y = ops.group_convolution(x, _grouped_weight(w, groups), stride, padding, padding, dilation).output(0)
    if bias is not None:
        b = h.reshape(h.cast(bias, h.out_dtype(node)), [1, -1] + [1] * spatial)
        y = ops.add(y, b).output(0)
    return y


@lowers(aten._convolution.default, validator=_conv_ok)
def convolution_with_backend_flags(
    ctx, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups, *backend_flags
):
    """``torch._convolution``: the convolution plus cuDNN/benchmark flags that change nothing on CPU."""
    return convolution(ctx, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups)
