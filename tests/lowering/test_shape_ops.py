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


class _Heads(torch.nn.Module):
    """A Linear over [batch, seq, hidden], then its output split into heads: the views every
    transformer layer makes, with sizes that are symbolic under dynamic shapes."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)

    def forward(self, x):
        y = self.proj(x)
        return y, y.view(x.shape[0], x.shape[1], 4, 8).transpose(1, 2)


def _dynamic_heads_ir():
    from torch.export import Dim

    import fxvino

    torch.manual_seed(0)
    model = _Heads().eval()
    x = torch.randn(2, 3, 16)
    return model, fxvino.export(model, (x,), dynamic_shapes=({0: Dim("batch"), 1: Dim("seq")},)).ov_model


def test_linear_and_head_views_leave_no_shape_arithmetic():
    """With symbolic batch and length, ``nn.Linear``'s flatten/unflatten pair cancels (its output
    is the MatMul's own, which OpenVINO GenAI looks for behind an LLM's logits) and splitting heads
    reshapes to a constant target that copies the leading dims (``special_zero``): nothing is
    gathered from the inputs' shapes at run time."""
    _, ir = _dynamic_heads_ir()
    bias = ir.output(0).get_node().input_value(0).get_node()
    assert bias.get_type_name() == "Add" and bias.input_value(0).get_node().get_type_name() == "MatMul"
    kinds = [op.get_type_name() for op in ir.get_ops()]
    assert "ShapeOf" not in kinds, kinds
    (reshape,) = [op for op in ir.get_ops() if op.get_type_name() == "Reshape"]
    assert reshape.input_value(1).get_node().get_data().tolist() == [0, 0, 4, 8]
    assert reshape.get_special_zero()


@pytest.mark.parametrize("shape", [(3, 5, 16), (1, 1, 16), (2, 0, 16)], ids=["plain", "ones", "empty"])
def test_linear_and_head_views_equal_eager_under_dynamic_shapes(shape):
    """The same views compiled with dynamic shapes give eager's values for shapes other than the
    traced one, sizes of 1 and 0 included (a 0 in a ``special_zero`` target copies the 0)."""
    model, ir = _dynamic_heads_ir()
    x = torch.randn(*shape)
    with torch.no_grad():
        want = model(x)
    got = ov_compile(ir)(x.numpy())
    for k, w in enumerate(want):
        torch.testing.assert_close(torch.from_numpy(got[k]), w, rtol=1e-5, atol=1e-5)
    out, report = run_fxvino(model, x, dynamic=True)
    assert_all_on_openvino(report)
    for o, w in zip(out, want, strict=True):
        torch.testing.assert_close(o, w, rtol=1e-5, atol=1e-5)


def ov_compile(ir):
    from fxvino.devices import core

    return core().compile_model(ir, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


# The functional copy variants of views: the same values, lowered by the view's own lowering.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool])
@pytest.mark.parametrize(
    "op, fn",
    [
        ("aten.view_copy.default", lambda x: torch.view_copy(x, (4, 6))),
        ("aten.permute_copy.default", lambda x: torch.permute_copy(x, (2, 0, 1))),
        ("aten.narrow_copy.default", lambda x: torch.narrow_copy(x, 2, 1, 2)),
        ("aten.narrow_copy.default", lambda x: torch.narrow_copy(x, -1, -3, 3)),  # negative dim and start
        ("aten.unbind_copy.int", lambda x: tuple(torch.unbind_copy(x, 1))),
    ],
)
def test_view_copies(op, fn, dtype):
    x = torch.arange(24).reshape(2, 3, 4)
    x = (x % 2 == 0) if dtype == torch.bool else x.to(dtype) - 7
    expected = fn(x)
    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert_all_on_openvino(report)
    assert report.ov_ops[op] > 0, str(report)
