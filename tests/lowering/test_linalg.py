"""Matrix products against eager: ``addbmm``'s batch-summed product."""

from __future__ import annotations

import pytest
import torch

from harness import assert_all_on_openvino, run_fxvino


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
