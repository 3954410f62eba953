"""Convolution (1-3 spatial dims, grouped, transposed) onto OpenVINO's (Group)Convolution."""

from __future__ import annotations

import openvino.opset16 as ops
import torch

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


@lowers(aten.convolution.default, validator=_conv_ok)
def convolution(ctx, node, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    x, w = h.to_out(node, x, w)
    spatial = h.rank(x) - 2
    stride, padding, dilation = (list(v) * (spatial if len(v) == 1 else 1) for v in (stride, padding, dilation))
    if transposed:
        out_pad = list(output_padding) * (spatial if len(output_padding) == 1 else 1)
        backprop = ops.convolution_backprop_data if groups == 1 else ops.group_convolution_backprop_data
        y = backprop(
            x,
            w if groups == 1 else _grouped_weight(w, groups),
            stride,
            pads_begin=padding,
            pads_end=padding,
            dilations=dilation,
            output_padding=out_pad or [0] * spatial,
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
