"""Mixture-of-experts routing ops (transformers 5's experts layers) against eager, on OpenVINO."""

from __future__ import annotations

import pytest
import torch

import fxvino
from harness import assert_all_on_openvino, run_fxvino


@pytest.mark.parametrize(
    "x, bins, lo, hi",
    [
        (torch.tensor([0.0, 1, 1, 3, 2, 3, 3, 7]), 4, 0, 3),  # integer ids as floats; 7 is outside
        (torch.randn(100), 10, -1.5, 2.0),
        (torch.rand(3, 5) * 4, 8, 0, 4),  # the maximum joins the last bin
    ],
    ids=["expert-ids", "normal", "2d"],
)
def test_histc(x, bins, lo, hi):
    out, report = run_fxvino(lambda t: torch.histc(t, bins=bins, min=lo, max=hi), x)
    torch.testing.assert_close(out, torch.histc(x, bins=bins, min=lo, max=hi))
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.histc.default"] == 1


@pytest.mark.parametrize("counts", [[2, 0, 3, 1], [0, 0, 6, 0], [1, 1, 1, 1]], ids=["mixed", "one-expert", "even"])
@pytest.mark.parametrize("tail", [0, 2], ids=["all-routed", "dropped-tail"])
def test_transformers_grouped_mm(counts, tail):
    import transformers.integrations.moe  # noqa: F401  (registers torch.ops.transformers)

    torch.manual_seed(0)
    rows = sum(counts) + tail  # rows past the last run stay zero
    x, weight = torch.randn(rows, 8), torch.randn(len(counts), 8, 5)
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    op = torch.ops.transformers.grouped_mm_fallback

    out, report = run_fxvino(lambda a, w, o: op(a, w, o), x, weight, offs)
    torch.testing.assert_close(out, op(x, weight, offs), rtol=1e-5, atol=1e-5)
    assert_all_on_openvino(report)


@pytest.mark.parametrize("counts", [[2, 0, 3, 1], [0, 0, 6, 0], [1, 1, 1, 1]], ids=["mixed", "one-expert", "even"])
@pytest.mark.parametrize("tail", [0, 2], ids=["all-routed", "dropped-tail"])
def test_transformers_grouped_mm_backward(counts, tail):
    """The gradients of the grouped product, as transformers' backward op computes them: experts
    with no rows get a zero weight gradient, rows past the last run a zero input gradient."""
    import transformers.integrations.moe  # noqa: F401  (registers torch.ops.transformers)

    torch.manual_seed(0)
    rows = sum(counts) + tail
    x, weight, grad = torch.randn(rows, 8), torch.randn(len(counts), 8, 5), torch.randn(rows, 5)
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    op = torch.ops.transformers.grouped_mm_fallback_backward

    (grad_x, grad_weight), report = run_fxvino(lambda *a: op(*a), x, weight, offs, grad)
    expected_x, expected_weight = op(x, weight, offs, grad)
    torch.testing.assert_close(grad_x, expected_x, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad_weight, expected_weight, rtol=1e-5, atol=1e-5)
    assert_all_on_openvino(report)
    assert report.ov_ops["transformers.grouped_mm_fallback_backward.default"] == 1


@pytest.mark.parametrize("which", [0, 1], ids=["input-grad", "weight-grad"])
def test_transformers_grouped_mm_backward_dynamic_rows(which):
    """One gradient read (the other left unbuilt), the row count dynamic: a graph compiled once
    serves every token count, on OpenVINO."""
    import transformers.integrations.moe  # noqa: F401

    op = torch.ops.transformers.grouped_mm_fallback_backward
    compiled = torch.compile(lambda *a: op(*a)[which], backend="fxvino", dynamic=True)
    weight = torch.randn(4, 8, 5)
    with fxvino.collect_reports() as report, torch.no_grad():
        for counts in ([2, 0, 3, 1], [5, 4, 0, 7], [1, 2, 3, 3]):
            rows = sum(counts) + 1
            x, grad = torch.randn(rows, 8), torch.randn(rows, 5)
            offs = torch.tensor(counts).cumsum(0).to(torch.int32)
            torch.testing.assert_close(compiled(x, weight, offs, grad), op(x, weight, offs, grad)[which])
    assert_all_on_openvino(report)
    assert len(report.graphs) <= 2, str(report)  # a static first graph, then one dynamic graph at most


@pytest.mark.numerics
@pytest.mark.parametrize("counts", [[2, 0, 5, 1], [0, 0, 8, 0]], ids=["mixed", "one-expert"])
def test_aten_grouped_mm_bf16(counts):
    """PyTorch's grouped product (bf16 only under compile; transformers' MoE path for bf16 weights):
    [S, K] x [E, K, N] and its weight gradient's [K, S] x [S, N] form (an empty run gives zeros),
    with the row count dynamic from the second size on."""
    torch.manual_seed(0)
    weight = torch.randn(len(counts), 16, 16).bfloat16()
    forward = torch.compile(lambda a, o: torch._grouped_mm(a, weight, offs=o), backend="fxvino", dynamic=True)
    weight_grad = torch.compile(lambda a, g, o: torch._grouped_mm(a.t(), g, offs=o), backend="fxvino", dynamic=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for scale in (1, 2):  # every run and S scaled: all rows routed (PyTorch leaves others unwritten)
            offs = (torch.tensor(counts) * scale).cumsum(0).to(torch.int32)
            rows = int(offs[-1])
            a, g = torch.randn(rows, 16).bfloat16(), torch.randn(rows, 16).bfloat16()
            torch.testing.assert_close(forward(a, offs), torch._grouped_mm(a, weight, offs=offs))
            torch.testing.assert_close(weight_grad(a, g, offs), torch._grouped_mm(a.t(), g, offs=offs))
    assert_all_on_openvino(report, partitions=None)
    assert report.ov_ops["aten._grouped_mm.default"] >= 2, str(report)
