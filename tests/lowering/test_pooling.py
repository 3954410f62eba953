"""Adaptive pooling against eager PyTorch: unbatched inputs, output larger than input, indices."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness import assert_all_on_openvino, run_fxvino


def _check(fn, x, op):
    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, fn(x))
    assert_all_on_openvino(report)
    assert report.ov_ops[op] >= 1, str(report)


@pytest.mark.parametrize(
    "shape, size",
    [
        ((2, 8, 8, 8), (5, 7)),
        ((8, 8, 8), (5, 7)),  # unbatched (C, H, W): OpenVINO needs a batch axis
        ((1, 8, 4, 3), (5, None)),  # output larger than the input
        ((8, 4, 3), (5, 5)),
    ],
)
def test_adaptive_avg_pool2d(shape, size):
    _check(lambda x: F.adaptive_avg_pool2d(x, size), torch.randn(shape), "aten._adaptive_avg_pool2d.default")


def test_adaptive_avg_pool3d_unbatched():
    _check(lambda x: F.adaptive_avg_pool3d(x, (5, 2, 3)), torch.randn(4, 4, 3, 3), "aten._adaptive_avg_pool3d.default")


@pytest.mark.parametrize("shape, size", [((2, 3, 7, 6), (3, 4)), ((3, 7, 6), (2, 5)), ((1, 2, 3, 3), (5, 4))])
def test_adaptive_max_pool2d_values_and_indices(shape, size):
    """Indices come back as int64 (the CPU plugin computes them in i32) and match PyTorch's."""

    def fn(x):
        return F.adaptive_max_pool2d(x, size, return_indices=True)

    x = torch.randn(shape)
    (values, indices), report = run_fxvino(fn, x, fullgraph=True)
    expected_values, expected_indices = fn(x)
    torch.testing.assert_close(values, expected_values)
    assert indices.dtype == torch.int64
    torch.testing.assert_close(indices, expected_indices)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.adaptive_max_pool2d.default"] == 1, str(report)
