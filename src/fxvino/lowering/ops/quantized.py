"""PT2E quantization's ``quantized_decomposed`` ops onto OpenVINO's int8 vocabulary.

PT2E (``prepare_pt2e``/``convert_pt2e``) leaves float ops between quantize/dequantize pairs. OpenVINO's
low-precision transformations recognise two patterns and run the op between them in int8:
a ``FakeQuantize`` on activations, and ``Convert(int8 constant) -> Subtract(zero point) ->
Multiply(scale)`` on weights. A dequantize of a quantize with the same parameters therefore
becomes one FakeQuantize of the float input; a dequantize of anything else (int8 weights, a
quantized graph input) becomes Convert/Subtract/Multiply. A lone quantize computes PyTorch's
``clamp(round(x * (1 / scale)) + zero_point)`` and converts to the integer type.

FakeQuantize rounds halves away from zero where PyTorch rounds them to even: a value exactly
half-way between two levels can land one level (one ``scale``) apart from eager.
"""

from __future__ import annotations

import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers_named
from fxvino.quantization.saturation import SEVEN_BIT

_Q_TENSOR = "quantized_decomposed.quantize_per_tensor.default"
_DQ_TENSOR = "quantized_decomposed.dequantize_per_tensor.default"
_Q_DYNAMIC = "quantized_decomposed.quantize_per_tensor.tensor"  # scale and zero point are tensors
_DQ_DYNAMIC = "quantized_decomposed.dequantize_per_tensor.tensor"
_CHOOSE = "quantized_decomposed.choose_qparams.tensor"
_Q_CHANNEL = "quantized_decomposed.quantize_per_channel.default"
_DQ_CHANNEL = "quantized_decomposed.dequantize_per_channel.default"
# FakeQuantize computes its levels in f32: with 16- or 32-bit ranges it lands levels apart from
# PyTorch (one step for int16, thousands for int32). Wider pairs stay a quantize and a dequantize.
_FAKE_QUANTIZE_MAX_LEVELS = 256


def _per_channel(v, axis: int, rank: int):
    """A per-channel scale or zero point shaped to broadcast along ``axis`` of a rank-``rank`` tensor."""
    return h.reshape(h.cast(v, torch.float32), [-1 if d == axis else 1 for d in range(rank)])


def _inverse(scale):
    """``1 / scale`` as PyTorch multiplies by it: a Python scale is inverted in double, then rounded."""
    if h.is_output(scale):
        return ops.divide(h.const(1.0, torch.float32), h.cast(scale, torch.float32)).output(0)
    return h.const(1.0 / float(scale), torch.float32)


def _quantize(x, inverse_scale, zero_point, qmin: int, qmax: int, dtype: torch.dtype):
    x = h.cast(x, torch.float32)
    scaled = ops.multiply(x, inverse_scale).output(0)
    q = ops.add(ops.round(scaled, "half_to_even").output(0), zero_point).output(0)
    q = ops.clamp(q, float(qmin), float(qmax)).output(0)
    return h.cast(q, dtype)


def _dequantize(q, scale, zero_point, out_dtype: torch.dtype):
    centred = ops.subtract(h.cast(q, torch.float32), zero_point).output(0)
    return h.cast(ops.multiply(centred, scale).output(0), out_dtype)


def _same_parameters(dq: torch.fx.Node, q: torch.fx.Node, first: int) -> bool:
    return list(dq.args[first:]) == list(q.args[first:])


@lowers_named(_Q_TENSOR, _Q_DYNAMIC)
def quantize_per_tensor(ctx, node, x, scale, zero_point, quant_min, quant_max, dtype):
    return _quantize(x, _inverse(scale), h.cast(zero_point, torch.float32), quant_min, quant_max, dtype)


@lowers_named(_CHOOSE)
def choose_qparams(ctx, node, x, quant_min, quant_max, eps, dtype):
    """Dynamic quantization's affine scale and zero point from the tensor's range (which always
    includes 0), as ``torch.ao.quantization.utils.determine_qparams`` computes them."""
    x = h.cast(h.reshape(x, [-1]), torch.float32)
    axes = h.const([0], torch.int64)
    zero = h.const(0.0, torch.float32)
    low = ops.minimum(h.reduce_extreme(x, axes, False, True), zero).output(0)
    high = ops.maximum(h.reduce_extreme(x, axes, True, True), zero).output(0)
    scale = ops.divide(ops.subtract(high, low), h.const(float(quant_max - quant_min), torch.float32)).output(0)
    scale = ops.maximum(scale, h.const(float(eps), torch.float32)).output(0)
    shift = h.cast(ops.round(ops.divide(low, scale), "half_to_even").output(0), torch.int32)
    zero_point = ops.subtract(h.const(quant_min, torch.int32), shift).output(0)
    zero_point = ops.clamp(zero_point, float(quant_min), float(quant_max)).output(0)
    return h.cast(scale, torch.float64), h.cast(zero_point, torch.int64)


@lowers_named(_DQ_TENSOR, _DQ_DYNAMIC)
def dequantize_per_tensor(ctx, node, q, scale, zero_point, quant_min, quant_max, dtype, *, out_dtype=None):
    out_dtype = out_dtype or torch.float32
    source = node.args[0]
    if (
        isinstance(source, torch.fx.Node)
        and str(source.target) in (_Q_TENSOR, _Q_DYNAMIC)
        and _same_parameters(node, source, 1)
        and isinstance(scale, float | int)
        and isinstance(zero_point, int)
        and source.args[0] in ctx.env
        and quant_max - quant_min < _FAKE_QUANTIZE_MAX_LEVELS
    ):  # quantize -> dequantize: one FakeQuantize, which OpenVINO turns into int8 execution
        x = h.cast(ctx.env[source.args[0]], torch.float32)
        return h.cast(_fake_quantize(x, float(scale), zero_point, quant_min, quant_max, dtype), out_dtype)
    return _dequantize(q, h.cast(scale, torch.float32), h.cast(zero_point, torch.float32), out_dtype)


def _fake_quantize(x, scale: float, zero_point: int, quant_min: int, quant_max: int, dtype: torch.dtype):
    """A quantize -> dequantize pair as one FakeQuantize, in a form OpenVINO runs in int8.

    The plugin's low-precision transformations take 8-bit FakeQuantizes only (255 or 256 levels):
    a 7-bit range (``reduce_range=True``, which torchao advises for CPUs without VNNI) computed
    its products in f32. Such a range becomes a Clamp to it and a 256-level FakeQuantize with the
    same step, so its products run in u8/i8 whose values stay within the 7 bits: the 16-bit pair
    sums of a CPU without VNNI cannot saturate over u8 values up to 127 (2 x 127 x 128 < 2**15),
    which the FakeQuantize's name tells the saturation note.
    """
    lo, hi = (quant_min - zero_point) * scale, (quant_max - zero_point) * scale
    levels = quant_max - quant_min + 1
    if dtype in (torch.uint8, torch.int8) and 2 < levels < 255:
        if not _within(x, lo - scale / 4, hi + scale / 4):  # a quarter step rounds back in
            x = ops.clamp(x, lo, hi).output(0)
        levels, hi = 256, lo + 255 * scale
    lo_c, hi_c = h.const(lo, torch.float32), h.const(hi, torch.float32)
    fq = ops.fake_quantize(x, lo_c, hi_c, lo_c, hi_c, levels)
    if dtype == torch.uint8 and quant_min >= 0 and quant_max <= 127:  # u8 at most 127: cannot saturate
        fq.set_friendly_name(fq.get_friendly_name() + SEVEN_BIT)
    return fq.output(0)


# Ops whose every output value lies between their input's least and greatest.
_BOUND_KEEPING = frozenset(
    {"MaxPool", "AvgPool", "ReduceMean", "ReduceMax", "ReduceMin", "Reshape", "Squeeze", "Unsqueeze", "Transpose"}
)


def _within(x, lo: float, hi: float) -> bool:
    """Whether every value of ``x`` is known to lie in [lo, hi]: it comes, through ops that keep
    bounds, from a Clamp or a FakeQuantize that bounds it. A requantize after a max pool then
    needs no Clamp of its own, which would keep the plugin from running the pool in u8 (two
    more f32 FakeQuantizes and three reorders in 7-bit ResNet-50: 28.9 against 23.1 ms at batch 8)."""
    node = x.get_node()
    while node.get_type_name() in _BOUND_KEEPING:
        node = node.input_value(0).get_node()
    kind = node.get_type_name()
    if kind == "Clamp":
        attrs = node.get_attributes()
        return attrs["min"] >= lo and attrs["max"] <= hi
    if kind == "FakeQuantize":
        low, high = (h.constant_value(node.input_value(i)) for i in (3, 4))  # its output's range
        if low is None or high is None or low.numel() != 1 or high.numel() != 1:
            return False
        return _within(node.input_value(0), lo, hi) or (float(low) >= lo and float(high) <= hi)
    return False


@lowers_named(_Q_CHANNEL)
def quantize_per_channel(ctx, node, x, scales, zero_points, axis, quant_min, quant_max, dtype):
    rank = h.rank(x)
    axis = axis % rank
    inverse = ops.divide(h.const(1.0, torch.float32), _per_channel(scales, axis, rank)).output(0)
    return _quantize(x, inverse, _per_channel(zero_points, axis, rank), quant_min, quant_max, dtype)


@lowers_named(_DQ_CHANNEL)
def dequantize_per_channel(ctx, node, q, scales, zero_points, axis, quant_min, quant_max, dtype, *, out_dtype=None):
    """Convert/Subtract/Multiply: on a constant int8 weight, the pattern OpenVINO keeps in int8."""
    rank = h.rank(q)
    axis = axis % rank
    scales, zero_points = _per_channel(scales, axis, rank), _per_channel(zero_points, axis, rank)
    return _dequantize(q, scales, zero_points, out_dtype or torch.float32)
