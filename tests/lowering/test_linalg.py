"""Matrix products against eager: ``addbmm``'s batch-summed product, and 16-bit products
scaled and summed as ATen's GEMMs do: alpha and beta in f32, each batch's sum rounded to the
type (an f16 0.3 as addmm's alpha put 1,108 of 4,096 values off eager's; addbmm rounded once,
410 of 1,024)."""

from __future__ import annotations

import pytest
import torch

from harness import assert_all_on_openvino, cpu_computes_bf16, run_fxvino


@pytest.mark.parametrize(
    "shapes, beta, alpha",
    [
        (((3, 5), (4, 3, 2), (4, 2, 5)), 1, 1),
        (((5,), (4, 3, 2), (4, 2, 5)), 0.5, 2),  # a row bias, scaled
        (((3, 5), (1, 3, 7), (1, 7, 5)), 0, 1),  # beta 0: the bias is ignored, NaN included
        (((3, 5), (0, 3, 2), (0, 2, 5)), 2, 1),  # no batches: beta * bias
    ],
    ids=["plain", "scaled-row-bias", "beta-0", "empty-batch"],
)
def test_addbmm(shapes, beta, alpha):
    torch.manual_seed(0)
    bias, b1, b2 = (torch.randn(s) for s in shapes)
    if beta == 0:
        bias[0, 0] = float("nan")

    def fn(bias, b1, b2):
        return torch.addbmm(bias, b1, b2, beta=beta, alpha=alpha)

    out, report = run_fxvino(fn, bias, b1, b2, fullgraph=True)
    torch.testing.assert_close(out, fn(bias, b1, b2))
    assert_all_on_openvino(report, ops=["aten.addbmm.default"])


def test_bilinear_layer_runs_on_openvino():
    torch.manual_seed(0)
    layer = torch.nn.Bilinear(6, 5, 4).eval()
    x1, x2 = torch.randn(3, 6), torch.randn(3, 5)
    out, report = run_fxvino(layer, x1, x2, fullgraph=True)
    torch.testing.assert_close(out, layer(x1, x2))
    assert_all_on_openvino(report, ops=["aten._trilinear.default"])


@pytest.mark.parametrize(
    "shapes, expands, sumdim",
    [
        (((2, 3), (2, 3), (2, 3)), ([], [], []), [1]),  # a row-wise triple product
        (((2,), (3,), (2,)), ([1], [0], [1]), []),  # an outer product, nothing summed
        (((4, 3), (5, 3), (3,)), ([1], [0], [0, 1]), [2]),  # summed over the shared dim
        (((4,), (4,), (4,)), ([1], [1], [1]), [0]),  # dim 1 in no input: kept as size 1
    ],
    ids=["triple", "outer", "shared-sum", "size-1-dim"],
)
def test_trilinear(shapes, expands, sumdim):
    torch.manual_seed(0)
    args = [torch.randn(s) for s in shapes]

    def fn(a, b, c):
        return torch.ops.aten._trilinear(a, b, c, *expands, sumdim)

    out, report = run_fxvino(fn, *args, fullgraph=True)
    expected = fn(*args)
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected)
    assert_all_on_openvino(report, ops=["aten._trilinear.default"])


def _steps_off(out: torch.Tensor, expected: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """How many of the type's steps at ``scale`` (the magnitude the sums pass through, which
    cancellation may leave far above the result's) each value is off."""
    scale = scale.to(expected.dtype)
    step = torch.nextafter(scale, torch.tensor(float("inf"), dtype=expected.dtype)) - scale
    return ((out.double() - expected.double()).abs() / step.double()).ceil()


SIXTEEN_BIT = [pytest.param(torch.float16, id="float16"), pytest.param(torch.bfloat16, id="bfloat16")]


@pytest.mark.numerics
@pytest.mark.parametrize("dtype", SIXTEEN_BIT)
@pytest.mark.parametrize(("beta", "alpha"), [(1, 1), (0.5, 0.3), (0.3, 1)], ids=["plain", "scaled", "beta-0.3"])
@pytest.mark.parametrize("name", ["addbmm", "addmm"])
def test_16bit_addbmm_and_addmm_scale_and_sum_as_aten(name, dtype, beta, alpha):
    """Eager's values, but for a few a step apart where the plugin's products add in another
    order. On CPUs with bf16 kernels addmm's bf16 product is rounded to bf16 before its bias and
    scales are applied (eager adds them in the GEMM's f32), so there it is within a step."""
    g = torch.Generator().manual_seed(0)
    b1, b2 = (torch.randn(4, 32, 32, generator=g) * 2).to(dtype), (torch.randn(4, 32, 32, generator=g) * 2).to(dtype)
    bias = (torch.randn(32, 32, generator=g) * 2).to(dtype)
    fn = {
        "addbmm": lambda c, p, q: torch.addbmm(c, p, q, beta=beta, alpha=alpha),
        "addmm": lambda c, p, q: torch.addmm(c, p[0], q[0], beta=beta, alpha=alpha),
    }[name]
    out, report = run_fxvino(fn, bias, b1, b2, fullgraph=True)
    assert_all_on_openvino(report, ops=[f"aten.{name}.default"])
    expected = fn(bias, b1, b2)
    off = _steps_off(out, expected, fn(bias.double().abs(), b1.double().abs(), b2.double().abs()))
    if name == "addmm" and dtype == torch.bfloat16 and cpu_computes_bf16():
        assert off.max() <= 1, off.max()
    else:
        differ = (out != expected).sum().item()
        assert differ <= out.numel() // 100 and off.max() <= 1, (differ, off.max())
