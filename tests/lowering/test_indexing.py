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


_EMBEDDING = torch.nn.Embedding(10, 3)


@pytest.mark.parametrize(
    "fn, args, op",
    [
        (
            lambda x, i: torch.index_select(x, 1, i) * 2,
            (torch.randn(4, 5), torch.zeros(0, dtype=torch.long)),
            "index_select",
        ),
        (lambda x, i: _EMBEDDING(i) + x, (torch.randn(3), torch.zeros(2, 0, dtype=torch.long)), "embedding"),
        (lambda x: torch.pdist(x) + 1, (torch.randn(1, 3),), "_pdist_forward"),
    ],
    ids=["index_select", "embedding", "pdist_of_one_row"],
)
def test_results_with_no_elements_compile(fn, args, op):
    # The CPU plugin dies in compile_model (SIGFPE) on a Gather with an empty index and on
    # _pdist_forward of one row: a result with no elements and a static shape is a constant.
    with torch.no_grad():
        out, report = run_fxvino(fn, *args, fullgraph=True)
        torch.testing.assert_close(out, fn(*args), rtol=0, atol=0)
    assert_all_on_openvino(report, ops=(f"aten.{op}.default",))
