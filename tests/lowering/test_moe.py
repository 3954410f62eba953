"""Mixture-of-experts routing ops (transformers 5's experts layers) against eager, on OpenVINO."""

from __future__ import annotations

import pytest
import torch

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
