"""Sizes set by 0-d tensors (``torch.arange(t)``): compiled for the value, checked on every call."""

from __future__ import annotations

import torch

import fxvino
from harness import assert_all_on_openvino


def _arange_scaled(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.arange(a, b, dtype=torch.float32) * x


def _assert_runs_like_eager_on_openvino(fn, *args: torch.Tensor) -> None:
    compiled = torch.compile(fn, backend="fxvino")
    with fxvino.collect_reports() as report, torch.no_grad():
        out = compiled(*args)
    torch.testing.assert_close(out, fn(*args))
    assert_all_on_openvino(report)


def test_arange_with_0d_tensor_bounds_runs_on_openvino():
    _assert_runs_like_eager_on_openvino(_arange_scaled, torch.tensor(2), torch.tensor(9), torch.tensor(1.5))


def test_another_value_runs_eagerly_and_is_reported():
    x = torch.tensor(2.0)
    compiled = torch.compile(_arange_scaled, backend="fxvino")
    with fxvino.collect_reports() as report, torch.no_grad():
        compiled(torch.tensor(0), torch.tensor(4), x)
        for hi in (6, 7):
            out = compiled(torch.tensor(1), torch.tensor(hi), x)
            torch.testing.assert_close(out, _arange_scaled(torch.tensor(1), torch.tensor(hi), x))
    fallbacks = [f for f in report.fallbacks if f.op == "value-specialized graph"]
    assert len(fallbacks) == 1 and fallbacks[0].ran_on == "eager"


def test_arange_of_a_0d_tensor_plus_an_input():
    def fn(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        return torch.arange(n, dtype=torch.float32) + x

    _assert_runs_like_eager_on_openvino(fn, torch.randn(5), torch.tensor(5))


def test_tensor_split_into_a_0d_tensor_of_sections():
    """A 0-d tensor there is a number of sections: how many outputs there are depends on its value."""

    def fn(x, n):
        return torch.tensor_split(x, n)

    x, n = torch.randn(7, 3), torch.tensor(3)
    compiled = torch.compile(fn, backend="fxvino")
    with fxvino.collect_reports() as report, torch.no_grad():
        out = compiled(x, n)
    assert len(out) == 3
    for a, b in zip(out, fn(x, n), strict=True):
        torch.testing.assert_close(a, b)
    assert not report.fallbacks, str(report)


def test_a_buffer_and_a_view_sized_by_a_0d_count():
    """Longformer's global attention: the count of global tokens is a 0-d tensor (a ``max`` of a
    mask computed in another graph) that sizes a ``new_zeros`` buffer and a ``view`` of scores."""

    def fn(x: torch.Tensor, scores: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        buf = x.new_zeros(x.shape[0], n, x.shape[-1])
        buf[:, :2] = x[:, :2]
        return scores.view(x.shape[0], 2, n, -1).softmax(-1).sum(1) + buf.sum(-1, keepdim=True)

    _assert_runs_like_eager_on_openvino(fn, torch.randn(2, 6, 4), torch.randn(2, 2 * 3, 8), torch.tensor(3))


def test_a_0d_tensor_reshaped_as_data_keeps_its_tensor():
    """``torch.reshape(n, ...)`` reads ``n`` as the tensor it works on, not as a size: only the
    ``arange`` takes its value."""

    def fn(n: torch.Tensor) -> torch.Tensor:
        return torch.arange(n, dtype=torch.float32) + torch.reshape(n, (1,))

    _assert_runs_like_eager_on_openvino(fn, torch.tensor(4))
