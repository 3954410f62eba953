"""var / std with too few elements for the correction: nan, as in PyTorch."""

from __future__ import annotations

import pytest
import torch

from harness import assert_all_on_openvino, run_fxvino


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x: torch.var(x, unbiased=True), (0, 5)),  # N = 0: 0 / max(0 - 1, 0) = nan
        (lambda x: torch.std(x, dim=0, unbiased=True), (1, 4)),  # N = 1: 0 / 0
        (lambda x: torch.var(x, dim=1, correction=3), (2, 2)),  # N < correction
        (lambda x: torch.var(x, dim=1, correction=1), (3, 4)),
    ],
)
def test_var_std_few_elements(fn, shape):
    x = torch.randn(shape)
    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, fn(x), equal_nan=True)
    assert_all_on_openvino(report)
