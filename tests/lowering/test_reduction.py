"""Reductions against eager: var / std with too few elements (nan, as in PyTorch), vector norms."""

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


@pytest.mark.parametrize("ord", [2, 1, 0, float("inf"), float("-inf"), 3, 0.5])
@pytest.mark.parametrize("dim, keepdim", [(None, False), (1, True), ((0, 2), False)])
def test_vector_norm(ord, dim, keepdim):
    x = torch.randn(4, 5, 6)
    x[0, 0, :3] = 0  # ord 0 counts non-zeros

    def fn(x):
        return torch.linalg.vector_norm(x, ord, dim, keepdim)

    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, fn(x))
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.linalg_vector_norm.default"] == 1


def test_normalize_runs_on_openvino():
    x = torch.randn(3, 7)
    out, report = run_fxvino(lambda x: torch.nn.functional.normalize(x, dim=-1), x, fullgraph=True)
    torch.testing.assert_close(out, torch.nn.functional.normalize(x, dim=-1))
    assert_all_on_openvino(report)


@pytest.mark.parametrize("dim, correction, keepdim", [(1, 0, False), ((0, 2), 1, True), (None, 1, False)])
def test_var_mean(dim, correction, keepdim):
    x = torch.randn(4, 6, 5)

    def fn(x):
        return torch.var_mean(x, dim=dim, correction=correction, keepdim=keepdim)

    out, report = run_fxvino(fn, x)
    torch.testing.assert_close(out, fn(x))
    assert_all_on_openvino(report)


@pytest.mark.parametrize("p", [2, 1, 0, 3, 0.5, float("inf"), float("-inf")])
@pytest.mark.parametrize("shapes", [((4, 5), (4, 5)), ((3, 1, 4), (5, 1))], ids=["same", "broadcast"])
def test_dist(p, shapes):
    a, b = torch.randn(shapes[0]), torch.randn(shapes[1])
    b.view(-1)[0] = a.view(-1)[0]  # a zero difference, which p = 0 does not count

    def fn(a, b):
        return torch.dist(a, b, p)

    out, report = run_fxvino(fn, a, b, fullgraph=True)
    torch.testing.assert_close(out, fn(a, b))
    assert_all_on_openvino(report, ops=["aten.dist.default"])
