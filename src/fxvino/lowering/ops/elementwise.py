"""Pointwise arithmetic, comparison, logic and math functions."""

from __future__ import annotations

import math

import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.ops import float_mod
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


def _float_input(node: torch.fx.Node) -> str | None:
    return None if h.out_dtype(node).is_floating_point else "needs a floating-point result"


# Unary ops that compute in the output dtype: aten op -> OpenVINO builder.
_UNARY = {
    aten.abs.default: ops.abs,
    aten.neg.default: ops.negative,
    aten.log.default: ops.log,
    aten.sqrt.default: ops.sqrt,
    aten.sin.default: ops.sin,
    aten.cos.default: ops.cos,
    aten.tan.default: ops.tan,
    aten.asin.default: ops.asin,
    aten.acos.default: ops.acos,
    aten.atan.default: ops.atan,
    aten.sinh.default: ops.sinh,
    aten.cosh.default: ops.cosh,
    aten.tanh.default: ops.tanh,
    aten.asinh.default: ops.asinh,
    aten.acosh.default: ops.acosh,
    aten.atanh.default: ops.atanh,
    aten.erf.default: ops.erf,
    aten.sigmoid.default: ops.sigmoid,
    aten.relu.default: ops.relu,
    aten.ceil.default: ops.ceiling,
    aten.floor.default: ops.floor,
}


def _unary(builder):
    def lower(ctx, node, x):
        (x,) = h.to_wrapping(node, x)
        if x.get_element_type().is_integral() and builder in (ops.ceiling, ops.floor):
            return h.cast(x, h.out_dtype(node))
        return h.cast(builder(x).output(0), h.out_dtype(node))

    return lower


for _op, _builder in _UNARY.items():
    lowers(_op)(_unary(_builder))


def _exp(x):
    """``exp(x)``, NaN where ``x`` is: the CPU plugin's Exp gives +inf for NaN."""
    if not x.get_element_type().is_real():
        return ops.exp(x).output(0)
    return ops.select(ops.is_nan(x), x, ops.exp(x)).output(0)


@lowers(aten.exp.default)
def exp(ctx, node, x):
    (x,) = h.to_out(node, x)
    return _exp(x)


@lowers(aten.sign.default)
def sign(ctx, node, x):
    """torch's sign of NaN is 0 (it compares with 0); the plugin's Sign passes NaN through."""
    (x,) = h.to_out(node, x)
    if not x.get_element_type().is_real():
        return ops.sign(x).output(0)
    return ops.select(ops.is_nan(x), h.const(0, h.out_dtype(node)), ops.sign(x)).output(0)


@lowers(aten.round.default)
def round_(ctx, node, x):
    (x,) = h.to_out(node, x)
    return ops.round(x, "half_to_even").output(0)


@lowers(aten.trunc.default)
def trunc(ctx, node, x):
    (x,) = h.to_out(node, x)
    if not h.is_float(h.out_dtype(node)):
        return x
    return h.trunc(x)


@lowers(aten.rsqrt.default)
def rsqrt(ctx, node, x):
    (x,) = h.to_out(node, x)
    return ops.divide(h.const(1, h.out_dtype(node)), ops.sqrt(x)).output(0)


@lowers(aten.erfc.default)
def erfc(ctx, node, x):
    # 1 - erf(x): absolute error ~1e-7, so for x > ~4 the tiny true value is lost (as in float32 eager
    # for x > ~9, where erfc underflows anyway).
    (x,) = h.to_out(node, x)
    return ops.subtract(h.const(1.0, h.dtype_of(x)), ops.erf(x)).output(0)


@lowers(aten.reciprocal.default)
def reciprocal(ctx, node, x):
    (x,) = h.to_out(node, x)
    return ops.divide(h.const(1, h.out_dtype(node)), x).output(0)


@lowers(aten.log2.default, aten.log10.default)
def log_base(ctx, node, x):
    (x,) = h.to_out(node, x)
    base = 2.0 if node.target is aten.log2.default else 10.0
    return ops.divide(ops.log(x), h.const(math.log(base), h.out_dtype(node))).output(0)


@lowers(aten.log1p.default)
def log1p(ctx, node, x):
    (x,) = h.to_out(node, x)
    return ops.log(ops.add(x, h.const(1, h.out_dtype(node)))).output(0)


@lowers(aten.expm1.default)
def expm1(ctx, node, x):
    (x,) = h.to_out(node, x)
    return ops.subtract(_exp(x), h.const(1, h.out_dtype(node))).output(0)


@lowers(aten.exp2.default)
def exp2(ctx, node, x):
    (x,) = h.to_out(node, x)
    return ops.power(h.const(2, h.out_dtype(node)), x).output(0)


@lowers(aten.isnan.default)
def isnan(ctx, node, x):
    return ops.not_equal(x, x).output(0)


@lowers(aten.isinf.default)
def isinf(ctx, node, x):
    if not x.get_element_type().is_real():
        return ops.equal(x, ops.add(x, h.const(1, h.dtype_of(x)))).output(0)  # never true for ints
    return ops.is_inf(x).output(0)


@lowers(aten.logical_not.default)
def logical_not(ctx, node, x):
    return ops.logical_not(h.cast(x, torch.bool)).output(0)


@lowers(aten.bitwise_not.default)
def bitwise_not(ctx, node, x):
    if h.out_dtype(node) == torch.bool:
        return ops.logical_not(x).output(0)
    return ops.bitwise_not(x).output(0)


def _alpha(node, b, alpha):
    if alpha == 1:
        return b
    return ops.multiply(b, h.const(alpha, h.dtype_of(b))).output(0)


@lowers(aten.add.Tensor, aten.add.Scalar)
def add(ctx, node, a, b, alpha=1):
    a, b = h.to_wrapping(node, a, b)
    if h.out_dtype(node) == torch.bool:
        return ops.logical_or(a, b).output(0)
    return h.cast(ops.add(a, _alpha(node, b, alpha)).output(0), h.out_dtype(node))


@lowers(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, node, a, b, alpha=1):
    a, b = h.to_wrapping(node, a, b)
    return h.cast(ops.subtract(a, _alpha(node, b, alpha)).output(0), h.out_dtype(node))


@lowers(aten.rsub.Scalar, aten.rsub.Tensor)
def rsub(ctx, node, a, b, alpha=1):
    a, b = h.to_wrapping(node, a, b)
    return h.cast(ops.subtract(b, _alpha(node, a, alpha)).output(0), h.out_dtype(node))


@lowers(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, node, a, b):
    a, b = h.to_wrapping(node, a, b)
    if h.out_dtype(node) == torch.bool:
        return ops.logical_and(a, b).output(0)
    return h.cast(ops.multiply(a, b).output(0), h.out_dtype(node))


def _div_rounding(node):
    mode = node.kwargs.get("rounding_mode")
    if mode not in (None, "trunc", "floor"):
        return f"unknown rounding_mode {mode!r}"
    return None


@lowers(aten.div.Tensor, aten.div.Scalar, aten.div.Tensor_mode, aten.div.Scalar_mode, validator=_div_rounding)
def div(ctx, node, a, b, rounding_mode=None):
    dtype = h.out_dtype(node)
    if rounding_mode == "floor" and dtype.is_floating_point:
        return float_mod.floor_divide(a, b, dtype)
    if rounding_mode is None or dtype.is_floating_point:
        a, b = h.to_out(node, a, b)
        q = ops.divide(a, b).output(0)
        if rounding_mode == "trunc":
            q = h.trunc(q)
        return q
    a, b = h.to_out(node, a, b)
    return h.floor_div(a, b) if rounding_mode == "floor" else h.trunc_div(a, b)


@lowers(aten.floor_divide.default)
def floor_divide(ctx, node, a, b):
    if h.out_dtype(node).is_floating_point:
        return float_mod.floor_divide(a, b, h.out_dtype(node))
    a, b = h.to_out(node, a, b)
    return h.floor_div(a, b)


@lowers(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    if h.out_dtype(node).is_floating_point:
        return float_mod.remainder(a, b)
    return h.floor_mod(a, b)


@lowers(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    if h.out_dtype(node).is_floating_point:
        return float_mod.fmod(a, b)
    return h.trunc_mod(a, b)


@lowers(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def pow_(ctx, node, a, b):
    if node.target is aten.pow.Tensor_Scalar and b == 2:
        (a,) = h.to_out(node, a)
        return ops.multiply(a, a).output(0)
    a, b = h.to_out(node, a, b)
    return ops.power(a, b).output(0)


@lowers(aten.maximum.default)
def maximum(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    if h.out_dtype(node) == torch.bool:  # OpenVINO's Maximum rejects booleans
        return ops.logical_or(a, b).output(0)
    return _nan_propagating(ops.maximum(a, b).output(0), a, b)


@lowers(aten.minimum.default)
def minimum(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    if h.out_dtype(node) == torch.bool:
        return ops.logical_and(a, b).output(0)
    return _nan_propagating(ops.minimum(a, b).output(0), a, b)


def _nan_propagating(result, a, b):
    """torch.maximum/minimum return NaN if either side is NaN; OpenVINO's may not."""
    if not a.get_element_type().is_real():
        return result
    nan = ops.logical_or(ops.not_equal(a, a), ops.not_equal(b, b))
    return ops.select(nan, ops.add(a, b), result).output(0)


@lowers(aten.atan2.default)
def atan2(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    return _atan2(a, b)


def _sign_bit(x):
    """Whether ``x``'s sign bit is set: negative numbers and -0.0 (whose reciprocal is -inf)."""
    zero = h.const(0, h.dtype_of(x))
    negative_zero = ops.logical_and(ops.equal(x, zero), ops.less(ops.divide(h.const(1, h.dtype_of(x)), x), zero))
    return ops.logical_or(ops.less(x, zero), negative_zero).output(0)


def _atan2(y, x):
    """C's atan2, signed zeros and infinities included: atan2(+-0, -0) is +-pi, atan2(+-inf,
    -inf) is +-3pi/4 (``atan(y / x)`` alone gives 0 and NaN there)."""
    dtype = h.dtype_of(y)
    pi = h.const(math.pi, dtype)
    zero = h.const(0, dtype)
    ratio = ops.divide(y, x).output(0)
    both_inf = ops.logical_and(ops.is_inf(y), ops.is_inf(x))
    ratio = ops.select(both_inf, ops.multiply(ops.sign(y), ops.sign(x)), ratio).output(0)
    both_zero = ops.logical_and(ops.equal(y, zero), ops.equal(x, zero))
    ratio = ops.select(both_zero, y, ratio).output(0)  # atan of a signed zero: the zero
    adj = ops.select(_sign_bit(x), ops.select(_sign_bit(y), ops.negative(pi), pi), zero)
    res = ops.add(ops.atan(ratio), adj)
    x_zero = ops.logical_and(ops.equal(x, zero), ops.not_equal(y, zero))
    half = ops.multiply(ops.sign(y), h.const(math.pi / 2, dtype))
    return ops.select(x_zero, half, res).output(0)


_COMPARE = {
    aten.eq.Tensor: ops.equal,
    aten.eq.Scalar: ops.equal,
    aten.ne.Tensor: ops.not_equal,
    aten.ne.Scalar: ops.not_equal,
    aten.lt.Tensor: ops.less,
    aten.lt.Scalar: ops.less,
    aten.le.Tensor: ops.less_equal,
    aten.le.Scalar: ops.less_equal,
    # The CPU plugin's Greater and GreaterEqual are true when either side is NaN; its Less and
    # LessEqual are false, as IEEE's and PyTorch's comparisons are: so a > b is b < a.
    aten.gt.Tensor: lambda a, b: ops.less(b, a),
    aten.gt.Scalar: lambda a, b: ops.less(b, a),
    aten.ge.Tensor: lambda a, b: ops.less_equal(b, a),
    aten.ge.Scalar: lambda a, b: ops.less_equal(b, a),
}


def _compare(builder):
    def lower(ctx, node, a, b):
        a, b = h.promote(node, a, b)
        return builder(a, b).output(0)

    return lower


for _op, _builder in _COMPARE.items():
    lowers(_op)(_compare(_builder))


_LOGICAL = {
    aten.logical_and.default: ops.logical_and,
    aten.logical_or.default: ops.logical_or,
    aten.logical_xor.default: ops.logical_xor,
}


def _logical(builder):
    def lower(ctx, node, a, b):
        return builder(h.cast(a, torch.bool), h.cast(b, torch.bool)).output(0)

    return lower


for _op, _builder in _LOGICAL.items():
    lowers(_op)(_logical(_builder))


_BITWISE = {
    aten.bitwise_and.Tensor: (ops.bitwise_and, ops.logical_and),
    aten.bitwise_and.Scalar: (ops.bitwise_and, ops.logical_and),
    aten.bitwise_or.Tensor: (ops.bitwise_or, ops.logical_or),
    aten.bitwise_or.Scalar: (ops.bitwise_or, ops.logical_or),
    aten.bitwise_xor.Tensor: (ops.bitwise_xor, ops.logical_xor),
    aten.bitwise_xor.Scalar: (ops.bitwise_xor, ops.logical_xor),
}


def _bitwise(builders):
    def lower(ctx, node, a, b):
        a, b = h.to_out(node, a, b)
        builder = builders[1] if h.out_dtype(node) == torch.bool else builders[0]
        return builder(a, b).output(0)

    return lower


for _op, _builders in _BITWISE.items():
    lowers(_op)(_bitwise(_builders))


@lowers(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(ctx, node, cond, a, b):
    a, b = h.to_out(node, a, b)
    return ops.select(h.cast(cond, torch.bool), a, b).output(0)


@lowers(aten.clamp.default, aten.clamp.Tensor)
def clamp(ctx, node, x, min=None, max=None):  # noqa: A002 - ATen's argument names
    (x,) = h.to_out(node, x)
    dtype = h.out_dtype(node)
    if min is not None:  # NaN in, NaN out, as torch.maximum (OpenVINO's Maximum drops it)
        low = h.cast(min, dtype)
        x = _nan_propagating(ops.maximum(x, low).output(0), x, low)
    if max is not None:
        high = h.cast(max, dtype)
        x = _nan_propagating(ops.minimum(x, high).output(0), x, high)
    return x


@lowers(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(ctx, node, x, min):  # noqa: A002
    return clamp(ctx, node, x, min=min)


@lowers(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(ctx, node, x, max):  # noqa: A002
    return clamp(ctx, node, x, max=max)


@lowers(aten._to_copy.default)
def to_copy(
    ctx, node, x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None
):
    return h.cast(x, h.out_dtype(node))


@lowers(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(ctx, node, a, b, weight):
    a, b, w = h.to_out(node, a, b, weight)
    return ops.add(a, ops.multiply(w, ops.subtract(b, a))).output(0)
