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


@pytest.mark.parametrize(
    "fn, shape",
    [
        # count_include_pad: the zero padding counts, a ceil_mode window's overhang past it does not
        (lambda x: F.avg_pool1d(x, 6, stride=3, padding=2, ceil_mode=True, count_include_pad=True), (1, 3, 9)),
        (lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), (2, 3, 8, 9)),
        (lambda x: F.avg_pool2d(x, (4, 4), (2, 3), 1, True, False, 2), (1, 3, 9, 9)),  # divisor_override, ceil
        (lambda x: F.avg_pool2d(x, (6, 6), (3, 3), (2, 3), True, True, 2), (1, 3, 9, 9)),
        (lambda x: F.avg_pool3d(x, 3, stride=2, padding=1, ceil_mode=True, divisor_override=5), (1, 2, 5, 6, 7)),
        (lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), (3, 8, 9)),  # unbatched (C, H, W)
        (lambda x: F.avg_pool1d(x, 3, ceil_mode=True, count_include_pad=False), (2, 3, 10)),
    ],
)
def test_avg_pool(fn, shape):
    x = torch.randn(shape)
    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, fn(x))
    assert_all_on_openvino(report)
    assert sum(n for op, n in report.ov_ops.items() if op.startswith("aten.avg_pool")) == 1, str(report)


def test_avg_pool_zero_batch():
    fn = lambda x: F.avg_pool1d(x, 6, stride=3, padding=2) * 2  # noqa: E731
    x = torch.randn(0, 3, 9)
    out, report = run_fxvino(fn, x, fullgraph=True)
    assert out.shape == fn(x).shape
    assert_all_on_openvino(report)


_MAX2D = "aten.max_pool2d_with_indices.default"


@pytest.mark.parametrize(
    "fn, shape, op",
    [
        # EfficientNet's head: kernel 1280 over a 7x7 map with ceil_mode gives one global window.
        (lambda x: F.avg_pool2d(x, 1280, ceil_mode=True), (1, 8, 7, 7), "aten.avg_pool2d.default"),
        (lambda x: F.avg_pool2d(x, 9, padding=1, ceil_mode=True), (1, 8, 7, 7), "aten.avg_pool2d.default"),
        (
            lambda x: F.avg_pool2d(x, (9, 2), padding=(1, 0), ceil_mode=True, count_include_pad=False),
            (2, 3, 7, 6),
            "aten.avg_pool2d.default",
        ),
        (lambda x: F.avg_pool2d(x, 9, ceil_mode=True, divisor_override=5), (1, 2, 7, 7), "aten.avg_pool2d.default"),
        (lambda x: F.avg_pool1d(x, 20, ceil_mode=True), (2, 3, 8), "aten.avg_pool2d.default"),
        (lambda x: F.max_pool2d(x, 9, ceil_mode=True), (1, 8, 7, 7), _MAX2D),
        (lambda x: F.max_pool2d(x, 9, padding=2, ceil_mode=True), (1, 8, 7, 7), _MAX2D),
        (lambda x: F.max_pool3d(x, 7, ceil_mode=True), (1, 2, 4, 5, 3), "aten.max_pool3d_with_indices.default"),
    ],
    ids=["avg-1280", "avg-pad", "avg-exclude-pad", "avg-divisor", "avg1d", "max", "max-pad", "max3d"],
)
def test_kernel_larger_than_the_padded_input(fn, shape, op):
    _check(fn, torch.randn(shape), op)


@pytest.mark.parametrize(
    "fn, shape, op",
    [
        (lambda x: F.max_pool2d(x, 2, return_indices=True), (3, 6, 6), _MAX2D),
        (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True, ceil_mode=True), (3, 7, 5), _MAX2D),
        (lambda x: F.max_pool1d(x, 2, return_indices=True), (3, 8), _MAX2D),
        (lambda x: F.max_pool3d(x, 2, return_indices=True), (3, 4, 4, 4), "aten.max_pool3d_with_indices.default"),
        (lambda x: F.max_pool2d(x, 2), (3, 6, 6), _MAX2D),
    ],
    ids=["2d", "2d-ceil-pad", "1d", "3d", "2d-values-only"],
)
def test_max_pool_with_indices_unbatched(fn, shape, op):
    _check(fn, torch.randn(shape), op)  # assert_close also compares the int64 indices exactly
