"""lgamma, digamma, polygamma (orders 0 and 1), erfinv, ndtri, i0/i0e/i1/i1e, the Bessel
functions j0/j1/y0/y1/spherical j0 and k0/k1 (plain and scaled) on OpenVINO against eager PyTorch.

Expectations come from eager on the same inputs: wide magnitudes, negatives, points next to
poles and zeros, and the special values (NaN, infinities, signed zeros, poles, the ends of
the domains). 16-bit inputs compute in f32 in both, so they may differ by one rounding of the
result.
"""

from __future__ import annotations

import math

import pytest
import torch

from harness import assert_all_on_openvino, run_fxvino

pytestmark = pytest.mark.numerics

NAN, INF = float("nan"), float("inf")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _real_line() -> torch.Tensor:
    """Magnitudes 1e-6..1e6 of both signs, a dense sweep of [-20, 12] (crossing every pole and
    zero there), points next to the negative integers, huge values and the special values."""
    mag = torch.logspace(-6, 6, 200)
    sweep = torch.linspace(-20, 12, 2001)
    poles = torch.arange(-10.0, 1.0)
    near = torch.cat([poles + 1e-3, poles - 1e-3, poles + 0.5])
    special = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 1.0, 2.0, 1e20, -1e20, 3e36, 1e37, -1e30, -1000.3])
    return torch.cat([mag, -mag, sweep, near, poles, special])


def _unit_interval() -> torch.Tensor:
    """(-1, 1) densely, values next to +-1 and 0, and the ends and outside of the domain."""
    inside = torch.rand(2000, generator=_gen()) * 2 - 1
    edges = 1 - torch.logspace(-7, -1, 50)
    special = torch.tensor([1.0, -1.0, 0.0, -0.0, 1.5, -2.0, INF, -INF, NAN, 1e-30, -1e-8, 3e-7])
    return torch.cat([inside, edges, -edges, torch.logspace(-30, -1, 50), special])


def _probabilities() -> torch.Tensor:
    """(0, 1) densely, both tails down to 1e-38 and 1 - 6e-8, the ends and outside."""
    inside = torch.rand(2000, generator=_gen(1))
    tails = torch.logspace(-38, -1, 200)
    special = torch.tensor([0.0, 1.0, 0.5, -0.1, 1.1, INF, -INF, NAN, 0.1353352832366127, 0.8646647167633873])
    return torch.cat([inside, tails, 1 - torch.logspace(-7, -1, 50), special])


def _bessel_line() -> torch.Tensor:
    """Both signs through the two Chebyshev ranges (joined at 8), up to and past exp's overflow."""
    sweep = torch.linspace(-100, 100, 4001)
    mag = torch.logspace(-8, 10, 200)
    special = torch.tensor([8.0, -8.0, 88.72, 88.73, -88.73, 0.0, -0.0, INF, -INF, NAN])
    return torch.cat([sweep, mag, -mag, special])


def _bessel_kinds_line() -> torch.Tensor:
    """Both signs through the range joins (2 for K, 5 for J and Y, 8 for the I inside K), the
    first zeros of J and Y, K's results through f32's subnormals (~87 to ~104), around 1e3 and
    1e6 (the Hankel forms' phases), magnitudes 1e-30..1e38 and the special values. No subnormal
    inputs: the plugin may flush them to zero, and Y and K are unbounded there."""
    sweep = torch.linspace(-110, 110, 4401)
    joins = torch.cat([torch.linspace(c - 0.01, c + 0.01, 101) for c in (2.0, 5.0, 8.0)])
    mag = torch.logspace(-30, 38, 300)
    far = torch.cat([1e3 + torch.rand(200, generator=_gen(2)) * 10, 1e6 + torch.rand(200, generator=_gen(3)) * 100])
    special = torch.tensor([NAN, INF, -INF, 0.0, -0.0, 2.0, 5.0, -5.0, 8.0, 1e-5, 1e20, 3e38, -3e38])
    return torch.cat([sweep, joins, mag, -mag, far, -far, special])


def _erfc_line() -> torch.Tensor:
    """Both signs through 1 and 2 (Cephes' range joins) up to where erfc leaves f32's normal
    range (~9.2: the plugin flushes subnormal results), tiny and huge inputs, the specials."""
    sweep = torch.linspace(-12, 9.1, 4001)
    mag = torch.logspace(-8, 0.95, 200)
    special = torch.tensor([1.0, 2.0, -1.0, 26.0, 1e10, -1e30, 0.0, -0.0, INF, -INF, NAN])
    return torch.cat([sweep, mag, -mag, special])


# (function, aten op, inputs, rtol, atol) of float32 cases; see each tolerance's reason.
CASES = {
    # The shift to [3/2, 5/2] keeps relative accuracy at the zeros 1 and 2; the zeros on the
    # negative axis (x ~ -2.457, -3.143, ...) come out of the reflection as a difference of
    # ~1 values, so there only ~1e-7 absolute holds (eager's glibc treats them specially).
    "lgamma": (torch.lgamma, "aten.lgamma.default", _real_line, 1e-5, 1e-6),
    # Eager's float digamma itself subtracts sums near its zero at 1.4616 and the negative zeros,
    # losing ~1e-7 absolute there; both compute it the same way.
    "digamma": (torch.digamma, "aten.digamma.default", _real_line, 1e-5, 1e-6),
    "polygamma0": (lambda x: torch.polygamma(0, x), "aten.polygamma.default", _real_line, 1e-5, 1e-6),
    # Trigamma is positive and has no zeros: relative only.
    "polygamma1": (lambda x: torch.polygamma(1, x), "aten.polygamma.default", _real_line, 1e-5, 0.0),
    # erfinv(0) = 0: the absolute part covers results below 1e-7 (a few of their ulps).
    "erfinv": (torch.erfinv, "aten.erfinv.default", _unit_interval, 1e-6, 1e-12),
    # ndtri crosses 0 at p = 1/2, where p - 1/2 carries an ulp of 1/2 (6e-8).
    "ndtri": (torch.special.ndtri, "aten.special_ndtri.default", _probabilities, 1e-6, 2e-7),
    # 1 - erf loses nothing below 1; beyond, exp(-x^2) is formed from an exact square (f32's
    # rounding of x^2 alone was 5e-6 relative at 9) and Cephes' tail: ~1e-6 of eager's.
    "erfc": (torch.erfc, "aten.erfc.default", _erfc_line, 2e-6, 0.0),
    "erfcx": (torch.special.erfcx, "aten.special_erfcx.default", _real_line, 2e-6, 0.0),
    "i0": (torch.i0, "aten.i0.default", _bessel_line, 2e-6, 0.0),
    "modified_bessel_i0": (
        torch.special.modified_bessel_i0,
        "aten.special_modified_bessel_i0.default",
        _bessel_line,
        2e-6,
        0.0,
    ),
    "modified_bessel_i1": (
        torch.special.modified_bessel_i1,
        "aten.special_modified_bessel_i1.default",
        _bessel_line,
        2e-6,
        0.0,
    ),
    "i0e": (torch.special.i0e, "aten.special_i0e.default", _bessel_line, 2e-6, 0.0),
    # i1(0) = 0: odd, relative accuracy down to the smallest inputs.
    "i1": (torch.special.i1, "aten.special_i1.default", _bessel_line, 2e-6, 0.0),
    "i1e": (torch.special.i1e, "aten.special_i1e.default", _bessel_line, 2e-6, 0.0),
    # J and Y oscillate: near their zeros the f32 cancellation (eager's as ours) leaves a few
    # ulps of the amplitude, so they are compared in units of it (AMPLITUDES); ~1e-6 relative
    # elsewhere, Y's zeros below 5 included (its log term cancels the rational part there).
    "bessel_j0": (torch.special.bessel_j0, "aten.special_bessel_j0.default", _bessel_kinds_line, 2e-6, 1e-6),
    "bessel_j1": (torch.special.bessel_j1, "aten.special_bessel_j1.default", _bessel_kinds_line, 2e-6, 1e-6),
    "bessel_y0": (torch.special.bessel_y0, "aten.special_bessel_y0.default", _bessel_kinds_line, 2e-6, 1e-6),
    "bessel_y1": (torch.special.bessel_y1, "aten.special_bessel_y1.default", _bessel_kinds_line, 2e-6, 1e-6),
    "spherical_bessel_j0": (
        torch.special.spherical_bessel_j0,
        "aten.special_spherical_bessel_j0.default",
        _bessel_kinds_line,
        2e-6,
        1e-6,
    ),
    # K has no zeros; its results below f32's smallest normal (unscaled, from ~87) are
    # subnormal in eager and may be flushed to 0 by the plugin: the absolute part covers them.
    "modified_bessel_k0": (
        torch.special.modified_bessel_k0,
        "aten.special_modified_bessel_k0.default",
        _bessel_kinds_line,
        2e-6,
        2**-126,
    ),
    "modified_bessel_k1": (
        torch.special.modified_bessel_k1,
        "aten.special_modified_bessel_k1.default",
        _bessel_kinds_line,
        2e-6,
        2**-126,
    ),
    "scaled_modified_bessel_k0": (
        torch.special.scaled_modified_bessel_k0,
        "aten.special_scaled_modified_bessel_k0.default",
        _bessel_kinds_line,
        2e-6,
        0.0,
    ),
    "scaled_modified_bessel_k1": (
        torch.special.scaled_modified_bessel_k1,
        "aten.special_scaled_modified_bessel_k1.default",
        _bessel_kinds_line,
        2e-6,
        0.0,
    ),
}


def _hankel_amplitude(x: torch.Tensor) -> torch.Tensor:
    """sqrt(2 / (pi |x|)), the amplitude J and Y decay with, at most 1; 1 at non-finite x."""
    a = x.float().abs()
    return torch.where(a.isfinite(), torch.sqrt(2 / (math.pi * a)).clamp(max=1.0), 1.0)


def _sinc_amplitude(x: torch.Tensor) -> torch.Tensor:
    """1 / |x|, spherical j0's, at most 1; 1 at non-finite x."""
    a = x.float().abs()
    return torch.where(a.isfinite(), (1 / a).clamp(max=1.0), 1.0)


# The oscillating functions' results and expectations are divided by their amplitude (or their
# own magnitude, where larger) before comparing: atol is then in units of it at every x.
AMPLITUDES = {
    "bessel_j0": _hankel_amplitude,
    "bessel_j1": _hankel_amplitude,
    "bessel_y0": _hankel_amplitude,
    "bessel_y1": _hankel_amplitude,
    "spherical_bessel_j0": _sinc_amplitude,
}


def _check(name: str, x: torch.Tensor, rtol: float, atol: float) -> None:
    fn, op, _, _, _ = CASES[name]
    out, report = run_fxvino(fn, x, fullgraph=True)
    assert_all_on_openvino(report, ops=(op,))
    expected = fn(x)
    if name in AMPLITUDES:
        scale = torch.maximum(AMPLITUDES[name](x), expected.abs().nan_to_num(nan=0.0, posinf=1.0))
        out, expected = out / scale, expected / scale
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", list(CASES))
def test_float32(name: str):
    _, _, inputs, rtol, atol = CASES[name]
    _check(name, inputs(), rtol, atol)


# One rounding of an f32 result to 16 bits may land on the other neighbour: 1 ulp (a relative
# 2^-10 and 2^-7); the absolute part covers results near a zero, where the f32 difference above
# is large relative to them.
SIXTEEN_BIT = {torch.float16: (1e-3, 1e-5), torch.bfloat16: (8e-3, 1e-4)}


# Eager has no 16-bit kernel of these (fxvino leaves them to PyTorch, which raises).
NO_16_BIT = (
    "ndtri",
    "erfcx",
    "modified_bessel_i0",
    "modified_bessel_i1",
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "spherical_bessel_j0",
    "modified_bessel_k0",
    "modified_bessel_k1",
    "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1",
)


@pytest.mark.parametrize("dtype", list(SIXTEEN_BIT), ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", [n for n in CASES if n not in NO_16_BIT])
def test_sixteen_bit(name: str, dtype: torch.dtype):
    inputs = CASES[name][2]().to(dtype)
    if name in ("lgamma", "digamma", "polygamma0", "polygamma1", "i0", "i1"):
        inputs = inputs.clamp(-60, 60)  # beyond, the results overflow f16 alike
    _check(name, inputs, *SIXTEEN_BIT[dtype])


@pytest.mark.parametrize(
    "name",
    ["lgamma", "digamma", "i0", "i1e", *(n for n in CASES if "bessel_j" in n or "bessel_y" in n or "bessel_k" in n)],
)
def test_integer_input_promotes_to_float(name: str):
    _, _, _, rtol, atol = CASES[name]
    _check(name, torch.arange(-12, 40), rtol, atol)


def test_polygamma_higher_order_declined():
    x = torch.linspace(0.5, 4, 8)
    out, report = run_fxvino(lambda t: torch.polygamma(2, t), x)
    assert report.torch_ops.get("aten.polygamma.default", 0) > 0, str(report)
    torch.testing.assert_close(out, torch.polygamma(2, x))


@pytest.mark.parametrize("name", NO_16_BIT)
def test_16_bit_inputs_eager_rejects_raise_its_error(name: str):
    fn = CASES[name][0]
    with pytest.raises(NotImplementedError):
        torch.compile(fn, backend="fxvino")(torch.rand(8).to(torch.bfloat16))
