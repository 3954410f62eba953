"""The heap is trimmed once after the first call of a compiled model whose bound static inputs
are large (runtime/heap_trim.py): the plugin frees its own buffers for them at that call."""

from __future__ import annotations

import sys

import pytest
import torch

import fxvino
from fxvino.runtime import heap_trim as heap


@pytest.fixture
def trims(monkeypatch):
    counted = []
    real = heap.trim
    monkeypatch.setattr(heap, "trim", lambda: counted.append(1) or real())
    return counted


def _product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w)


def test_large_bound_inputs_trim_once_at_the_first_call(trims):
    x, w = torch.randn(16, 4096), torch.randn(4096, 4608)  # 75 MB bound: above TRIM_BYTES
    compiled = torch.compile(_product, backend="fxvino", dynamic=False)
    with fxvino.collect_reports() as report:
        first = compiled(x, w)
        assert len(trims) == 1
        second = compiled(x, 2 * w)
    assert len(trims) == 1  # once per compiled model
    torch.testing.assert_close(first, _product(x, w), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(second, _product(x, 2 * w), rtol=1e-4, atol=1e-3)
    assert sum(report.ov_ops.values()) > 0 and not report.fallbacks and not report.torch_ops


@pytest.mark.parametrize("dynamic", [False, True])
def test_small_or_dynamic_inputs_do_not_trim(trims, dynamic):
    x, w = torch.randn(16, 256), torch.randn(256, 512)
    compiled = torch.compile(_product, backend="fxvino", dynamic=dynamic)
    for _ in range(2):
        torch.testing.assert_close(compiled(x, w), _product(x, w), rtol=1e-4, atol=1e-4)
    assert not trims


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trim_is_available_on_linux():
    assert heap.trim()
