"""upsample_* (Interpolate-11 or exact Gathers), grid_sampler_2d (GridSample-9), col2im (Col2Im-15).

The ``upsample_*`` overloads never reach fxvino through ``torch.compile`` today: torch registers
Python CompositeImplicit/Autograd kernels for them that AOTAutograd's tracing runs before any
decomposition table is consulted (``F.interpolate`` arrives as arange/index arithmetic). Their
lowerings are therefore tested on ATen graphs built directly and run through fxvino's own
partitioner, the same path every compiled graph takes after capture.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.fx
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import fxvino
from fxvino.capture import decompositions
from fxvino.options import Options
from fxvino.partitioning.partition import partition_and_compile
from fxvino.report import GraphReport, Report
from harness import assert_all_on_openvino, run_fxvino

aten = torch.ops.aten


def _compile_gm(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, Report]:
    graph_report = GraphReport("direct", "inference")
    gm = partition_and_compile(gm, Options(), graph_report)
    return gm, Report([graph_report])


def run_op(op, *args):
    """One ATen call as an FX graph (tensors become inputs), compiled by fxvino; (output, report)."""
    mode = FakeTensorMode()
    graph = torch.fx.Graph()
    tensors: list[torch.Tensor] = []

    def placeholder(v):
        if not isinstance(v, torch.Tensor):
            return v
        node = graph.placeholder(f"x{len(tensors)}")
        node.meta["val"] = mode.from_tensor(v)
        tensors.append(v)
        return node

    fx_args = pytree.tree_map(placeholder, args)
    with mode:
        val = op(*pytree.tree_map(lambda v: v.meta["val"] if isinstance(v, torch.fx.Node) else v, fx_args))
    node = graph.call_function(op, tuple(fx_args))
    node.meta["val"] = val
    graph.output((node,))
    gm, report = _compile_gm(torch.fx.GraphModule(torch.nn.Module(), graph))
    return gm(*tensors)[0], report


def trace_and_run(fn, *inputs, dynamic=False):
    """``fn`` traced to ATen with make_fx (below autograd, so no Python decomposition runs)."""
    with torch._C._AutoDispatchBelowAutograd():
        gm = make_fx(fn, tracing_mode="symbolic" if dynamic else "fake")(*inputs)
    return _compile_gm(gm)


def _assert_lowered(report, op, out, ref, exact):
    assert_all_on_openvino(report)
    assert report.ov_ops[op] == 1, str(report)
    tol = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-5, "atol": 1e-5}
    torch.testing.assert_close(out, ref, **tol)


# Sizes that upsample, downsample, keep or collapse an axis.
SIZES = [(5, 10), (5, 7), (7, 5), (6, 1), (1, 4), (3, 3)]
# Integer factors take the Interpolate path; the others reproduce torch's 1/scale coordinates.
SCALES = [2.0, 0.5, 1.5, 1.3, 0.7, 1 / 3, 1.1, 2.05]


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("exact", [False, True], ids=["nearest", "nearest_exact"])
@pytest.mark.parametrize("i, o", SIZES)
def test_upsample_nearest_sizes(dims, exact, i, o):
    packet = getattr(aten, f"_upsample_nearest_exact{dims}d" if exact else f"upsample_nearest{dims}d")
    x = torch.randn(2, 3, *[i + k for k in range(dims)])
    size = [o + k for k in range(dims)]
    out, report = run_op(packet.default, x, size)
    _assert_lowered(report, str(packet.default), out, packet.default(x, size), exact=True)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("i", [3, 9])
def test_upsample_nearest2d_vec_scale_factors(scale, i):
    x = torch.randn(1, 2, i, i + 4)
    out, report = run_op(aten.upsample_nearest2d.vec, x, None, [scale, scale])
    ref = aten.upsample_nearest2d.vec(x, None, [scale, scale])
    _assert_lowered(report, "aten.upsample_nearest2d.vec", out, ref, exact=True)


@pytest.mark.parametrize("scale", SCALES)
def test_upsample_nearest_exact_and_1d_3d_scale_factors(scale):
    for op, x in [
        (aten._upsample_nearest_exact2d.vec, torch.randn(1, 2, 5, 9)),
        (aten.upsample_nearest1d.vec, torch.randn(1, 2, 9)),
        (aten.upsample_nearest3d.vec, torch.randn(1, 2, 3, 5, 9)),
    ]:
        factors = [scale] * (x.dim() - 2)
        out, report = run_op(op, x, None, factors)
        _assert_lowered(report, str(op), out, op(x, None, factors), exact=True)


def test_upsample_nearest_keeps_integer_dtype():
    x = torch.randint(0, 255, (1, 3, 5, 6), dtype=torch.uint8)
    for factors in ([2.0, 3.0], [1.5, 0.7]):
        out, report = run_op(aten.upsample_nearest2d.vec, x, None, factors)
        _assert_lowered(report, "aten.upsample_nearest2d.vec", out, aten.upsample_nearest2d.vec(x, None, factors), True)


LINEAR = {1: aten.upsample_linear1d, 2: aten.upsample_bilinear2d, 3: aten.upsample_trilinear3d}


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("i, o", SIZES)
def test_upsample_linear_sizes(dims, align_corners, i, o):
    op = LINEAR[dims].default
    x = torch.randn(2, 3, *[i + k for k in range(dims)])
    size = [o + k for k in range(dims)]
    out, report = run_op(op, x, size, align_corners)
    _assert_lowered(report, str(op), out, op(x, size, align_corners), exact=False)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("scale", SCALES)
def test_upsample_linear_and_cubic_scale_factors(scale, align_corners):
    for op, x in [
        (aten.upsample_bilinear2d.vec, torch.randn(1, 2, 5, 9)),
        (aten.upsample_bicubic2d.vec, torch.randn(1, 2, 5, 9)),
        (aten.upsample_linear1d.vec, torch.randn(1, 2, 9)),
        (aten.upsample_trilinear3d.vec, torch.randn(1, 2, 3, 5, 4)),
    ]:
        factors = [scale] * (x.dim() - 2)
        out, report = run_op(op, x, None, align_corners, factors)
        _assert_lowered(report, str(op), out, op(x, None, align_corners, factors), exact=False)


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("i, o", SIZES)
def test_upsample_bicubic2d_sizes(i, o, align_corners):
    x = torch.randn(2, 3, i, i + 2)
    size = [o, o + 3]
    out, report = run_op(aten.upsample_bicubic2d.default, x, size, align_corners)
    ref = aten.upsample_bicubic2d.default(x, size, align_corners)
    _assert_lowered(report, "aten.upsample_bicubic2d.default", out, ref, exact=False)


@pytest.mark.parametrize("op", [aten._upsample_bilinear2d_aa, aten._upsample_bicubic2d_aa])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize(
    "shape, size",
    [((2, 3, 9, 11), [4, 5]), ((1, 2, 32, 30), [3, 7]), ((1, 2, 5, 6), [9, 13]), ((1, 2, 9, 1), [4, 1])],
)
def test_upsample_antialiased(op, align_corners, shape, size):
    """PIL-style antialias filters: wide downscaling filters run as a MatMul per axis."""
    x = torch.randn(shape)
    out, report = run_op(op.default, x, size, align_corners)
    _assert_lowered(report, str(op.default), out, op.default(x, size, align_corners), exact=False)
    out, report = run_op(op.vec, x, None, align_corners, [0.6, 1.7])
    _assert_lowered(report, str(op.vec), out, op.vec(x, None, align_corners, [0.6, 1.7]), exact=False)


def test_upsample_nearest2d_dynamic_one_model_for_every_size():
    def fn(x):
        return aten.upsample_nearest2d.default(x, [x.shape[2] * 2, x.shape[3] * 3], 2.0, 3.0)

    gm, report = trace_and_run(fn, torch.randn(2, 3, 4, 5), dynamic=True)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.upsample_nearest2d.default"] == 1, str(report)
    for shape in [(2, 3, 4, 5), (3, 2, 7, 3), (1, 1, 9, 2)]:
        x = torch.randn(shape)
        torch.testing.assert_close(gm(x), fn(x), rtol=0, atol=0)


def test_upsample_bilinear2d_dynamic_output_size():
    def fn(x):
        return aten.upsample_bilinear2d.default(x, [x.shape[2] + 3, x.shape[3] * 2], False)

    gm, report = trace_and_run(fn, torch.randn(2, 3, 4, 5), dynamic=True)
    assert_all_on_openvino(report)
    for shape in [(2, 3, 4, 5), (3, 2, 7, 3)]:
        x = torch.randn(shape)
        torch.testing.assert_close(gm(x), fn(x))


def test_upsample_non_integer_scale_with_dynamic_sizes_is_declined():
    def fn(x):
        return aten.upsample_nearest2d.default(x, [x.shape[2] * 2, x.shape[3] * 3], 2.1, 3.0)

    gm, report = trace_and_run(fn, torch.randn(2, 3, 4, 5), dynamic=True)
    (fb,) = [f for f in report.fallbacks if f.op == "aten.upsample_nearest2d.default"]
    assert "non-integer scale factor with dynamic spatial sizes" in fb.reason
    x = torch.randn(3, 2, 7, 3)
    torch.testing.assert_close(gm(x), fn(x))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"scale_factor": 2, "mode": "nearest"},
        {"size": (7, 9), "mode": "nearest"},
        {"scale_factor": 1.5, "mode": "bilinear"},
        {"size": (7, 9), "mode": "bilinear", "align_corners": True},
    ],
)
def test_interpolate_through_torch_compile(kwargs):
    """Whatever form F.interpolate takes after capture, it runs on OpenVINO and matches eager."""
    x = torch.randn(2, 3, 5, 6)
    fn = lambda x: F.interpolate(x, **kwargs)  # noqa: E731
    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, fn(x))
    assert_all_on_openvino(report)


@pytest.mark.parametrize(
    "mode, padding_mode, align_corners",
    list(itertools.product(["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"], [False, True])),
)
def test_grid_sample(mode, padding_mode, align_corners):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 7)
    grid = torch.rand(2, 4, 6, 2) * 2.4 - 1.2  # some points outside [-1, 1] exercise the padding

    def fn(x, grid):
        return F.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners)

    out, report = run_fxvino(fn, x, grid, fullgraph=True)
    torch.testing.assert_close(out, fn(x, grid), rtol=1e-5, atol=1e-5)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.grid_sampler_2d.default"] == 1


@pytest.fixture
def keep_col2im(monkeypatch):
    """col2im is in the Core ATen decomposition table (index_put); keep it whole."""
    monkeypatch.setattr(decompositions, "KEEP_UNDECOMPOSED", decompositions.KEEP_UNDECOMPOSED | {aten.col2im.default})


@pytest.mark.parametrize(
    "shape, output_size, kernel, dilation, padding, stride",
    [
        ((1, 12, 12), (4, 5), (2, 2), 1, 0, 1),
        ((2, 12, 30), (6, 7), (2, 2), 1, 0, 1),
        ((27, 9), (6, 6), (3, 3), 1, 1, 2),  # unbatched
        ((2, 8, 25), (5, 5), (2, 2), 2, 1, 1),
        ((2, 6, 18), (5, 8), (1, 3), (1, 2), (0, 1), (2, 1)),
    ],
)
def test_fold_col2im(keep_col2im, shape, output_size, kernel, dilation, padding, stride):
    x = torch.randn(shape)

    def fn(x):
        return F.fold(x, output_size, kernel, dilation=dilation, padding=padding, stride=stride)

    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, fn(x))
    assert_all_on_openvino(report, partitions=None)
    assert report.ov_ops["aten.col2im.default"] == 1, str(report)


def test_fold_dynamic(keep_col2im):
    fn = lambda x: F.fold(x, (6, 7), (2, 2))  # noqa: E731
    compiled = torch.compile(fn, backend="fxvino", dynamic=True, fullgraph=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for batch in (2, 3):
            x = torch.randn(batch, 12, 30)
            torch.testing.assert_close(compiled(x), fn(x))
    assert report.ov_ops["aten.col2im.default"] >= 1, str(report)
    assert not report.fallbacks, str(report)
