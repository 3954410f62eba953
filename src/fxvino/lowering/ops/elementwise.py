"""Pointwise arithmetic, comparison, logic and math functions."""

from __future__ import annotations

import math

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import eager_checks, precise
from fxvino.lowering import helpers as h
from fxvino.lowering.ops import float_mod
from fxvino.lowering.registry import lowers
from fxvino.lowering.rounding import op_operand, op_result, opmath_operands, round_to
from fxvino.utils.dtypes import SIXTEEN_BIT_FLOATS

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
    aten.sigmoid.default: ops.sigmoid,
    aten.relu.default: ops.relu,
    aten.ceil.default: ops.ceiling,
    aten.floor.default: ops.floor,
}


def _unary(builder):
    def lower(ctx, node, x):
        if builder in (ops.abs, ops.negative):  # (-(-2**31) is 2**31, past int32)
            eager_checks.stays_int32(ctx, node, lambda: eager_checks.as_f32(x))
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
    if h.out_dtype(node) == torch.bool:  # Sign rejects booleans; each is its own sign
        return x
    if not x.get_element_type().is_real():
        return ops.sign(x).output(0)
    return ops.select(ops.is_nan(x), h.const(0, h.out_dtype(node)), ops.sign(x)).output(0)


@lowers(aten.angle.default)
def angle(ctx, node, x):
    """The argument of a real number: pi below zero, else 0 (-0.0 included); NaN stays NaN."""
    (x,) = h.to_out(node, x)
    dtype = h.out_dtype(node)
    zero = h.const(0, dtype)
    arg = ops.select(ops.less(x, zero), h.const(math.pi, dtype), zero)
    return ops.select(ops.is_nan(x), x, arg).output(0)


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
    """``1 / sqrt(x)`` in f32 for 16-bit types, rounded once as ATen's kernel does (with bf16
    kernels the plugin rounded the root to bf16 first: 1,158 of 4,096 results a step off)."""
    (x,) = opmath_operands(node, x)
    return op_result(ops.divide(h.const(1, h.dtype_of(x)), ops.sqrt(x)).output(0), h.out_dtype(node))


@lowers(aten.reciprocal.default)
def reciprocal(ctx, node, x):
    (x,) = h.to_out(node, x)
    return ops.divide(h.const(1, h.out_dtype(node)), x).output(0)


@lowers(aten.log2.default, aten.log10.default)
def log_base(ctx, node, x):
    (x,) = opmath_operands(node, x)
    base = 2.0 if node.target is aten.log2.default else 10.0
    return op_result(ops.divide(ops.log(x), h.const(math.log(base), h.dtype_of(x))).output(0), h.out_dtype(node))


@lowers(aten.log1p.default)
def log1p(ctx, node, x):
    (x,) = opmath_operands(node, x)
    return op_result(precise.log1p(x), h.out_dtype(node))


@lowers(aten.expm1.default)
def expm1(ctx, node, x):
    (x,) = opmath_operands(node, x)
    return op_result(precise.expm1(x), h.out_dtype(node))


@lowers(aten.erf.default)
def erf(ctx, node, x):
    (x,) = opmath_operands(node, x)
    return op_result(precise.erf(x), h.out_dtype(node))


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
        return ops.not_equal(x, x).output(0)  # never true for integers and booleans
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


def _f32_sum(a, b, scale=1) -> ov.Output:
    """``a + scale * b`` in f32 from the operands as given (a Python int keeps its value)."""
    b = eager_checks.as_f32(b)
    b = b if scale == 1 else ops.multiply(b, eager_checks.as_f32(scale)).output(0)
    return ops.add(eager_checks.as_f32(a), b).output(0)


@lowers(aten.add.Tensor, aten.add.Scalar)
def add(ctx, node, a, b, alpha=1):
    eager_checks.stays_int32(ctx, node, lambda: _f32_sum(a, b, alpha))
    a, b = h.to_wrapping(node, a, b)
    if h.out_dtype(node) == torch.bool:
        return ops.logical_or(a, b).output(0)
    return h.cast(ops.add(a, _alpha(node, b, alpha)).output(0), h.out_dtype(node))


@lowers(aten.sub.Tensor, aten.sub.Scalar)
def sub(ctx, node, a, b, alpha=1):
    eager_checks.stays_int32(ctx, node, lambda: _f32_sum(a, b, -alpha))
    a, b = h.to_wrapping(node, a, b)
    return h.cast(ops.subtract(a, _alpha(node, b, alpha)).output(0), h.out_dtype(node))


@lowers(aten.rsub.Scalar, aten.rsub.Tensor)
def rsub(ctx, node, a, b, alpha=1):
    eager_checks.stays_int32(ctx, node, lambda: _f32_sum(b, a, -alpha))
    a, b = h.to_wrapping(node, a, b)
    return h.cast(ops.subtract(b, _alpha(node, a, alpha)).output(0), h.out_dtype(node))


def _scalar_16bit(dtype: torch.dtype, b: h.Value) -> bool:
    """Whether ATen's 16-bit ``mul`` and ``div`` kernels take ``b`` as a scalar: one element (a
    Python number, a 0-d tensor) of a 16-bit result. They compute in f32 with ``b``'s own
    value, unrounded, and round once (``x * 0.1`` was 1,418 of 4,096 f16 values off, with 0.1
    rounded to f16 first)."""
    return dtype in SIXTEEN_BIT_FLOATS and h.one_element(b)


def _f32_operands(dtype: torch.dtype, a: h.Value, b: h.Value) -> tuple[ov.Output, ov.Output]:
    """``a`` as ``dtype`` and ``b`` by its own value, both in f32 (see :func:`_scalar_16bit`)."""
    return op_operand(h.cast(a, dtype)), op_operand(b)


def _holds(dtype: torch.dtype, b: h.Value) -> bool:
    """Whether ``b`` is a value of ``dtype`` or a number it holds exactly: then the 16-bit op
    gives the result of ATen's scalar kernel, and its graph stays as it was."""
    return h.dtype_of(b) == dtype if h.is_output(b) else h.holds(dtype, b)


@lowers(aten.mul.Tensor, aten.mul.Scalar)
def mul(ctx, node, a, b):
    eager_checks.stays_int32(ctx, node, lambda: ops.multiply(eager_checks.as_f32(a), eager_checks.as_f32(b)).output(0))
    dtype = h.out_dtype(node)
    # Where the device has kernels for the type (bf16 on AVX512-BF16 and AMX), the casts to f32
    # and back cost: GPT-2's tanh GELU (x * 0.044715, ...) in bf16 took 4-12% longer on a Zen 5.
    if dtype in ctx.widened and _scalar_16bit(dtype, b) and not _holds(dtype, b):
        return op_result(ops.multiply(*_f32_operands(dtype, a, b)).output(0), dtype)
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
        # 16-bit floats divide in f32, rounded once: where the numerator is computed and the shape
        # dynamic (or the graph compiled without snippets), the plugin multiplied bf16 by the
        # reciprocal rounded to bf16 (-a / b: 1,009 of 4,096 quotients one bf16 step off eager's
        # on the Zen 4).
        scalar, sixteen_bit = _scalar_16bit(dtype, b), dtype != h.opmath_dtype(dtype)
        if scalar:
            a, b = _f32_operands(dtype, a, b)
        else:
            a, b = (h.cast(v, dtype) for v in (a, b))
            a, b = (op_operand(a), op_operand(b)) if sixteen_bit else (a, b)
        q = ops.divide(a, b).output(0)
        if rounding_mode == "trunc":
            # ATen truncates the 16-bit quotient, or the f32 one by a scalar (f16 truncated
            # unrounded was one off in 494 of 4,096 quotients by a tensor; rounded, 187 by 0.3).
            q = h.trunc(round_to(q, dtype) if sixteen_bit and not scalar else q)
        return op_result(q, dtype)
    a, b = h.to_wrapping(node, a, b)  # (uint8's remainders went negative and wrapped)
    eager_checks.nonzero(ctx, b)
    return h.cast(h.floor_div(a, b) if rounding_mode == "floor" else h.trunc_div(a, b), dtype)


@lowers(aten.floor_divide.default)
def floor_divide(ctx, node, a, b):
    if h.out_dtype(node).is_floating_point:
        return float_mod.floor_divide(a, b, h.out_dtype(node))
    a, b = h.to_wrapping(node, a, b)
    eager_checks.nonzero(ctx, b)
    return h.cast(h.floor_div(a, b), h.out_dtype(node))


@lowers(aten.remainder.Tensor, aten.remainder.Scalar)
def remainder(ctx, node, a, b):
    if h.out_dtype(node).is_floating_point:
        return float_mod.remainder(*h.to_out(node, a, b))
    a, b = h.to_wrapping(node, a, b)
    eager_checks.nonzero(ctx, b)
    return h.cast(h.floor_mod(a, b), h.out_dtype(node))


@lowers(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(ctx, node, a, b):
    if h.out_dtype(node).is_floating_point:
        return float_mod.fmod(*h.to_out(node, a, b))
    a, b = h.to_wrapping(node, a, b)
    eager_checks.nonzero(ctx, b)
    return h.cast(h.trunc_mod(a, b), h.out_dtype(node))


def _pow_ok(node: torch.fx.Node) -> str | None:
    exponent = node.args[1]
    integer = not h.out_dtype(node).is_floating_point and h.out_dtype(node) != torch.bool
    if node.target is aten.pow.Tensor_Scalar and integer and isinstance(exponent, int) and exponent < 0:
        return "torch rejects negative integer powers of integer tensors: PyTorch raises its error"
    return None


@lowers(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar, validator=_pow_ok)
def pow_(ctx, node, a, b):
    if node.target is aten.pow.Tensor_Scalar and b == 2:
        (a,) = h.to_out(node, a)
        return ops.multiply(a, a).output(0)
    dtype = h.out_dtype(node)
    if dtype.is_floating_point or dtype == torch.bool:
        a, b = h.to_out(node, a, b)
        return ops.power(a, b).output(0)
    magnitude = lambda: ops.power(ops.abs(eager_checks.as_f32(a)), eager_checks.as_f32(b)).output(0)  # noqa: E731
    eager_checks.stays_int32(ctx, node, magnitude)
    # Narrow integers compute in i32, whose Convert back wraps (the plugin saturates 8 bits).
    work = torch.int32 if dtype.itemsize < 4 else dtype
    a, b = h.cast(a, work), b if isinstance(b, int) else h.cast(b, work)
    power = _constant_power(a, b) if isinstance(b, int) else _integer_power(a, b)
    return h.cast(power, dtype)


def _constant_power(a, exponent: int) -> ov.Output:
    """``a ** exponent`` for a constant ``exponent >= 0`` (torch rejects negative ones for integer
    tensors): square-and-multiply unrolled while lowering, exact and wrapping like torch's."""
    result, square = h.const(1, h.dtype_of(a)), a
    while exponent:
        if exponent & 1:
            result = ops.multiply(result, square).output(0)
        exponent >>= 1
        if exponent:
            square = ops.multiply(square, square).output(0)
    return ops.broadcast(result, h.shape_of(a)).output(0)


def _integer_power(a, b) -> ov.Output:
    """torch's integer ``a ** b`` for a tensor ``b``: square-and-multiply over ``b``'s 31 bits.

    OpenVINO's Power computes integers through f32 (``9 ** 9`` gave 387420480, torch
    387420489). Each bit multiplies by ``1 + bit * (square - 1)`` rather than selecting: the
    plugin ran an i32 Select among float-fused ops in f32 (see ``helpers.divmod_floor``). A
    negative exponent gives torch's 1 for a base of 1, +-1 by parity for -1 and 0 otherwise.
    """
    dtype = h.dtype_of(a)
    zero, one = h.const(0, dtype), h.const(1, dtype)
    a, b = (ops.broadcast(v, h.broadcast_shape(a, b)).output(0) for v in (a, b))
    result, square = ops.broadcast(one, h.shape_of(a)).output(0), a
    for j in range(31):
        bit = h.cast(ops.not_equal(ops.bitwise_and(b, h.const(1 << j, dtype)), zero).output(0), dtype)
        result = ops.multiply(result, ops.add(one, ops.multiply(bit, ops.subtract(square, one)))).output(0)
        if j < 30:
            square = ops.multiply(square, square).output(0)
    negative = h.cast(ops.less(b, zero).output(0), dtype)
    odd = h.cast(ops.not_equal(ops.bitwise_and(b, one), zero).output(0), dtype)
    unit = h.cast(ops.logical_or(ops.equal(a, one), ops.equal(a, h.const(-1, dtype))).output(0), dtype)
    # The base itself when its power is +-1 and the exponent odd, else 1; 0 for other bases.
    fraction = ops.multiply(unit, ops.add(one, ops.multiply(odd, ops.subtract(a, one))))
    kept = ops.multiply(result, ops.subtract(one, negative))
    return ops.add(kept, ops.multiply(fraction, negative)).output(0)


def _extreme(node, a, b, largest: bool, nan_wins: bool) -> ov.Output:
    """torch.maximum/minimum (a NaN side wins) or fmax/fmin (the number wins)."""
    a, b = h.to_out(node, a, b)
    if h.out_dtype(node) == torch.bool:  # OpenVINO's Maximum rejects booleans
        return (ops.logical_or if largest else ops.logical_and)(a, b).output(0)
    result = (ops.maximum if largest else ops.minimum)(a, b).output(0)
    return (_nan_propagating if nan_wins else _nan_ignoring)(result, a, b)


@lowers(aten.maximum.default)
def maximum(ctx, node, a, b):
    return _extreme(node, a, b, largest=True, nan_wins=True)


@lowers(aten.minimum.default)
def minimum(ctx, node, a, b):
    return _extreme(node, a, b, largest=False, nan_wins=True)


def _nan_propagating(result, a, b):
    """torch.maximum/minimum return NaN if either side is NaN; OpenVINO's may not."""
    if not a.get_element_type().is_real():
        return result
    nan = ops.logical_or(ops.not_equal(a, a), ops.not_equal(b, b))
    return ops.select(nan, ops.add(a, b), result).output(0)


@lowers(aten.atan2.default)
def atan2(ctx, node, a, b):
    a, b = opmath_operands(node, a, b)
    return op_result(_atan2(a, b), h.out_dtype(node))


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
    if dtype == torch.bool:  # Maximum and Minimum reject booleans
        if min is not None:
            x = ops.logical_or(x, h.cast(min, dtype)).output(0)
        return x if max is None else ops.logical_and(x, h.cast(max, dtype)).output(0)
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
    return float_to_int64(ctx, node, x)


def float_to_int64(ctx, node, x) -> ov.Output:
    """``x`` cast to ``node``'s dtype; a float cast to int64 must fit the plugin's int32 (it
    saturated: ``1e10`` gave -2**31)."""
    if h.is_output(x) and x.get_element_type().is_real():
        eager_checks.stays_int32(ctx, node, lambda: eager_checks.as_f32(x))
    return h.cast(x, h.out_dtype(node))


@lowers(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(ctx, node, a, b, weight):
    a, b, w = h.to_out(node, a, b, weight)
    return ops.add(a, ops.multiply(w, ops.subtract(b, a))).output(0)


@lowers(aten.remainder.Scalar_Tensor)
def remainder_scalar_tensor(ctx, node, a, b):
    return remainder(ctx, node, a, b)


@lowers(aten.signbit.default)
def signbit(ctx, node, x):
    """A NaN counts as positive: without a bitcast OpenVINO cannot read a NaN's sign bit (torch
    reads it: ``signbit(0 * inf)`` is True on x86, whose default NaN is negative)."""
    dtype = h.dtype_of(x)
    if dtype.is_floating_point:
        return _sign_bit(x)
    if not dtype.is_signed:
        return ops.broadcast(h.const(False, torch.bool), h.shape_of(x)).output(0)
    return ops.less(x, h.const(0, dtype)).output(0)


@lowers(aten.copysign.Tensor, aten.copysign.Scalar)
def copysign(ctx, node, a, b):
    """torch's ``where(signbit(b), -abs(a), abs(a))``; a NaN ``b`` counts as positive (see
    :func:`signbit`)."""
    dtype = h.out_dtype(node)
    a, b = h.cast(a, dtype), h.cast(b, dtype)
    size = ops.abs(a).output(0)
    return ops.select(_sign_bit(b), ops.negative(size), size).output(0)


def _nan_ignoring(result, a, b):
    """C's fmax/fmin: a NaN side gives the other side (NaN only if both are)."""
    if not a.get_element_type().is_real():
        return result
    result = ops.select(ops.is_nan(b), a, result)
    return ops.select(ops.is_nan(a), b, result).output(0)


@lowers(aten.fmax.default)
def fmax(ctx, node, a, b):
    return _extreme(node, a, b, largest=True, nan_wins=False)


@lowers(aten.fmin.default)
def fmin(ctx, node, a, b):
    return _extreme(node, a, b, largest=False, nan_wins=False)


@lowers(aten.hypot.default, validator=_float_input)
def hypot(ctx, node, a, b):
    """``big * sqrt(1 + (small / big)**2)`` in f32 (16-bit types rounded once, as torch's
    opmath): ``sqrt(a*a + b*b)`` overflows from 1.8e19. C's hypot is inf if a side is infinite,
    NaN or not."""
    dtype = h.out_dtype(node)
    f32 = torch.float32
    a, b = (ops.abs(h.cast(h.cast(v, dtype), f32)).output(0) for v in (a, b))
    big = ops.maximum(a, b).output(0)
    small = ops.minimum(a, b).output(0)
    zero = h.const(0.0, f32)
    ratio = ops.divide(small, ops.select(ops.equal(big, zero), h.const(1.0, f32), big))
    result = ops.multiply(big, ops.sqrt(ops.add(h.const(1.0, f32), ops.multiply(ratio, ratio)))).output(0)
    nan = ops.logical_or(ops.is_nan(a), ops.is_nan(b))
    result = ops.select(nan, ops.add(a, b), result)
    result = ops.select(ops.logical_or(ops.is_inf(a), ops.is_inf(b)), h.infinity(f32), result).output(0)
    return h.cast(result, dtype)


@lowers(aten.round.decimals, validator=_float_input)
def round_decimals(ctx, node, x, *, decimals=0):
    """ATen's kernel, in f32 for 16-bit types: ``nearbyint(x * 10**d) / 10**d``, or
    ``nearbyint(x / 10**-d) * 10**-d`` for negative ``d`` (the divisions rounded once:
    ``exact_division.py``; as a multiply by the reciprocal, 178 / 10 gave 17.800001, torch 17.799999)."""
    dtype = h.out_dtype(node)
    f32 = torch.float32
    x = h.cast(h.cast(x, dtype), f32)
    if decimals == 0:
        return h.cast(ops.round(x, "half_to_even").output(0), dtype)
    scale = h.const(float(10 ** abs(decimals)), f32)
    if decimals > 0:
        result = ops.divide(ops.round(ops.multiply(x, scale), "half_to_even"), scale).output(0)
    else:
        result = ops.multiply(ops.round(ops.divide(x, scale), "half_to_even"), scale).output(0)
    return h.cast(result, dtype)


# The largest |k| of one factor 2**k in :func:`_scale`: every such power is a normal f32.
_POW2_RANGE = 120


def _pow2(k: ov.Output) -> ov.Output:
    """``2**k`` as f32 for an i32 ``k`` in ``[-127, 127]``, exactly: a product of ``2**(+-2**j)``
    for the bits of ``|k|``. A Power op need not be exact, and a Gather from a table of powers
    crashed the CPU plugin (SIGFPE in compile_model) for an empty index tensor."""
    f32, i32 = torch.float32, torch.int32
    negative = ops.less(k, h.const(0, i32))
    size = ops.abs(k).output(0)
    result = None
    for j in range(7):
        bit = ops.equal(ops.bitwise_and(size, h.const(1 << j, i32)), h.const(0, i32))
        factor = ops.select(negative, h.const(2.0 ** -(1 << j), f32), h.const(2.0 ** (1 << j), f32))
        factor = ops.select(bit, h.const(1.0, f32), factor).output(0)
        result = factor if result is None else ops.multiply(result, factor).output(0)
    return result


def _scale(x: ov.Output, e: ov.Output) -> ov.Output:
    """``x * 2**e`` exactly (f32 ``x``, i32 ``e``): three factors of one sign, so an intermediate
    leaves the normal range only if the result does."""
    e = ops.clamp(e, -3 * _POW2_RANGE, 3 * _POW2_RANGE).output(0)
    three = h.const(3, torch.int32)
    e1 = h.floor_div(e, three)
    e2 = h.floor_div(ops.subtract(e, e1).output(0), h.const(2, torch.int32))
    e3 = ops.subtract(ops.subtract(e, e1), e2).output(0)
    for part in (e1, e2, e3):
        x = ops.multiply(x, _pow2(part)).output(0)
    return x


@lowers(aten.ldexp.Tensor)
def ldexp(ctx, node, x, e):
    """``x * 2**e`` exactly, as eager's for floats and integer ``e`` (0 times a huge power is 0,
    not NaN). Otherwise eager multiplies by ``pow(2.0, e)`` (in f32 for an integer ``x``), which
    is 0 below ``2**-149`` and inf from ``2**128`` (so 0 there is NaN)."""
    dtype = h.out_dtype(node)
    f32, i32 = torch.float32, torch.int32
    integer_x = not h.dtype_of(x).is_floating_point
    x = h.cast(h.cast(x, dtype), f32)
    if not h.dtype_of(e).is_floating_point:
        e = h.cast(ops.clamp(h.cast(e, torch.int64), -1000, 1000).output(0), i32)
        result = _scale(x, e)
        return h.cast(_ldexp_by_power(x, h.cast(e, f32), result) if integer_x else result, dtype)
    e = h.cast(e, f32)
    whole = ops.logical_and(ops.equal(e, ops.floor(e)), ops.less_equal(ops.abs(e), h.const(126.0, f32)))
    exact = _pow2(h.cast(ops.select(whole, e, h.const(0.0, f32)).output(0), i32))
    power = ops.select(whole, exact, ops.power(h.const(2.0, f32), e)).output(0)
    if dtype != f32:
        power = h.cast(h.cast(power, dtype), f32)  # eager's power is of the 16-bit type
    return h.cast(_ldexp_by_power(x, e, ops.multiply(x, power).output(0)), dtype)


def _ldexp_by_power(x: ov.Output, e: ov.Output, result: ov.Output) -> ov.Output:
    """``result`` where eager's ``pow(2.0, e)`` in f32 overflows (x times inf) or underflows (0)."""
    f32 = torch.float32
    overflow = ops.less_equal(h.const(128.0, f32), e)
    result = ops.select(overflow, ops.multiply(x, h.infinity(f32)), result)
    underflow = ops.less(e, h.const(-149.0, f32))
    return ops.select(underflow, ops.multiply(x, h.const(0.0, f32)), result).output(0)


@lowers(aten.frexp.Tensor, validator=_float_input)
def frexp(ctx, node, x):
    """Zeros, infinities and NaN give ``(x, 0)``, as torch's."""
    x = h.cast(x, torch.float32)
    m, e, regular = _frexp32(x)
    m = ops.select(ops.less(x, h.const(0.0, torch.float32)), ops.negative(m), m)
    mantissa = ops.select(regular, m, x).output(0)
    exponent = ops.select(regular, e, h.const(0, torch.int32)).output(0)
    return [h.cast(mantissa, h.out_dtype(node, 0)), exponent]


def _frexp32(x: ov.Output) -> tuple[ov.Output, ov.Output, ov.Output]:
    """``|x| = m * 2**e`` with ``0.5 <= m < 1`` (f32 ``m``, i32 ``e``) where ``regular`` (finite,
    nonzero): ``e`` estimated from the logarithm, corrected by one from the scaled ``m``."""
    f32, i32 = torch.float32, torch.int32
    size = ops.abs(x).output(0)
    regular = ops.logical_and(ops.is_finite(x), ops.not_equal(size, h.const(0.0, f32))).output(0)
    safe = ops.select(regular, size, h.const(1.0, f32)).output(0)
    log2 = ops.divide(ops.log(safe), h.const(math.log(2.0), f32))
    e = h.cast(ops.add(ops.floor(log2), h.const(1.0, f32)).output(0), i32)
    m = _scale(safe, ops.negative(e).output(0))
    high = ops.less_equal(h.const(1.0, f32), m)
    e = ops.select(high, ops.add(e, h.const(1, i32)), e).output(0)
    m = ops.select(high, ops.multiply(m, h.const(0.5, f32)), m).output(0)
    low = ops.less(m, h.const(0.5, f32))
    e = ops.select(low, ops.subtract(e, h.const(1, i32)), e).output(0)
    m = ops.select(low, ops.multiply(m, h.const(2.0, f32)), m).output(0)
    return m, e, regular


# Significand bits and frexp's exponent of the smallest normal number, per float type.
_FLOAT_LAYOUT = {torch.float32: (24, -125), torch.float16: (11, -13), torch.bfloat16: (8, -125)}


@lowers(aten.nextafter.default, validator=_float_input)
def nextafter(ctx, node, x, y):
    """The neighbour of ``x`` toward ``y`` by arithmetic (OpenVINO has no bitcast): ``x`` plus or
    minus its ulp, ``2**(e - p)`` from frexp's ``e`` (at least the smallest normal's), half that
    when moving toward zero from a power of two. Exact for normal results; the plugin flushes
    f32 subnormals, so steps below 2**-126 give 0 (f16 subnormals are normal in f32)."""
    dtype = h.out_dtype(node)
    f32, i32 = torch.float32, torch.int32
    bits, min_e = _FLOAT_LAYOUT[dtype]
    x, y = (h.cast(h.cast(v, dtype), f32) for v in (x, y))
    zero = h.const(0.0, f32)
    m, e, _ = _frexp32(x)
    e = ops.maximum(e, h.const(min_e, i32)).output(0)
    up = ops.less(x, y).output(0)
    toward_zero = ops.not_equal(up, ops.less(zero, x))  # x > 0 moving down, x < 0 moving up
    half = ops.logical_and(
        toward_zero, ops.logical_and(ops.equal(m, h.const(0.5, f32)), ops.less(h.const(min_e, i32), e))
    )
    e = ops.select(half, ops.subtract(e, h.const(1, i32)), e).output(0)
    ulp = _scale(h.const(1.0, f32), ops.subtract(e, h.const(bits, i32)).output(0))
    result = ops.select(up, ops.add(x, ulp), ops.subtract(x, ulp)).output(0)
    # From zero: the smallest subnormal with y's sign; from an infinity: the largest finite.
    tiny = ops.multiply(_scale(h.const(1.0, f32), h.const(min_e - bits, i32)), ops.sign(y))
    result = ops.select(ops.equal(x, zero), tiny, result)
    largest = ops.multiply(h.const(torch.finfo(dtype).max, f32), ops.sign(x))
    result = ops.select(ops.is_inf(x), largest, result)
    result = ops.select(ops.equal(x, y), y, result)
    nan = ops.logical_or(ops.is_nan(x), ops.is_nan(y))
    return h.cast(ops.select(nan, ops.add(x, y), result).output(0), dtype)


def _integer_result(node: torch.fx.Node) -> str | None:
    dtype = h.out_dtype(node)
    return None if not dtype.is_floating_point and dtype != torch.bool else "needs an integer result"


def _shift_count(b: ov.Output, bits: int) -> tuple[ov.Output, ov.Output]:
    """Whether a count is outside ``[0, bits)``, and the count clamped into it."""
    outside = ops.logical_or(ops.less(b, h.const(0, h.dtype_of(b))), ops.less_equal(h.const(bits, h.dtype_of(b)), b))
    return outside.output(0), ops.clamp(b, 0, bits - 1).output(0)


def _shift(builder, a: ov.Output, count: ov.Output, bits: int) -> ov.Output:
    """``builder(a, count)``; 64-bit counts in two halves of at most 32: the CPU plugin computes
    i64 as i32, whose shift takes the count modulo 32 (``5 >> 32`` gave 5)."""
    if bits < 64:
        return builder(a, count).output(0)
    half = ops.divide(count, h.const(2, h.dtype_of(count))).output(0)
    return builder(builder(a, half), ops.subtract(count, half)).output(0)


@lowers(
    aten.bitwise_left_shift.Tensor,
    aten.bitwise_left_shift.Tensor_Scalar,
    aten.bitwise_left_shift.Scalar_Tensor,
    aten.__lshift__.Scalar,
    aten.__lshift__.Tensor,
    validator=_integer_result,
)
def bitwise_left_shift(ctx, node, a, b):
    """torch's: 0 for a count outside ``[0, bits)``, else the bits shifted out wrap."""
    dtype = h.out_dtype(node)
    a, b = h.to_wrapping(node, a, b)
    bits = torch.iinfo(dtype).bits
    outside, count = _shift_count(b, bits)

    def magnitude():  # a * 2**count, or 0 for a count outside [0, bits)
        scaled = ops.multiply(
            eager_checks.as_f32(a), ops.power(h.const(2.0, torch.float32), h.cast(count, torch.float32))
        )
        return ops.select(outside, h.const(0.0, torch.float32), scaled).output(0)

    eager_checks.stays_int32(ctx, node, magnitude)
    shifted = _shift(ops.bitwise_left_shift, a, count, bits)
    return h.cast(ops.select(outside, h.const(0, h.dtype_of(a)), shifted).output(0), dtype)


@lowers(
    aten.bitwise_right_shift.Tensor,
    aten.bitwise_right_shift.Tensor_Scalar,
    aten.bitwise_right_shift.Scalar_Tensor,
    aten.__rshift__.Scalar,
    aten.__rshift__.Tensor,
    validator=_integer_result,
)
def bitwise_right_shift(ctx, node, a, b):
    """Arithmetic for signed types; a count outside ``[0, bits)`` gives 0 (unsigned) or shifts
    by ``bits - 1`` (0 or -1), as torch's."""
    dtype = h.out_dtype(node)
    a, b = h.to_wrapping(node, a, b)
    bits = torch.iinfo(dtype).bits
    outside, count = _shift_count(b, bits)
    if dtype.is_signed:
        count = ops.select(outside, h.const(bits - 1, h.dtype_of(count)), count).output(0)
    shifted = _shift(ops.bitwise_right_shift, a, count, bits)
    if not dtype.is_signed:
        shifted = ops.select(outside, h.const(0, h.dtype_of(a)), shifted).output(0)
    return h.cast(shifted, dtype)


def _blend(mask: ov.Output, x: ov.Output, y: ov.Output) -> ov.Output:
    """``x`` where ``mask`` is -1, ``y`` where it is 0 (integers, bitwise: see
    :func:`_exact_quotient`)."""
    return ops.bitwise_or(ops.bitwise_and(x, mask), ops.bitwise_and(y, ops.bitwise_not(mask))).output(0)


def _gcd(a: ov.Output, b: ov.Output, bits: int) -> ov.Output:
    """Stein's binary gcd of ``|a|`` and ``|b|``, unrolled: each step halves an even side, or
    replaces the larger of two odd sides by half their difference, so the two bit lengths
    shrink by one a step and ``2 * bits`` steps reach a zero. No division: the CPU plugin
    computes a fused integer chain holding a Divide or Mod in f32 (``1836311903 %
    1134903170`` gave 701408768, not 701408733), so Euclid's algorithm was inexact beyond
    2**24 however its quotients were corrected. Choices are masks, as in
    :func:`_exact_quotient`. ``bits``: the node's type's (8-bit types compute in i32)."""
    dtype = h.dtype_of(a)
    width = torch.iinfo(dtype).bits
    one, sign = h.const(1, dtype), h.const(width - 1, dtype)
    a, b = ops.abs(a).output(0), ops.abs(b).output(0)
    k = ops.multiply(a, h.const(0, dtype)).output(0)  # the common power of two, shifted out

    def nonzero(x):  # -1 where x > 0, else 0
        return _shift(ops.bitwise_right_shift, ops.negative(x).output(0), sign, width)

    for _ in range(2 * bits):
        active = ops.bitwise_and(nonzero(a), nonzero(b))
        a_odd, b_odd = ops.bitwise_and(a, one), ops.bitwise_and(b, one)
        a_even = ops.bitwise_and(active, ops.subtract(a_odd, one))
        b_even = ops.bitwise_and(active, ops.subtract(b_odd, one))
        both_odd = ops.bitwise_and(active, ops.negative(ops.bitwise_and(a_odd, b_odd))).output(0)
        k = ops.add(k, ops.bitwise_and(ops.bitwise_and(a_even, b_even), one)).output(0)
        half_diff = ops.bitwise_right_shift(ops.abs(ops.subtract(a, b)), one).output(0)
        smaller = ops.minimum(a, b).output(0)
        a_next = _blend(a_even.output(0), ops.bitwise_right_shift(a, one).output(0), a)
        b_next = _blend(b_even.output(0), ops.bitwise_right_shift(b, one).output(0), b)
        a, b = _blend(both_odd, half_diff, a_next), _blend(both_odd, smaller, b_next)
    return _shift(ops.bitwise_left_shift, ops.add(a, b).output(0), k, width)


def _value_bits(node) -> int:
    """The bits an integer result's values can hold on the CPU plugin, which computes int64 as
    int32 (guarantees.md): 64 unrolled gcd steps instead of 128, half the compile time."""
    return min(torch.iinfo(h.out_dtype(node)).bits, 32)


@lowers(aten.gcd.default, validator=_integer_result)
def gcd(ctx, node, a, b):
    a, b = h.to_wrapping(node, a, b)
    return h.cast(_gcd(a, b, _value_bits(node)), h.out_dtype(node))


def _exact_quotient(n: ov.Output, d: ov.Output, bits: int) -> ov.Output:
    """``n / d`` for ``n >= 0``, ``d > 0``, by restoring binary division in bitwise arithmetic
    only. No Divide (see :func:`_gcd`), and no Select or comparison: the plugin ran a Select of
    i32 values on a computed condition in f32 too (``2**31 - 1`` came back as ``-2**31``), so
    each step's choice is a mask, ``-1`` or ``0``, from the sign of ``2r + bit - d`` (formed as
    ``r - (d - r - bit)``: nothing overflows for ``d`` near the type's maximum). ``n`` has at
    most ``bits`` bits (the node's type, narrower than ``n``'s for 8-bit types)."""
    dtype = h.dtype_of(n)
    width = torch.iinfo(dtype).bits
    bits = min(bits, width - 1)
    one = h.const(1, dtype)
    q = r = ops.multiply(n, h.const(0, dtype)).output(0)
    for i in range(bits - 1, -1, -1):
        bit = ops.bitwise_and(_shift(ops.bitwise_right_shift, n, h.const(i, dtype), width), one)
        diff = ops.subtract(r, ops.subtract(ops.subtract(d, r), bit)).output(0)
        short = _shift(ops.bitwise_right_shift, diff, h.const(width - 1, dtype), width)  # -1: d does not fit
        fits = ops.bitwise_not(short)
        r = ops.bitwise_or(ops.bitwise_and(diff, fits), ops.bitwise_and(ops.add(ops.add(r, r), bit), short)).output(0)
        q = ops.bitwise_or(q, ops.bitwise_and(h.const(1 << i, dtype), fits)).output(0)
    return q


@lowers(aten.lcm.default, validator=_integer_result)
def lcm(ctx, node, a, b):
    """torch's ``abs(a / gcd * b)``, the quotient exact (no Divide). A zero gcd means both are
    0: dividing by 1 instead gives torch's 0."""
    a, b = h.to_wrapping(node, a, b)
    dtype = h.dtype_of(a)
    bits = _value_bits(node)
    divisor = ops.maximum(_gcd(a, b, bits), h.const(1, dtype)).output(0)
    q = _exact_quotient(ops.abs(a).output(0), divisor, bits)
    return h.cast(ops.abs(ops.multiply(q, ops.abs(b))).output(0), h.out_dtype(node))
