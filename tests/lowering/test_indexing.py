"""gather's edge cases against eager PyTorch."""

from __future__ import annotations

import pytest
import torch

from harness import assert_all_on_openvino, run_fxvino


@pytest.mark.parametrize(
    "x, dim, index",
    [
        (torch.randn(5), 0, torch.zeros(2, 0, dtype=torch.long)),  # empty index of another rank
        (torch.tensor(3.5), 0, torch.zeros(3, dtype=torch.long)),  # 0-d input
        (torch.tensor(3.5), 0, torch.tensor(0)),
        (torch.randn(10, 5), 1, torch.tensor([[0, 4], [3, 3], [1, 0]])),  # index smaller than x
    ],
)
def test_gather(x, dim, index):
    def fn(x, index):
        return torch.gather(x, dim, index) * 2

    out, report = run_fxvino(fn, x, index, fullgraph=True)
    torch.testing.assert_close(out, fn(x, index), rtol=0, atol=0)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.gather.default"] == 1, str(report)
