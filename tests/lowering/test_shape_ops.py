"""Views of zero-size tensors against eager PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness import assert_all_on_openvino, run_fxvino


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x: F.pixel_shuffle(x, 1), (1, 1, 0, 1)),
        (lambda x: F.pixel_unshuffle(x, 1), (1, 1, 1, 0)),
        (lambda x: (x * 2).reshape(3, 0, 2), (2, 0, 3)),  # a 0 in the target shape is a zero-size dim
    ],
)
def test_view_of_zero_size_tensor(fn, shape):
    x = torch.randn(shape)
    out, report = run_fxvino(fn, x, fullgraph=True)
    expected = fn(x)
    assert out.shape == expected.shape and out.dtype == expected.dtype
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.view.default"] >= 1, str(report)


def test_view_keeps_values():
    x = torch.randn(2, 3, 4)
    fn = lambda x: (x + 1).view(4, 6)  # noqa: E731
    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, fn(x), rtol=0, atol=0)
    assert_all_on_openvino(report)
