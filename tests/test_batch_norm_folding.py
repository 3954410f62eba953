"""Batch norm folded into a 16-bit convolution's frozen f32 weight (passes/batch_norm_folding.py).

Results are compared with eager's float32 and eager's autocast: the folded graph rounds fewer
times than eager's autocast, so it must be at least about as close to float32 as eager's is.
"""

from __future__ import annotations

import pytest
import torch

from fxvino import collect_reports
from harness import assert_all_on_openvino

pytestmark = pytest.mark.numerics  # bf16 outputs: on AVX2 the plugin computes them in f32

BN = "aten._native_batch_norm_legit_no_training.default"


def _block(bias: bool, groups: int, affine: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(32, affine=affine)
    with torch.no_grad():
        bn.running_mean.normal_(0, 0.5), bn.running_var.uniform_(0.25, 4)
        if affine:
            bn.weight.uniform_(0.5, 1.5), bn.bias.normal_(0, 0.5)
    return torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1, bias=bias, groups=groups), bn).eval()


def _run(model: torch.nn.Module, x: torch.Tensor):
    with torch.no_grad():
        exact = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16), collect_reports() as report:
            eager = model(x)
            got = torch.compile(model, backend="fxvino")(x)
    return exact, eager, got, report


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_folded_into_the_convolution_and_as_close_to_float32_as_eager(bias, groups, affine):
    exact, eager, got, report = _run(_block(bias, groups, affine), torch.randn(2, 16, 12, 12))
    assert got.dtype == eager.dtype == torch.bfloat16
    assert_all_on_openvino(report)
    assert BN not in report.ov_ops, str(report)
    scale = exact.abs().mean()
    err, eager_err = ((t.float() - exact).abs().mean() / scale for t in (got, eager))
    assert err < 1.2 * eager_err, (err.item(), eager_err.item())


def test_a_convolution_read_elsewhere_too_keeps_its_normalization():
    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = _block(True, 1, True)

        def forward(self, x):
            y = self.block[0](x)
            return self.block[1](y), y

    exact, eager, got, report = _run(Both().eval(), torch.randn(2, 16, 12, 12))
    assert_all_on_openvino(report)
    assert report.ov_ops.get(BN) == 1, str(report)
    for g, e, x in zip(got, eager, exact, strict=True):
        torch.testing.assert_close(g.float(), e.float(), atol=0.05 * x.abs().max().item(), rtol=0.02)


def test_float32_graphs_are_left_to_openvino():
    model, x = _block(True, 1, True), torch.randn(2, 16, 12, 12)
    with torch.no_grad(), collect_reports() as report:
        got = torch.compile(model, backend="fxvino")(x)
    torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    assert report.ov_ops.get(BN) == 1, str(report)
