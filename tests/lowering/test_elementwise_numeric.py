"""Numeric elementwise ops (copysign, fmax/fmin, hypot, signbit, ldexp, frexp, round with
decimals, gcd/lcm, remainder of a scalar, bit shifts) on OpenVINO against eager PyTorch.

Inputs hit the edge cases: signed zeros, NaN, infinities, ties, magnitudes near the ends of the
float range, negative integers and shift counts past the bit width. Expectations are eager's.
"""

from __future__ import annotations

import pytest
import torch

from harness import assert_all_on_openvino, run_fxvino, sixteen_bit_numerics

# Marked ``numerics`` (run again as an AVX2-only CPU): the 16-bit cases, and the ops whose f32
# results go through the plugin's division or Power. Integer and boolean ops are exact integer
# arithmetic on every class.

NAN, INF = float("nan"), float("inf")
FLOATS = [torch.float32, torch.float16, torch.bfloat16]

# Signed zeros, NaN, infinities, ties at .5, and magnitudes near each type's limits (scaled
# into range per dtype by ``_special``).
SPECIAL = [0.0, -0.0, NAN, INF, -INF, 0.5, -0.5, 1.5, -2.5, 3.0, -7.25, 1e-3, -1e-3, 1e30, -1e30, 3e38, 1e-30]


def _special(dtype: torch.dtype) -> torch.Tensor:
    x = torch.tensor(SPECIAL, dtype=torch.float32)
    limit = torch.finfo(dtype).max
    x = torch.where(x.abs() > limit, x.sign() * limit / 2, x)  # big but finite in 16-bit types
    tiny = torch.finfo(dtype).tiny
    x = torch.where((x.abs() < tiny) & (x != 0), x.sign() * tiny * 4, x)  # normal in every type
    return _positive_nan(x.to(dtype))


def _positive_nan(x: torch.Tensor) -> torch.Tensor:
    """``x`` with its NaNs' sign bits cleared. OpenVINO cannot read a NaN's sign (no bitcast), and
    torch's f32 -> bf16 conversion makes every NaN negative (0xFFFF)."""
    if x.dtype == torch.float32:
        bits, mask = x.view(torch.int32), 0x7FFFFFFF
    else:
        bits, mask = x.view(torch.int16), 0x7FFF
    return torch.where(x.isnan(), bits & mask, bits).view(x.dtype)


def _random(dtype: torch.dtype, n: int = 64, seed: int = 0, scale: float = 10.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, generator=g) * scale).to(dtype)


def _check(fn, *args, ops: tuple[str, ...]):
    expected = fn(*args)
    out, report = run_fxvino(fn, *args, fullgraph=True)
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)
    assert_all_on_openvino(report, ops=ops)
    return out, expected


def _pairs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every special value against every other, then random operands."""
    s = _special(dtype)
    a, b = torch.cartesian_prod(s.float(), s.float()).unbind(1)
    a, b = _positive_nan(a.to(dtype)), _positive_nan(b.to(dtype))
    return torch.cat([a, _random(dtype, seed=1)]), torch.cat([b, _random(dtype, seed=2)])


# ----------------------------------------------------------------------------- copysign, signbit


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(*FLOATS))
def test_copysign(dtype):
    a, b = _pairs(dtype)
    _check(torch.copysign, a, b, ops=("aten.copysign.Tensor",))


@pytest.mark.parametrize("other", [-1.0, 2.0, -0.0])
def test_copysign_scalar(other):
    _check(lambda x: torch.copysign(x, other), _special(torch.float32), ops=("aten.copysign.Scalar",))


def test_copysign_of_integers():
    a = torch.tensor([-5, 0, 3, 7, -1])
    b = torch.tensor([1, -2, -3, 0, 4])
    out, _ = _check(torch.copysign, a, b, ops=("aten.copysign.Tensor",))
    assert out.dtype == torch.float32


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(*FLOATS, torch.int64, torch.int32, torch.bool))
def test_signbit(dtype):
    # A NaN counts as positive in OpenVINO (no bitcast reads its sign): only positive NaN here.
    x = _special(dtype) if dtype.is_floating_point else torch.tensor([-3, 0, 5, -1, 2]).to(dtype)
    _check(torch.signbit, x, ops=("aten.signbit.default",))


# ----------------------------------------------------------------------------- fmax, fmin, hypot


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(*FLOATS, torch.int64))
@pytest.mark.parametrize("fn", [torch.fmax, torch.fmin], ids=["fmax", "fmin"])
def test_fmax_fmin(fn, dtype):
    if dtype.is_floating_point:
        a, b = _pairs(dtype)
    else:
        a, b = torch.tensor([-5, 0, 3, 7, -1, 2**20]), torch.tensor([1, -2, 3, 0, -4, -(2**20)])
    _check(fn, a, b, ops=(f"aten.{fn.__name__}.default",))


def test_fmax_fmin_nan_sides():
    a = torch.tensor([NAN, 1.0, NAN, -INF, -0.0])
    b = torch.tensor([2.0, NAN, NAN, NAN, 0.0])
    out, _ = _check(lambda a, b: (torch.fmax(a, b), torch.fmin(a, b)), a, b, ops=("aten.fmax.default",))
    assert out[0][:2].tolist() == [2.0, 1.0] and out[0][2].isnan()  # NaN only when both are


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(*FLOATS))
def test_hypot(dtype):
    a, b = _pairs(dtype)
    expected = torch.hypot(a, b)
    out, report = run_fxvino(torch.hypot, a, b, fullgraph=True)
    # C's hypot is correctly rounded; the scaled square root is within an ulp of it.
    tol = {torch.float32: 2e-7, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=tol, atol=0)
    # Infinities win over NaN, and big operands do not overflow.
    torch.testing.assert_close(out.isinf(), expected.isinf())
    assert_all_on_openvino(report, ops=("aten.hypot.default",))


# ----------------------------------------------------------------------------- ldexp, frexp


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(*FLOATS, torch.int64))
def test_ldexp(dtype):
    x = _special(dtype) if dtype.is_floating_point else torch.tensor([-3, 0, 5, 1, -1, 7, 2, 9])
    x = x.repeat(8)
    g = torch.Generator().manual_seed(3)
    # Exponents that overflow, underflow and bring huge and tiny operands back into range.
    # (Results in the subnormal range are flushed to zero by the plugin: kept out.)
    e = torch.randint(-20, 20, (x.numel(),), generator=g)
    e[::7] = 200
    e[3::7] = -200
    e[5::11] = 1000
    x_f32 = x.float()
    scaled = x_f32 * torch.pow(2.0, e.double()).float()
    normal_or_zero = (
        (scaled == 0)
        | (scaled.abs() >= torch.finfo(dtype if dtype.is_floating_point else torch.float32).tiny)
        | ~scaled.isfinite()
    )
    e = torch.where(normal_or_zero, e, torch.zeros_like(e))
    _check(torch.ldexp, x, e, ops=("aten.ldexp.Tensor",))


def test_ldexp_huge_and_tiny():
    x = torch.tensor([2.0**100, 2.0**-100, 3.0, 0.0, -0.0, 1e-30, 1e38, INF, NAN])
    e = torch.tensor([-130, 150, 126, 1000, 1000, 200, -250, -1000, 1])
    _check(torch.ldexp, x, e, ops=("aten.ldexp.Tensor",))


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(*FLOATS))
def test_frexp(dtype):
    x = torch.cat([_special(dtype), _random(dtype, scale=1e3)])
    powers = torch.tensor([2.0**k for k in range(-100, 101, 7)]).to(dtype)
    powers = powers[powers.isfinite() & (powers.abs() >= torch.finfo(dtype).tiny)]
    # Powers of two and their neighbours: where the logarithm's estimate is off by one.
    below = torch.nextafter(powers.float(), torch.zeros(())).to(dtype)
    x = torch.cat([x, powers, -powers, below])
    _check(lambda x: tuple(torch.frexp(x)), x, ops=("aten.frexp.Tensor",))


# ----------------------------------------------------------------------------- round(decimals)


@pytest.mark.numerics
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("decimals", [0, 1, 3, -1, -3])
def test_round_decimals(dtype, decimals):
    x = torch.cat(
        [
            _special(dtype),
            _random(dtype, n=256, scale=100.0),
            torch.tensor([0.125, 2.5, -2.5, 0.05, 1234.5, 2500.0, 3500.0, -1500.0, 45.0]).to(dtype),
        ]
    )
    _check(lambda x: torch.round(x, decimals=decimals), x, ops=("aten.round.decimals",))


# ----------------------------------------------------------------------------- gcd, lcm


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8])
def test_gcd_lcm(dtype):
    g = torch.Generator().manual_seed(4)
    high = min(torch.iinfo(dtype).max, 2**20)
    a = torch.randint(-high, high, (64,), generator=g)
    b = torch.randint(-high, high, (64,), generator=g) // torch.randint(1, 50, (64,), generator=g)
    # Zeros, signs, equal operands and consecutive Fibonacci numbers (Euclid's longest runs).
    fib = [1, 1]
    # The plugin computes int64 as int32 (docs/user-guide/guarantees.md): int32's range.
    while fib[-1] + fib[-2] <= torch.iinfo(dtype if dtype != torch.int64 else torch.int32).max:
        fib.append(fib[-1] + fib[-2])
    a = torch.cat([a, torch.tensor([0, 0, -4, 6, 7, -9, 12, fib[-1], fib[-2]])])
    b = torch.cat([b, torch.tensor([0, 5, 6, -4, 7, -9, 18, fib[-2], fib[-1]])])
    a, b = a.to(dtype), b.to(dtype)
    _check(torch.gcd, a, b, ops=("aten.gcd.default",))
    small = a.clamp(-100, 100), b.clamp(-100, 100)  # lcm within the type
    _check(torch.lcm, *small, ops=("aten.lcm.default",))
    if torch.iinfo(dtype).bits >= 32:  # operands past f32's 2**24 whose lcm fits in int32
        mid = torch.tensor([100_000_007, 123_456_789, 300_000_001, 2**28 + 3])
        big = torch.tensor([1_073_741_827, 2**30 + 1, 2**31 - 1, -(2**30) - 3])
        a = torch.cat([mid * 2, big, big, big]).to(dtype)
        b = torch.cat([mid * 3, big, torch.ones_like(big), -torch.ones_like(big)]).to(dtype)
        _check(torch.lcm, a, b, ops=("aten.lcm.default",))


# ----------------------------------------------------------------------------- remainder(scalar, t)


@pytest.mark.numerics
@pytest.mark.parametrize("dtype", [*FLOATS, torch.int64])
def test_remainder_scalar_tensor(dtype):
    if dtype.is_floating_point:
        b = torch.cat([_special(dtype), _random(dtype, seed=5)])
        b = b[b.abs() > 1e-6]  # float_mod is exact while |a / b| < 2**24
        fn = lambda b: 5.5 % b  # noqa: E731
    else:
        b = torch.tensor([3, -3, 1, -1, 7, -7, 100, -100, 2])
        fn = lambda b: 5 % b  # noqa: E731
    _check(fn, b, ops=("aten.remainder.Scalar_Tensor",))


@pytest.mark.numerics
def test_remainder_scalar_tensor_exact():
    b = torch.tensor([0.1, -0.1, 0.3, 3.0, -INF, INF])
    _check(lambda b: 1.0 % b, b, ops=("aten.remainder.Scalar_Tensor",))


# ----------------------------------------------------------------------------- shifts

SHIFT_VALUES = [5, -7, 1, -1, 0, 123, -128, 127, 64, -100]
SHIFT_COUNTS = [0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, -1]


def _shift_operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    info = torch.iinfo(dtype)
    values = [v for v in SHIFT_VALUES if info.min <= v <= info.max] + [info.min, info.max]
    counts = [c for c in SHIFT_COUNTS if info.min <= c <= info.max]
    a, b = torch.cartesian_prod(torch.tensor(values), torch.tensor(counts)).unbind(1)
    return a.to(dtype), b.to(dtype)


# int64 results past int32 (which the CPU plugin computes int64 in) run eagerly, as do those the
# partition's conservative checks cannot tell from them (test_int64_range.py): the tests of the
# lowerings themselves keep their int64 values well inside.
INSIDE_INT32 = 2**31 - 8192


def _in_int32(dtype, result: torch.Tensor) -> torch.Tensor:
    """Where an int64 result runs on OpenVINO (every result of a narrower type does)."""
    if dtype != torch.int64:
        return torch.ones_like(result, dtype=torch.bool)
    return result.double().abs() <= INSIDE_INT32


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
@pytest.mark.parametrize("op", ["left", "right"])
def test_shift(op, dtype):
    fn = torch.bitwise_left_shift if op == "left" else torch.bitwise_right_shift
    a, b = _shift_operands(dtype)
    # (the shifted value's magnitude: a << b with b outside [0, 64) is 0 and kept)
    keep = _in_int32(dtype, fn(a, b)) & _in_int32(dtype, a)
    if op == "left" and dtype == torch.int64:
        keep &= (b < 0) | (b >= 64) | (a.double() * 2.0 ** b.clamp(0, 63).double()).abs().le(INSIDE_INT32)
    a, b = a[keep], b[keep]
    _check(fn, a, b, ops=(f"aten.bitwise_{op}_shift.Tensor",))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8])
def test_shift_scalars(dtype):
    a = torch.tensor([5, -7, 1, -1, 0, 100, -100]).to(dtype)
    counts = torch.tensor([0, 1, 3, 7, 8, 9, 27]).to(dtype)  # 3 << 27 stays in int32
    far = torch.tensor([0, 1, 7, 8, 9, 63, 64, 70, -1]).to(dtype)
    fn = lambda a, counts, far: (a << 3, a >> 2, a >> 70, 3 << counts, -100 >> far, 100 >> far)  # noqa: E731
    _check(
        fn,
        a,
        counts,
        far,
        ops=(
            "aten.__lshift__.Scalar",
            "aten.__rshift__.Scalar",
            "aten.bitwise_left_shift.Scalar_Tensor",
            "aten.bitwise_right_shift.Scalar_Tensor",
        ),
    )


@pytest.mark.numerics
@pytest.mark.parametrize("dtype", FLOATS)
def test_ldexp_float_exponent(dtype):
    x = torch.cat([_special(dtype), _random(dtype, seed=6)])
    g = torch.Generator().manual_seed(7)
    # Whole exponents (exact powers), fractional ones (eager's pow), and ones past the range.
    e = torch.randint(-30, 30, (x.numel(),), generator=g).to(dtype)
    e[1::3] += 0.5
    e[::10] = 200
    expected = torch.ldexp(x, e)
    out, report = run_fxvino(torch.ldexp, x, e, fullgraph=True)
    whole = e == e.floor()
    # Whole exponents are exact; a fractional one goes through the plugin's Power (within an ulp).
    torch.testing.assert_close(out[whole], expected[whole], equal_nan=True, rtol=0, atol=0)
    tol = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    torch.testing.assert_close(out[~whole], expected[~whole], equal_nan=True, rtol=tol, atol=0)
    assert_all_on_openvino(report, ops=("aten.ldexp.Tensor",))


# ----------------------------------------------------------------------------- nextafter


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(*FLOATS))
def test_nextafter(dtype):
    info = torch.finfo(dtype)
    powers = torch.tensor([2.0**k for k in range(-100, 101, 9)]).to(dtype)
    powers = powers[powers.isfinite() & (powers >= info.tiny * 4)]
    x = torch.cat(
        [_special(dtype), _random(dtype, seed=8), powers, -powers, torch.tensor([info.max, -info.max]).to(dtype)]
    )
    if dtype == torch.float16:  # f16's subnormals are f32 normals: exact too
        x = torch.cat([x, torch.tensor([2.0**-24, 2.0**-20, -(2.0**-14)]).to(dtype)])
    x = x.repeat(3)
    n = x.numel() // 3
    y = torch.cat([torch.full((n,), INF), torch.full((n,), -INF), torch.zeros(n)]).to(dtype)
    y[::7] = x[::7]  # equal operands give y
    # Results below f32's smallest normal are flushed to zero by the plugin: kept out.
    expected = torch.nextafter(x, y)
    keep = (expected == 0) | (expected.float().abs() >= torch.finfo(torch.float32).tiny) | expected.isnan()
    keep &= (x != 0) | (dtype == torch.float16)
    _check(torch.nextafter, x[keep], y[keep], ops=("aten.nextafter.default",))


# ----------------------------------------------------------------------------- integer pow

INTEGERS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def _bases_and_exponents(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Bases of both signs (0 and +-1 among them) with exponents 0-40, and negative exponents."""
    g = torch.Generator().manual_seed(11)
    low = 0 if dtype == torch.uint8 else -30
    base = torch.randint(low, 30, (2048,), generator=g)
    base[:6] = torch.tensor([0, 1, 2, 3, 9, 7]) if dtype == torch.uint8 else torch.tensor([0, 1, -1, 2, -2, 9])
    exponent = torch.randint(0 if dtype == torch.uint8 else -5, 41, (2048,), generator=g)
    exponent[:6] = torch.tensor([0, 40, 9, 30, 9, 9])
    return base.to(dtype), exponent.to(dtype)


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
@pytest.mark.parametrize(
    "fn, op, powers",
    [
        (lambda a, e: a**e, "aten.pow.Tensor_Tensor", lambda a, e: [a**e]),
        (lambda a, e: a**7 + a**13, "aten.pow.Tensor_Scalar", lambda a, e: [a**7, a**13, a**7 + a**13]),
        (lambda a, e: 3 ** e.abs(), "aten.pow.Scalar", lambda a, e: [3 ** e.abs()]),
    ],
    ids=["tensor", "constant_exponent", "constant_base"],
)
def test_integer_pow_is_exact(fn, op, powers, dtype):
    """OpenVINO's Power computes integers in f32: ``9 ** 9`` gave 387420480 (torch 387420489), and
    every power past 2^24 was off. Negative exponents give torch's 1, +-1 or 0. Narrower types wrap
    as torch's do; int64 keeps the bases whose powers stay inside int32 (``powers``, in f64)."""
    a, e = _bases_and_exponents(dtype)
    if dtype == torch.int64:
        keep = torch.stack([p.abs() <= INSIDE_INT32 for p in powers(a.double(), e.double())]).all(0)
        a, e = a[keep], e[keep]
    out, report = run_fxvino(fn, a, e, fullgraph=True)
    torch.testing.assert_close(out, fn(a, e), rtol=0, atol=0)
    assert_all_on_openvino(report, ops=(op,))


# ----------------------------------------------------------------------------- booleans


@pytest.mark.parametrize(
    "fn, op",
    [
        (lambda x, y: torch.sign(x), "aten.sign.default"),
        (lambda x, y: torch.isinf(x), "aten.isinf.default"),
        (lambda x, y: torch.clamp(x, min=y), "aten.clamp.Tensor"),
        (lambda x, y: torch.clamp(x, max=y), "aten.clamp.Tensor"),
        (lambda x, y: x.index_put((torch.tensor([0, 2, 2, 5]),), y[:4], accumulate=True), "aten.index_put.default"),
        (lambda x, y: x.index_put((y,), x[:1] | True, accumulate=True), "aten.index_put.default"),
    ],
    ids=["sign", "isinf", "clamp_min", "clamp_max", "index_put_accumulate", "mask_put_accumulate"],
)
def test_boolean_operands(fn, op):
    """OpenVINO's Sign, Add, Maximum and Minimum reject booleans: these ran in PyTorch."""
    g = torch.Generator().manual_seed(12)
    x, y = (torch.rand(8, generator=g) < 0.5 for _ in range(2))
    out, report = run_fxvino(fn, x, y, fullgraph=True)
    torch.testing.assert_close(out, fn(x, y), rtol=0, atol=0)
    assert_all_on_openvino(report, ops=(op,))


def test_negative_constant_power_of_integers_raises_eagers_error():
    """torch rejects ``int_tensor ** -1``; lowered as a tensor exponent it returned torch's
    tensor-exponent values (and, unrolled, never finished lowering): PyTorch runs it and raises."""
    compiled = torch.compile(lambda a: a**-1, backend="fxvino")
    with pytest.raises(RuntimeError, match="Integers to negative integer powers are not allowed"):
        compiled(torch.tensor([1, 2]))
