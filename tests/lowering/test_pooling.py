"""Adaptive pooling against eager PyTorch: unbatched inputs, output larger than input, indices."""

from __future__ import annotations

import math

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


@pytest.mark.parametrize(
    "shape, size",
    [
        ((2, 3, 7, 6), (3, 4)),
        ((3, 7, 6), (2, 5)),
        ((1, 2, 3, 3), (5, 4)),
        ((2, 2, 5, 4, 6), (2, 3, 4)),
        ((2, 3, 3, 5), (2, 2, 3)),
    ],
    ids=["2d", "2d-unbatched", "2d-upsampled", "3d", "3d-unbatched"],
)
def test_adaptive_max_pool_values_and_indices(shape, size):
    """Indices come back as int64 (the CPU plugin computes them in i32) and match PyTorch's."""
    pool = F.adaptive_max_pool2d if len(size) == 2 else F.adaptive_max_pool3d

    def fn(x):
        return pool(x, size, return_indices=True)

    x = torch.randn(shape)
    (values, indices), report = run_fxvino(fn, x, fullgraph=True)
    expected_values, expected_indices = fn(x)
    torch.testing.assert_close(values, expected_values)
    assert indices.dtype == torch.int64
    torch.testing.assert_close(indices, expected_indices)
    assert_all_on_openvino(report)
    assert report.ov_ops[f"aten.adaptive_max_pool{len(size)}d.default"] == 1, str(report)


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


def _max_pool_inputs(shape):
    g = torch.Generator().manual_seed(0)
    ties = torch.randint(0, 3, shape, generator=g).float()  # many equal maxima: the first one wins
    neg_inf = torch.randn(shape, generator=g)
    neg_inf[..., :3, :] = float("-inf")  # whole windows of -inf: PyTorch's first in-bounds index
    nan = torch.randn(shape, generator=g)
    nan.view(-1)[::7] = float("nan")  # the last NaN of a window wins, and the value is NaN
    return {"randn": torch.randn(shape, generator=g), "ties": ties, "neg_inf": neg_inf, "nan": nan}


@pytest.mark.parametrize(
    "kernel, stride, padding, dilation, ceil_mode, shape",
    [
        (3, 2, 1, 1, False, (2, 4, 17, 15)),
        (3, 2, 1, 1, True, (2, 4, 17, 15)),
        (2, 2, 0, 1, False, (2, 3, 8, 8)),
        (3, 1, 1, 2, False, (1, 2, 9, 10)),
        ((2, 3), (1, 2), (1, 1), 1, True, (1, 2, 7, 9)),
    ],
)
@pytest.mark.parametrize("values", ["randn", "ties", "neg_inf", "nan"])
def test_max_pool_indices_equal_pytorchs_without_a_reference_kernel(
    kernel, stride, padding, dilation, ceil_mode, shape, values
):
    """The CPU plugin runs MaxPool with an index output in a reference kernel (ResNet-50's stem:
    495 ms per batch-8 training forward): fxvino computes values and indices from the windows, in
    one scan over the window offsets (no MaxPool, at most 3 elementwise nodes per offset)."""
    x = _max_pool_inputs(shape)[values]

    def fn(x):
        return F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)

    (out, indices), report = run_fxvino(fn, x)
    ref, ref_indices = fn(x)
    assert_all_on_openvino(report)
    assert torch.equal(indices, ref_indices)
    torch.testing.assert_close(out, ref, equal_nan=True, rtol=0, atol=0)
    (part,) = report.graphs[0].ov_partitions
    layers = [op.get_rt_info()["layerType"].astype(str) for op in part.compiled.get_runtime_model().get_ops()]
    assert "Reference" not in layers and "Pooling" not in layers, layers
    offsets = math.prod(kernel) if isinstance(kernel, tuple) else kernel**2
    assert layers.count("Eltwise") + layers.count("Subgraph") <= 3 * offsets, layers


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x: F.avg_pool1d(x, 3), (2, 3, 12)),
        (lambda x: F.avg_pool1d(x, 4, stride=3, padding=2, ceil_mode=True, count_include_pad=False), (2, 3, 11)),
        (lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), (2, 3, 7, 8)),
        (lambda x: F.avg_pool2d(x, (2, 3), (2, 1), 1, False, False), (3, 7, 8)),  # unbatched
        (lambda x: F.avg_pool2d(x, 3, stride=3, padding=1, ceil_mode=True, divisor_override=5), (1, 2, 7, 8)),
        (lambda x: F.avg_pool3d(x, 2, stride=2, padding=1), (1, 2, 5, 4, 3)),
    ],
)
def test_integer_avg_pool_truncates_exact_sums(fn, shape):
    """torch divides a window's integer sum and truncates (-11 / 3 is -3); AvgPool averaged in
    float and rounded (7 / 3 gave 2 but -2 / 3 gave -1) and lost sums past 2^24. (int64 is the
    only integer type eager pools.)"""
    g = torch.Generator().manual_seed(13)
    x = torch.randint(-(2**27), 2**27, shape, generator=g)
    x.view(-1)[::5] = torch.randint(-9, 9, x.view(-1)[::5].shape, generator=g)
    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, fn(x), rtol=0, atol=0)
    assert_all_on_openvino(report)
    assert sum(n for op, n in report.ov_ops.items() if op.startswith("aten.avg_pool")) == 1, str(report)
