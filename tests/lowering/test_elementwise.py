"""Elementwise lowerings whose semantics differ between torch and OpenVINO defaults."""

from __future__ import annotations

import pytest
import torch

from harness import assert_all_on_openvino, most_bytes_live, run_fxvino

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
