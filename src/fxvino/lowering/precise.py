"""``log1p``, ``expm1``, ``softplus`` and ``erf`` as accurate near zero as PyTorch's.

OpenVINO has no Log1p or Expm1, and its CPU plugin's SoftPlus and Erf lose the small values:
measured against float64 in f32 on the Zen 4, ``log(1 + x)`` was 4.7e-5 relative off at x = 1e-3
and 0 below ~6e-8 (eager: within half an f32 step), ``exp(x) - 1`` 2.3e-5 off at 1e-3, SoftPlus
930x its value at -20 (1.9e-6 where the value is 2.1e-9) and 0 at -15, and Erf more than 2.4e-7
relative off everywhere below 0.32 (5.6% at 1e-6, 0 below ~6e-8). Those are the values that
losses, log-probabilities and Mamba's step sizes are made of. Each helper computes in its
operand's type; 16-bit lowerings call them in f32 (``helpers.to_opmath``).
"""

from __future__ import annotations

import math

import openvino as ov
import openvino.opset16 as ops

from fxvino.lowering import helpers as h


def log1p(x: ov.Output) -> ov.Output:
    """log(1 + x): ``log(u) * x / (u - 1)`` for ``u = 1 + x`` rounded (Goldberg), which cancels
    the rounding of ``u``; x itself where ``u`` is 1; -inf at -1, NaN below, +inf at +inf."""
    dtype = h.dtype_of(x)
    one = h.const(1, dtype)
    if x.get_node().get_type_name() == "Exp":
        # OpenVINO fuses log(exp(a) + 1) into its SoftPlus (the inaccurate one); an exp is never
        # negative, so the Maximum changes nothing but the pattern.
        x = ops.maximum(x, h.const(0, dtype)).output(0)
    u = ops.add(x, one).output(0)
    ratio = ops.multiply(ops.log(u), ops.divide(x, ops.subtract(u, one))).output(0)
    y = ops.select(ops.equal(u, one), x, ratio).output(0)
    return ops.select(ops.equal(u, h.infinity(dtype)), u, y).output(0)  # inf / inf above: +inf is its own


def expm1(x: ov.Output) -> ov.Output:
    """exp(x) - 1: ``(u - 1) * x / log(u)`` for ``u = exp(x)`` rounded (Kahan); x where ``u`` is 1,
    -1 where ``u - 1`` is, and ``u - 1`` itself where ``u`` is infinite (+inf, and -1 at -inf)."""
    dtype = h.dtype_of(x)
    one = h.const(1, dtype)
    u = ops.exp(x).output(0)
    um1 = ops.subtract(u, one).output(0)
    ratio = ops.multiply(um1, ops.divide(x, ops.log(u))).output(0)
    y = ops.select(ops.equal(u, one), x, ratio).output(0)
    plain = ops.logical_or(ops.equal(um1, h.const(-1, dtype)), ops.is_inf(u))
    return _nan_kept(x, ops.select(plain, um1, y).output(0))  # the plugin's exp(NaN) is +inf


def softplus(x: ov.Output) -> ov.Output:
    """log(1 + exp(x)) as ``max(x, 0) + log1p(exp(-|x|))``: neither overflows nor loses the tail."""
    zero = h.const(0, h.dtype_of(x))
    tail = log1p(ops.exp(ops.negative(ops.abs(x))).output(0))
    return _nan_kept(x, ops.add(ops.maximum(x, zero), tail).output(0))


def _nan_kept(x: ov.Output, y: ov.Output) -> ov.Output:
    return ops.select(ops.is_nan(x), x, y).output(0)


# erf's Maclaurin series, 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)), to n = 6: below 1/2 the
# next term is under 4e-10 of the sum.
_ERF_SERIES = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(6, -1, -1)]
_ERF_SERIES_BELOW = 0.5  # the plugin's Erf is within 2.4e-7 relative from ~0.32 up


def erf(x: ov.Output) -> ov.Output:
    """The plugin's Erf, or below 1/2 in magnitude the series (odd: x times a polynomial in x^2)."""
    dtype = h.dtype_of(x)
    x2 = ops.multiply(x, x).output(0)
    poly = h.const(_ERF_SERIES[0], dtype)
    for c in _ERF_SERIES[1:]:
        poly = ops.add(ops.multiply(poly, x2), h.const(c, dtype)).output(0)
    near = ops.multiply(x, poly).output(0)
    return ops.select(ops.less(ops.abs(x), h.const(_ERF_SERIES_BELOW, dtype)), near, ops.erf(x)).output(0)
