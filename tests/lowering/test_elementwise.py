"""Elementwise lowerings whose semantics differ between torch and OpenVINO defaults."""

from __future__ import annotations

import pytest
import torch

from harness import assert_all_on_openvino, most_bytes_live, run_fxvino

pytestmark = pytest.mark.numerics

A = torch.tensor([-7, 7, -7, 7, -8, 0, 9])
B = torch.tensor([2, 2, -2, -2, 2, 3, -4])


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: torch.div(a, b, rounding_mode="floor"),
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda a, b: a // b,
        lambda a, b: torch.remainder(a, b),
        lambda a, b: torch.fmod(a, b),
        lambda a, b: a / b,
    ],
    ids=["floor", "trunc", "floordiv", "remainder", "fmod", "true_div"],
)
def test_integer_division_rounds_like_torch_at_run_time(fn):
    # Runtime inputs (not constants): the CPU plugin's i64 Divide truncates, constant folding floors.
    out, report = run_fxvino(fn, A, B, fullgraph=True)
    torch.testing.assert_close(out, fn(A, B))
    assert_all_on_openvino(report)


def _int32_range_operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Dividends across the int32 range, divisors small and large, of both signs."""
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-(2**31) + 1, 2**31 - 1, (4096,), generator=g)
    b = torch.randint(1, 2**16, (4096,), generator=g) * (torch.randint(0, 2, (4096,), generator=g) * 2 - 1)
    b[:512] = torch.randint(-(2**31) + 1, 2**31 - 1, (512,), generator=g)
    b[b == 0] = 3
    a[:4], b[:4] = (
        torch.tensor([123456789, 2**31 - 1, -(2**31) + 1, 1836311903]),
        torch.tensor([1000, 2, -7, 1134903170]),
    )
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: a // b,
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        lambda a, b: a % b,
        lambda a, b: torch.fmod(a, b),
        lambda a, b: (a // -7, a % 1000),
    ],
    ids=["floordiv", "trunc", "remainder", "fmod", "by_constants"],
)
def test_integer_division_is_exact_beyond_2_24(fn, dtype):
    # The plugin divides integers in f32 (123456789 % 1000 gave 792); only the quotient alone
    # as an output, with nothing else of the chain read, exposed its f32 Select too.
    a, b = _int32_range_operands(dtype)
    out, report = run_fxvino(fn, a, b, fullgraph=True)
    torch.testing.assert_close(out, fn(a, b), rtol=0, atol=0)
    assert_all_on_openvino(report)


def test_symbolic_floordiv_with_negative_offsets():
    def fn(x):
        n = x.shape[0]
        return x.new_zeros((n - 7) // 2 + 8)

    compiled = torch.compile(fn, backend="fxvino", dynamic=True)
    with torch.no_grad():
        for n in (3, 4, 10):
            x = torch.randn(n)
            assert compiled(x).shape == fn(x).shape


def test_amax_amin_propagate_nan_and_keep_infinities():
    x = torch.tensor([[1.0, float("nan"), 2.0], [float("-inf")] * 3, [float("inf")] * 3, [3.0, -1.0, 0.5]])

    def fn(t):
        return torch.amax(t, 1), torch.amin(t, 1), torch.amax(t, 0, keepdim=True)

    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, fn(x), equal_nan=True)
    assert_all_on_openvino(report)


NAN = float("nan")


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: a > b,
        lambda a, b: a >= b,
        lambda a, b: a < b,
        lambda a, b: a <= b,
        lambda a, b: a > 0.5,
        lambda a, b: a >= 0.5,
        lambda a, b: a.clamp(-0.5, 0.5),
        lambda a, b: a.clamp_min(0.5),
        lambda a, b: a.clamp_max(0.5),
        lambda a, b: a.clamp(min=b),
    ],
    ids=["gt", "ge", "lt", "le", "gt_scalar", "ge_scalar", "clamp", "clamp_min", "clamp_max", "clamp_tensor"],
)
def test_comparisons_and_clamps_with_nan_are_torchs(fn):
    """The CPU plugin's Greater is true, and its Maximum/Minimum return the number, where a side
    is NaN; PyTorch's comparisons are false there and its clamps return NaN."""
    a = torch.tensor([1.0, NAN, 2.0, NAN, -1.0, 0.5, float("inf")] * 10)
    b = torch.tensor([NAN, 1.0, 1.0, NAN, 0.0, 0.5, 1.0] * 10)
    out, report = run_fxvino(fn, a, b, fullgraph=True)
    torch.testing.assert_close(out, fn(a, b), equal_nan=True)
    assert_all_on_openvino(report)


@pytest.mark.parametrize(
    "fn",
    [
        torch.exp,
        torch.expm1,
        torch.sign,
        torch.sgn,
        torch.nn.functional.celu,
        lambda a: a.bool(),
        lambda a: a.to(torch.bool) | (a > 100),
    ],
    ids=["exp", "expm1", "sign", "sgn", "celu", "to_bool", "bool_in_a_graph"],
)
def test_nan_through_exp_sign_and_bool_casts_is_torchs(fn):
    """The plugin's Exp gives +inf for NaN, its Sign NaN, its Convert to boolean False; PyTorch
    gives NaN, 0 and True."""
    a = torch.tensor([NAN, float("inf"), float("-inf"), 0.0, 1.5, -2.5, 30.0, -30.0] * 8)
    out, report = run_fxvino(fn, a, fullgraph=True)
    torch.testing.assert_close(out, fn(a), equal_nan=True)
    assert_all_on_openvino(report)


def _division_operands(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Random operands, operands one step off an exact multiple (where a rounded quotient is one
    off), and the special values."""
    g = torch.Generator().manual_seed(0)
    inf = float("inf")
    a = torch.randn(4000, generator=g) * torch.exp(torch.randn(4000, generator=g) * 3)
    b = torch.randn(4000, generator=g) * torch.exp(torch.randn(4000, generator=g) * 2)
    # Never 0: one step off 0 is a subnormal, which the plugin flushes to zero.
    k = (torch.randint(1, 1000, (4000,), generator=g) * (torch.randint(0, 2, (4000,), generator=g) * 2 - 1)).to(dtype)
    step = (torch.rand(4000, generator=g) + 0.01).to(dtype)
    near = (k * step).to(dtype)
    up = torch.rand(4000, generator=g) < 0.5
    near = torch.where(
        up, torch.nextafter(near, torch.full_like(near, inf)), torch.nextafter(near, torch.full_like(near, -inf))
    )
    special_a = torch.tensor([1.0, 0.3, -1.0, 7.0, -0.0, 5.0, 0.0, inf, -inf, NAN, 3.0, -3.0, 3.0, -2.5, 2.5, -1.0])
    special_b = torch.tensor([0.1, 0.1, 0.1, 0.7, 2.0, 0.0, 0.0, 2.0, 2.0, 2.0, inf, inf, -inf, 0.5, -0.5, -0.1])
    a = torch.cat([special_a.to(dtype), a.to(dtype), near])
    b = torch.cat([special_b.to(dtype), b.to(dtype), step])
    keep = (a.float() / b.float()).abs() < 2**22  # beyond, f32's quotient itself is rounded
    return a, torch.where(keep | b.isinf() | (b == 0) | a.isnan() | a.isinf(), b, torch.ones_like(b))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "fn",
    [
        torch.fmod,
        torch.remainder,
        torch.floor_divide,
        lambda a, b: torch.div(a, b, rounding_mode="floor"),
        lambda a, b: a % 0.1,
        lambda a, b: torch.fmod(a, 0.7),
        lambda a, b: a // 0.1,
    ],
    ids=["fmod", "remainder", "floor_divide", "div_floor", "remainder_scalar", "fmod_scalar", "floordiv_scalar"],
)
def test_float_remainders_and_floor_division_equal_torchs(fn, dtype):
    """PyTorch's float fmod is C's, exact: ``fmod(1.0, 0.1)`` is 0.09999999 and ``1.0 // 0.1`` is
    9. The plugin's Mod and a floor of the quotient gave 0 and 10, and differed from eager on half
    of random f32 operands; every result is now eager's, bit for bit."""
    a, b = _division_operands(dtype)
    out, report = run_fxvino(fn, a, b, fullgraph=True)
    expected = fn(a, b)
    same = (out == expected) | (out.isnan() & expected.isnan())
    assert same.all(), [(a[i].item(), b[i].item(), expected[i].item(), out[i].item()) for i in (~same).nonzero()[:5, 0]]
    assert_all_on_openvino(report)


def test_bf16_constants_round_to_nearest_like_torch():
    """OpenVINO's constant folding of a Convert to bf16 truncates: 0.1 became 0.099609375 where
    torch's bf16 0.1 is 0.10009765625, one bf16 step off."""
    x = torch.linspace(-3, 3, 97).to(torch.bfloat16)

    def fn(t):
        return t.clamp(min=0.1), torch.full_like(t, 0.1), t + 0.1

    out, report = run_fxvino(fn, x, fullgraph=True)
    for got, want in zip(out, fn(x), strict=True):
        assert torch.equal(got, want)
    assert_all_on_openvino(report)


def test_atan2_of_signed_zeros_and_infinities_is_torchs():
    """``atan(y / x)`` with a quadrant correction gave NaN for two infinities and 0 for
    atan2(+-0, -0); C's atan2, which torch uses, gives +-pi/4, +-3pi/4 and +-pi."""
    inf = float("inf")
    values = [NAN, inf, -inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 1e-30, 1e30]
    y = torch.tensor([a for a in values for _ in values])
    x = torch.tensor([b for _ in values for b in values])
    out, report = run_fxvino(torch.atan2, y, x, fullgraph=True)
    torch.testing.assert_close(out, torch.atan2(y, x), equal_nan=True)
    assert_all_on_openvino(report)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8])
def test_angle_of_real_numbers_is_torchs(dtype):
    """pi (rounded to the dtype) below zero, 0 at and above it (-0.0 too), NaN kept; integers give
    the default float type."""
    values = [NAN, float("inf"), float("-inf"), 0.0, -0.0, 1.5, -1.5, -1e-30]
    x = torch.tensor(values).to(dtype) if dtype.is_floating_point else torch.tensor([0, 3, 7, 200]).to(dtype)
    if dtype == torch.int64:
        x = x - 5
    out, report = run_fxvino(torch.angle, x, fullgraph=True)
    expected = torch.angle(x)
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)
    assert_all_on_openvino(report, ops=["aten.angle.default"])


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: a + b,
        lambda a, b: a - b,
        lambda a, b: a * b,
        lambda a, b: a + 100,
        lambda a, b: 5 - a,
        lambda a, b: torch.sub(a, b, alpha=3),
        lambda a, b: -a,
        lambda a, b: a.abs(),
        lambda a, b: a.sum(dtype=a.dtype),
        lambda a, b: a[:4].prod(dtype=a.dtype),
    ],
    ids=["add", "sub", "mul", "add_scalar", "rsub", "sub_alpha", "neg", "abs", "sum", "prod"],
)
def test_8bit_integer_arithmetic_wraps_like_torch(fn, dtype):
    """The plugin's uint8/int8 arithmetic saturates (250 + 10 gave 255, -(-128) gave 127); torch's
    wraps around (4, -128)."""
    info = torch.iinfo(dtype)
    a = torch.tensor([info.min, info.max, 0, 1, 100, info.max // 2 + 3] * 3, dtype=dtype)
    b = torch.tensor([1, 1, info.max, info.max, 100, 5] * 3, dtype=dtype)
    out, report = run_fxvino(fn, a, b, fullgraph=True)
    assert out.dtype == dtype
    assert torch.equal(out, fn(a, b))
    assert_all_on_openvino(report)


def test_bool_maximum_minimum():
    a = torch.tensor([True, False, True, False])
    b = torch.tensor([True, True, False, False])
    out, report = run_fxvino(lambda x, y: (torch.maximum(x, y), torch.minimum(x, y)), a, b, fullgraph=True)
    torch.testing.assert_close(out, (torch.maximum(a, b), torch.minimum(a, b)))
    assert_all_on_openvino(report)


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, float("inf")])
def test_cdist_and_pdist(p):
    torch.manual_seed(0)
    a, b, c = torch.randn(2, 5, 3), torch.randn(2, 4, 3), torch.randn(6, 3)
    a[0, 0] = b[0, 1]  # one zero distance

    def fn(x, y, z):
        return torch.ops.aten._cdist_forward(x, y, p, None), torch.ops.aten._pdist_forward(z, p)

    out, report = run_fxvino(fn, a, b, c, fullgraph=True)
    torch.testing.assert_close(out, fn(a, b, c))
    assert_all_on_openvino(report)
    assert {"aten._cdist_forward.default", "aten._pdist_forward.default"} <= set(report.ov_ops)


def test_erfc():
    x = torch.linspace(-4, 4, 101)
    out, report = run_fxvino(torch.erfc, x)
    torch.testing.assert_close(out, torch.erfc(x), rtol=1e-5, atol=1e-6)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.erfc.default"] == 1


@pytest.mark.parametrize("shape", [(64,), (2, 40, 16)], ids=["one-row", "80-rows"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_silu_in_low_precision(dtype, shape):
    """Swish's default beta is f32: an f16/bf16 input failed to lower before beta took its type.
    Both Swish forms (one input for a few rows, an explicit beta for many) are eager's SiLU."""
    x = torch.randn(shape).to(dtype)
    out, report = run_fxvino(torch.nn.functional.silu, x)
    torch.testing.assert_close(out, torch.nn.functional.silu(x))
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.silu.default"] == 1


def test_log_softmax_keeps_no_second_tensor_of_its_input_size():
    """The shift ``x - max`` feeds only the exponential, so it is never held beside it; OpenVINO's
    own LogSoftmax kept both, two tensors of 8 MB here (GPT-2's training logits: 98 MB each)."""
    x = torch.randn(256, 8192) * 20
    out, report = run_fxvino(lambda x: torch.log_softmax(x, -1), x, fullgraph=True)
    assert_all_on_openvino(report)
    torch.testing.assert_close(out, torch.log_softmax(x, -1), rtol=1e-5, atol=2e-5)
    assert most_bytes_live(report.graphs[0].ov_partitions[0].compiled) < x.numel() * 4 * 3 // 2


def test_log_softmax_of_slices_with_nan_or_inf_is_torchs():
    inf, nan = float("inf"), float("nan")
    x = torch.tensor([[0.0, -inf, 1.0], [-inf, -inf, -inf], [inf, 0.0, 1.0], [nan, 0.0, 1.0], [1e30, -1e30, 0.0]])
    out, report = run_fxvino(lambda x: torch.log_softmax(x, -1), x, fullgraph=True)
    assert_all_on_openvino(report)
    torch.testing.assert_close(out, torch.log_softmax(x, -1), equal_nan=True)
