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


@pytest.mark.parametrize(
    "shape, dim, size, step",
    [
        ((2, 9, 4), 1, 3, 2),
        ((10,), 0, 4, 3),
        ((3, 5, 6), -1, 2, 2),
        ((2, 7, 3), 1, 7, 1),
        ((4, 4), 0, 1, 1),
        ((), 0, 1, 1),
    ],
    ids=["mid", "1d", "last", "one-window", "size-1", "0d"],
)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_unfold(shape, dim, size, step, dynamic):
    def fn(x):
        return x.unfold(dim, size, step) * 2

    x = torch.randn(shape)
    out, report = run_fxvino(fn, x, dynamic=dynamic)
    torch.testing.assert_close(out, fn(x))
    assert_all_on_openvino(report)


def test_unfold_dynamic_lengths_compile_once():
    import fxvino

    def fn(x):
        return x.unfold(1, 4, 3).sum(-1)

    compiled = torch.compile(fn, backend="fxvino", dynamic=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for n in (7, 10, 13, 30):
            x = torch.randn(2, n, 3)
            torch.testing.assert_close(compiled(x), fn(x))
    assert len(report.graphs) == 1 and report.ov_ops["aten.unfold.default"] == 1, str(report)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x[1 : x.shape[0] - 1],
        lambda x: x.reshape(x.shape[0] * x.shape[1])[2:],
        lambda x: x.t()[1 : x.shape[1] - 1],
        lambda x: x.view(-1)[x.shape[1] :],
    ],
    ids=["slice", "reshape-slice", "transpose-slice", "flat-slice"],
)
def test_output_viewing_an_input_through_symbolic_views(fn):
    """AOTAutograd rebuilds an output that views an input through views with symbolic arguments
    from the returned tensor's own layout (it replays only static views): it must come back as a
    real view of the input (``x[1 : n - 1]`` came back as ``x[0 : n - 2]``)."""
    x = torch.randn(6, 5)
    out, report = run_fxvino(fn, x, dynamic=True)
    expected = fn(x)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert (out.stride(), out.storage_offset()) == (expected.stride(), expected.storage_offset())
    assert out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
