"""Grouped transposed convolution against eager PyTorch (GroupConvolutionBackpropData)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness import assert_all_on_openvino, run_fxvino

CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("groups, stride, padding, output_padding, dilation", [(2, 1, 0, 0, 1), (3, 2, 1, 1, 2)])
def test_grouped_conv_transpose(spatial, groups, stride, padding, output_padding, dilation):
    torch.manual_seed(0)
    x = torch.randn(2, 6, *[5] * spatial)
    w = torch.randn(6, 4, *[3] * spatial)  # (C_in, C_out / groups, *kernel)
    b = torch.randn(4 * groups)

    def fn(x, w, b):
        return CONV_T[spatial](
            x, w, b, stride=stride, padding=padding, output_padding=output_padding, groups=groups, dilation=dilation
        )

    out, report = run_fxvino(fn, x, w, b, fullgraph=True)
    torch.testing.assert_close(out, fn(x, w, b), rtol=1e-4, atol=1e-4)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.convolution.default"] == 1, str(report)


@pytest.mark.parametrize(
    "transposed, groups, stride, padding, output_padding",
    [(False, 1, 1, 1, 0), (False, 2, 2, 0, 0), (True, 1, 2, 1, 1), (True, 2, 1, 0, 0)],
    ids=["conv", "grouped", "transposed", "transposed-grouped"],
)
def test_underscore_convolution(transposed, groups, stride, padding, output_padding):
    """``torch._convolution`` (its cuDNN/benchmark flags change nothing on CPU) maps onto the convolution."""
    torch.manual_seed(0)
    x = torch.randn(1, 4, 7, 7)
    w = torch.randn(4, 4 // groups, 3, 3) if not transposed else torch.randn(4, 6 // groups, 3, 3)
    b = torch.randn(6 if transposed else 4)

    def fn(x, w, b):
        return torch._convolution(
            x,
            w,
            b,
            [stride] * 2,
            [padding] * 2,
            [1, 1],
            transposed,
            [output_padding] * 2,
            groups,
            False,
            False,
            True,
            True,
        )

    out, report = run_fxvino(fn, x, w, b)
    torch.testing.assert_close(out, fn(x, w, b), rtol=1e-4, atol=1e-4)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten._convolution.default"] == 1, str(report)


def _deconvolution_kernels(report) -> set[str]:
    return {
        op.get_rt_info()["primitiveType"].astype(str)
        for g in report.graphs
        for p in g.ov_partitions
        for op in p.compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "Deconvolution"
    }


@pytest.mark.parametrize(
    "c_in, c_out, kernel, stride, padding, output_padding, dilation",
    [(64, 32, 16, 8, 0, 0, 1), (32, 16, 10, 5, 3, 2, 1), (32, 16, 4, 4, 1, 0, 2), (16, 16, 4, 2, 0, 1, 1)],
    ids=["codec-upsampling", "padded", "dilated", "narrow"],
)
def test_a_1d_transposed_convolution_runs_as_2d_where_only_that_avoids_the_gemm_kernel(
    c_in, c_out, kernel, stride, padding, output_padding, dilation
):
    """The CPU plugin runs some 1-d transposed convolutions on its generic GEMM kernel, 2-2.6x slower
    than the same as 2-d of height 1 (which fxvino then lowers): which ones depends on the plugin and
    the CPU class, so the expected kernel is the plugin's own answer for both forms, on this machine."""
    from fxvino.devices import cpu_deconvolution_kernel

    torch.manual_seed(0)
    layer = torch.nn.ConvTranspose1d(c_in, c_out, kernel, stride, padding, output_padding, dilation=dilation).eval()
    x = torch.randn(1, c_in, 50)
    out, report = run_fxvino(layer, x)
    torch.testing.assert_close(out, layer(x), rtol=1e-4, atol=1e-4)
    assert_all_on_openvino(report)
    one = cpu_deconvolution_kernel(c_in, c_out, (kernel,), (stride,), (dilation,), (padding,), (output_padding,))
    two = cpu_deconvolution_kernel(
        c_in, c_out, (1, kernel), (1, stride), (1, dilation), (0, padding), (0, output_padding)
    )
    assert one is not None and two is not None
    expected = two if "gemm" in one and "gemm" not in two else one
    assert _deconvolution_kernels(report) == {expected}, (one, two)
