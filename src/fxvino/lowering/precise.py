"""``log1p``, ``expm1``, ``softplus`` and ``erf`` as accurate near zero as PyTorch's.

OpenVINO has no Log1p or Expm1, and its CPU plugin's SoftPlus and Erf lose the small values:
measured against float64 in f32 on the Zen 4, ``log(1 + x)`` was 4.7e-5 relative off at x = 1e-3
and 0 below ~6e-8 (eager: within half an f32 step), ``exp(x) - 1`` 2.3e-5 off at 1e-3, SoftPlus
930x its value at -20 (1.9e-6 where the value is 2.1e-9) and 0 at -15, and Erf more than 2.4e-7
relative off everywhere below 0.32 (5.6% at 1e-6, 0 below ~6e-8). Those are the values that
losses, log-probabilities and Mamba's step sizes are made of. Each helper computes in its
operand's type; 16-bit lowerings call them in f32 (``rounding.opmath_operands``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import openvino as ov
import openvino.opset16 as ops

from fxvino.lowering import helpers as h


def log1p(x: ov.Output) -> ov.Output:
    """log(1 + x): ``log(u) * x / (u - 1)`` for ``u = 1 + x`` rounded (Goldberg), which cancels
    the rounding of ``u``; x itself where ``u`` is 1; -inf at -1, NaN below, +inf at +inf. Of
    ``exp(-|a|)`` (PyTorch's logsigmoid and logaddexp) the series of :func:`log1p_of_unit`."""
    node = x.get_node()
    exponent = _exp_operand(x)
    if exponent is not None and _is_minus_abs(exponent):
        return log1p_of_unit(x)
    dtype = h.dtype_of(x)
    one = h.const(1, dtype)
    if node.get_type_name() == "Exp":
        # OpenVINO fuses log(exp(a) + 1) into its SoftPlus (the inaccurate one); an exp is never
        # negative, so the Maximum changes nothing but the pattern.
        x = ops.maximum(x, h.const(0, dtype)).output(0)
    u = ops.add(x, one).output(0)
    ratio = ops.multiply(ops.log(u), ops.divide(x, ops.subtract(u, one))).output(0)
    y = ops.select(ops.equal(u, one), x, ratio).output(0)
    return ops.select(ops.equal(u, h.infinity(dtype)), u, y).output(0)  # inf / inf above: +inf is its own


# log1p(e) = 2 atanh(s) for s = e / (2 + e): 2 s (1 + s^2/3 + s^4/5 + ...), s <= 1/3 for e in
# [0, 1], so eight terms leave under 1.4e-8 of the sum.
_ATANH_SERIES = [1 / (2 * k + 1) for k in range(7, -1, -1)]


def log1p_of_unit(e: ov.Output) -> ov.Output:
    """log(1 + e) for ``e`` in [0, 1] (NaN kept) without OpenVINO's Log, which the CPU plugin runs
    outside its fused kernels (386 us for 64x4096 values on the Zen 4, an Exp 95): a series in
    ``e / (2 + e)``."""
    dtype = h.dtype_of(e)
    s = ops.divide(e, ops.add(e, h.const(2, dtype))).output(0)
    poly = polynomial(ops.multiply(s, s).output(0), _ATANH_SERIES)
    return ops.multiply(ops.add(s, s), poly).output(0)


# expm1(x) = x (1 + x/2! + x^2/3! + ...): below ln 2 in magnitude, nine terms leave under 1e-8 of
# the sum; beyond, exp(x) - 1 loses at most a bit.
_EXPM1_SERIES = [1 / math.factorial(k + 1) for k in range(8, -1, -1)]
_EXPM1_SERIES_BELOW = math.log(2)


def expm1(x: ov.Output) -> ov.Output:
    """exp(x) - 1, by its series where the subtraction would cancel (not Kahan's ``(u - 1) x /
    log(u)``: OpenVINO's Log runs outside the plugin's fused kernels); NaN kept (the plugin's
    exp(NaN) is +inf)."""
    dtype = h.dtype_of(x)
    near = ops.multiply(x, polynomial(x, _EXPM1_SERIES)).output(0)
    far = ops.subtract(ops.exp(x), h.const(1, dtype)).output(0)
    small = ops.less(ops.abs(x), h.const(_EXPM1_SERIES_BELOW, dtype))
    return _nan_kept(x, ops.select(small, near, far).output(0))


def softplus(x: ov.Output) -> ov.Output:
    """log(1 + exp(x)) as ``max(x, 0) + log1p(exp(-|x|))``: neither overflows nor loses the tail,
    and runs in the plugin's fused kernels (its own SoftPlus is 4-36 f32 steps off below 0)."""
    zero = h.const(0, h.dtype_of(x))
    tail = log1p_of_unit(ops.exp(ops.negative(ops.abs(x))).output(0))
    return _nan_kept(x, ops.add(ops.maximum(x, zero), tail).output(0))


def _nan_kept(x: ov.Output, y: ov.Output) -> ov.Output:
    return ops.select(ops.is_nan(x), x, y).output(0)


def _exp_operand(v: ov.Output) -> ov.Output | None:
    """``a`` if ``v`` is ``exp(a)``, bare or with its NaN kept (``elementwise._exp``)."""
    node = v.get_node()
    if node.get_type_name() == "Select":  # Select(IsNaN(a), a, Exp(a)) and nothing else
        condition, kept, v = node.input_value(0), node.input_value(1), node.input_value(2)
        if condition.get_node().get_type_name() != "IsNaN" or condition.get_node().input_value(0) != kept:
            return None
        node = v.get_node()
        if node.get_type_name() != "Exp" or node.input_value(0) != kept:
            return None
    return node.input_value(0) if node.get_type_name() == "Exp" else None


def _is_minus_abs(v: ov.Output) -> bool:
    node = v.get_node()
    return node.get_type_name() == "Negative" and node.input_value(0).get_node().get_type_name() == "Abs"


def polynomial(x: ov.Output, coefficients: Sequence[float]) -> ov.Output:
    """The polynomial with ``coefficients`` (highest power first) at ``x``, by Horner's rule, in
    ``x``'s type."""
    dtype = h.dtype_of(x)
    poly = h.const(coefficients[0], dtype)
    for c in coefficients[1:]:
        poly = ops.add(ops.multiply(poly, x), h.const(c, dtype)).output(0)
    return poly


# erf's Maclaurin series, 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)), to n = 6: below 1/2 the
# next term is under 4e-10 of the sum.
_ERF_SERIES = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(6, -1, -1)]
_ERF_SERIES_BELOW = 0.5  # the plugin's Erf is within 2.4e-7 relative from ~0.32 up


def erf(x: ov.Output) -> ov.Output:
    """The plugin's Erf, or below 1/2 in magnitude the series (odd: x times a polynomial in x^2)."""
    dtype = h.dtype_of(x)
    near = ops.multiply(x, polynomial(ops.multiply(x, x).output(0), _ERF_SERIES)).output(0)
    return ops.select(ops.less(ops.abs(x), h.const(_ERF_SERIES_BELOW, dtype)), near, ops.erf(x)).output(0)
