"""Float fmod, remainder and floor division as exact as PyTorch's.

PyTorch computes them with C's ``fmod``, which is exact: ``fmod(1.0, 0.1)`` is 0.09999999, and
``1.0 // 0.1`` is 9. The CPU plugin's Mod and FloorMod compute ``a - trunc(a / b) * b`` in float,
where the quotient can round to the next integer and the product loses its low bits: they give 0
and 10 there, an error of a whole divisor. Here the quotient's product with ``b`` is formed exactly
(Dekker's two-product from Veltkamp splits, plain multiplies and adds, so it does not depend on the
plugin fusing them into FMAs), and a quotient one off is corrected from the remainder's sign and
size. fmod and remainder are exact while ``|a / b| < 2**24``; beyond that they keep the rounding
of ``a / b``, as the plugin's own ops do everywhere. Floor division equals eager's while
``|a / b| < 2**22`` (tested; above, f32 rounding of ``a - fmod(a, b)`` can move it by one).

16-bit floats compute fmod and remainder in f32 and round once at the end (their operands'
products are exact there); floor division rounds where PyTorch does (see :func:`floor_divide`).
"""

from __future__ import annotations

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.rounding import round_to, split

# 2**12 + 1: splits an f32 (24-bit significand) into two halves of at most 12 bits.
_SPLITTER = 4097.0


def _product_error(x: ov.Output, y: ov.Output, p: ov.Output) -> ov.Output:
    """``x * y - p`` exactly, for ``p`` the rounded product ``x * y``."""
    xh, xl = split(x, _SPLITTER)
    yh, yl = split(y, _SPLITTER)
    e = ops.subtract(ops.multiply(xh, yh), p)
    e = ops.add(ops.add(e, ops.multiply(xh, yl)), ops.multiply(xl, yh))
    return ops.add(e, ops.multiply(xl, yl)).output(0)


def _f32(a: ov.Output, b: ov.Output) -> tuple[ov.Output, ov.Output, torch.dtype]:
    dtype = h.dtype_of(a)
    return h.cast(a, torch.float32), h.cast(b, torch.float32), dtype


def _fmod32(a: ov.Output, b: ov.Output) -> ov.Output:
    zero = h.const(0.0, torch.float32)
    q = h.trunc(ops.divide(a, b).output(0))
    p = ops.multiply(q, b).output(0)
    exact = ops.subtract(ops.subtract(a, p), _product_error(q, b, p)).output(0)
    # Products beyond f32's range (huge quotients) leave the split NaN: keep the plain remainder.
    r = ops.select(ops.is_finite(exact), exact, ops.subtract(a, p)).output(0)
    # The quotient was one too far (remainder against a's sign) or one short (|r| >= |b|).
    step = ops.multiply(ops.sign(a), ops.abs(b)).output(0)
    over = ops.logical_and(ops.not_equal(r, zero), ops.not_equal(ops.less(r, zero), ops.less(a, zero)))
    r = ops.select(over, ops.add(r, step), r).output(0)
    short = ops.less_equal(ops.abs(b), ops.abs(r))  # not GreaterEqual: true for NaN in the plugin
    r = ops.select(short, ops.subtract(r, step), r).output(0)
    # C's fmod: NaN for an infinite a or a zero b, a itself for an infinite b (a finite).
    keep_a = ops.logical_and(ops.is_inf(b), ops.is_finite(a))
    return ops.select(keep_a, a, r).output(0)


def fmod(a: ov.Output, b: ov.Output) -> ov.Output:
    """``torch.fmod`` of floats: the remainder has ``a``'s sign."""
    a, b, dtype = _f32(a, b)
    return h.cast(_fmod32(a, b), dtype)


def _remainder32(a: ov.Output, b: ov.Output) -> ov.Output:
    zero = h.const(0.0, torch.float32)
    r = _fmod32(a, b)
    wrong_sign = ops.logical_and(ops.not_equal(r, zero), ops.not_equal(ops.less(r, zero), ops.less(b, zero)))
    return ops.select(wrong_sign, ops.add(r, b), r).output(0)


def remainder(a: ov.Output, b: ov.Output) -> ov.Output:
    """``torch.remainder`` (Python's ``%``) of floats: the remainder has ``b``'s sign."""
    a, b, dtype = _f32(a, b)
    return h.cast(_remainder32(a, b), dtype)


def floor_divide(a: ov.Output, b: ov.Output | float, dtype: torch.dtype) -> ov.Output:
    """``a // b`` of floats of ``dtype``, PyTorch's steps: ``(a - fmod(a, b)) / b``, one less
    where the remainder's sign differs from ``b``'s, then rounded to the nearest integer (the
    division is of an exact multiple, so only its rounding is left); ``a / b`` for a zero ``b``.

    For 16-bit floats PyTorch rounds to the type after every step, except when ``b`` is one
    element (a Python number or a one-element tensor): then it computes in f32, with a Python
    number unrounded. This follows both, to give its results."""
    one_element = h.one_element(b)
    a = h.cast(h.cast(a, dtype), torch.float32)
    b = h.cast(h.cast(b, dtype), torch.float32) if h.is_output(b) else h.const(b, torch.float32)
    stepwise = dtype != torch.float32 and not one_element

    def rounded(x: ov.Output) -> ov.Output:
        # By arithmetic: a Convert to the 16-bit type and back is dropped where the plugin
        # computes that type in f32.
        return round_to(x, dtype) if stepwise else x

    zero = h.const(0.0, torch.float32)
    mod = rounded(_fmod32(a, b))
    div = rounded(ops.divide(rounded(ops.subtract(a, mod).output(0)), b).output(0))
    step_down = ops.logical_and(ops.not_equal(mod, zero), ops.not_equal(ops.less(b, zero), ops.less(mod, zero)))
    div = ops.select(step_down, rounded(ops.subtract(div, h.const(1.0, torch.float32)).output(0)), div).output(0)
    floored = ops.floor(div).output(0)
    up = ops.less(h.const(0.5, torch.float32), rounded(ops.subtract(div, floored).output(0)))
    floored = ops.select(up, ops.add(floored, h.const(1.0, torch.float32)), floored).output(0)
    plain = ops.divide(a, b).output(0)
    # A zero quotient takes the sign of a / b; a zero b gives a / b (inf or NaN).
    signed_zero = ops.multiply(zero, plain)
    result = ops.select(ops.equal(div, zero), signed_zero, floored)
    return h.cast(ops.select(ops.equal(b, zero), plain, result).output(0), dtype)
