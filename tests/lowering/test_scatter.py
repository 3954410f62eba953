"""Scatter-family lowerings (scatter.py) against eager PyTorch, each proven to run on OpenVINO."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import fxvino
from fxvino.options import Options
from fxvino.partitioning.partition import partition_and_compile
from fxvino.report import GraphReport
from harness import assert_all_on_openvino, run_fxvino

aten = torch.ops.aten


def _check(fn, *args, ops, dynamic=False, atol=None, rtol=None):
    """Compile ``fn`` fullgraph, compare with eager, assert all on OpenVINO and ``ops`` present."""
    expected = fn(*args)
    out, report = run_fxvino(fn, *args, fullgraph=True, dynamic=dynamic)
    torch.testing.assert_close(out, expected, atol=atol, rtol=rtol)
    assert_all_on_openvino(report)
    for op in ops:
        assert report.ov_ops[op] > 0, f"{op} not on OpenVINO: {dict(report.ov_ops)}"
    return report


def _run_aten(fn, *args):
    """For ops fxvino's capture decomposes (select_scatter, fill): partition a make_fx graph."""
    gm = make_fx(fn, tracing_mode="fake")(*args)
    report = GraphReport("test", "inference")
    compiled = partition_and_compile(gm, Options(), report)
    return compiled(*args), report


def _unique_index(shape, dim, size, gen):
    """An index of ``shape`` whose entries along ``dim`` are distinct (scatter without reduction)."""
    perm = torch.rand(*shape[:dim], size, *shape[dim + 1 :], generator=gen).argsort(dim)
    return perm.narrow(dim, 0, shape[dim])


def _values(shape, dtype, gen):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=dtype)
    return torch.randint(-9, 10, shape, generator=gen, dtype=dtype)


# ----------------------------------------------------------------------------- scatter


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize(
    ("xshape", "ishape", "sshape", "dim"),
    [((4, 5), (3, 5), (3, 5), 0), ((3, 4, 6), (2, 3, 4), (3, 4, 5), -1)],
)
def test_scatter_variants(dtype, xshape, ishape, sshape, dim):
    gen = torch.Generator().manual_seed(0)
    d = dim % len(xshape)
    x, src = _values(xshape, dtype, gen), _values(sshape, dtype, gen)
    unique = _unique_index(ishape, d, xshape[d], gen)
    dup = torch.randint(0, xshape[d], ishape, generator=gen)

    def fn(x, unique, dup, src):
        return (
            aten.scatter.src(x, dim, unique, src),
            aten.scatter.value(x, dim, unique, 7),
            aten.scatter_add.default(x, dim, dup, src),
            aten.scatter.reduce(x, dim, dup, src, reduce="add"),
            aten.scatter.value_reduce(x, dim, dup, 3, reduce="multiply"),
        )

    names = ["aten.scatter.src", "aten.scatter.value", "aten.scatter_add.default", "aten.scatter.reduce"]
    _check(fn, x, unique, dup, src, ops=[*names, "aten.scatter.value_reduce"])


def test_scatter_0d():
    x, src, idx = torch.tensor(1.5), torch.tensor(-2.0), torch.tensor(0)
    _check(lambda x, i, s: aten.scatter_add.default(x, 0, i, s) * 2, x, idx, src, ops=["aten.scatter_add.default"])


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_float(reduce):
    gen = torch.Generator().manual_seed(1)
    x, src = torch.randn(6, 4, generator=gen), torch.randn(5, 4, generator=gen)
    idx = torch.randint(0, 4, (5, 3), generator=gen)  # duplicates; row 4..5 of x never hit

    def fn(x, idx, src):
        return (
            aten.scatter_reduce.two(x, 0, idx, src, reduce, include_self=True),
            aten.scatter_reduce.two(x, 0, idx, src, reduce, include_self=False),
            aten.scatter_reduce.two(x, -1, idx, src, reduce, include_self=False),
        )

    _check(fn, x, idx, src, ops=["aten.scatter_reduce.two"])


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_index_reduce(reduce, dtype):
    gen = torch.Generator().manual_seed(3)
    x, src = (torch.randn(s, generator=gen).mul(5).to(dtype) for s in ((3, 6, 2), (3, 4, 2)))
    idx = torch.tensor([4, 0, 4, 2])  # a repeat; rows 1, 3 and 5 never hit

    def fn(x, idx, src):
        return (
            x.index_reduce(1, idx, src, reduce, include_self=True),
            x.index_reduce(-2, idx, src, reduce, include_self=False),
        )

    _check(fn, x, idx, src, ops=["aten.index_reduce.default"])


def test_scatter_reduce_int64_floors_mean():
    gen = torch.Generator().manual_seed(2)
    x, src = torch.randint(-9, 10, (5, 3), generator=gen), torch.randint(-9, 10, (8, 3), generator=gen)
    idx = torch.randint(0, 3, (8, 3), generator=gen)

    def fn(x, idx, src):
        return tuple(
            aten.scatter_reduce.two(x, 0, idx, src, r, include_self=s)
            for r in ("sum", "prod", "mean", "amax", "amin")
            for s in (True, False)
        )

    _check(fn, x, idx, src, ops=["aten.scatter_reduce.two"])


def test_scatter_add_dynamic():
    def fn(x, idx, src):
        return aten.scatter_add.default(x, 1, idx, src) + 1

    compiled = torch.compile(fn, backend="fxvino", dynamic=True, fullgraph=True)
    gen = torch.Generator().manual_seed(3)
    with fxvino.collect_reports() as report, torch.no_grad():
        for n in (3, 4, 9):  # sizes chosen so no two dims coincide (Dynamo would unify them)
            x, src = torch.randn(13, n, generator=gen), torch.randn(14, n + 2, generator=gen)
            idx = torch.randint(0, n, (12, n), generator=gen)
            torch.testing.assert_close(compiled(x, idx, src), fn(x, idx, src))
    assert len(report.graphs) == 1, str(report)  # one dynamic graph served every size
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.scatter_add.default"] == 1


# ----------------------------------------------------------------------------- index_put / put


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_index_put_int_indices(dtype):
    gen = torch.Generator().manual_seed(4)
    x = _values((4, 5, 6), dtype, gen)
    i = torch.tensor([[0], [-1], [2]])  # [3, 1], negative
    j = torch.tensor([1, -2])  # [2]
    dup = torch.tensor([0, 3, 0, -1, 3])

    def fn(x, i, j, dup, v2, v3, vrow):
        return (
            aten.index_put.default(x, [None, i, j], v2),  # adjacent block not first: [4, 3, 2]
            aten.index_put.default(x, [i, None, j], v3),  # non-adjacent: [3, 2, 5]
            aten.index_put.default(x, [dup], vrow, True),  # duplicates accumulate
            aten.index_put.default(x, [i, j], vrow[0, 0], True),  # broadcast values [6]
        )

    v2 = _values((3, 1), dtype, gen)  # broadcast to [4, 3, 2]
    v3 = _values((3, 2, 5), dtype, gen)
    vrow = _values((5, 5, 6), dtype, gen)
    _check(fn, x, i, j, dup, v2, v3, vrow, ops=["aten.index_put.default"])


def test_index_put_bool_masks():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 4, 5, generator=gen)
    full = x > 0
    cols = torch.tensor([True, False, True, True])
    plane = torch.rand(4, 5, generator=gen) > 0.5

    def fn(x, full, cols, plane, vcols, vplane):
        return (
            aten.index_put.default(x, [full], torch.tensor(2.5)),
            aten.index_put.default(x, [full], torch.tensor(1.0), True),
            aten.index_put.default(x, [None, cols], vcols),  # values [3, 3, 1] -> [3, N=3, 5]
            aten.index_put.default(x, [None, plane], vplane, True),  # values [N]
        )

    vcols = torch.randn(3, 3, 1, generator=gen)
    vplane = torch.randn(int(plane.sum()), generator=gen)
    _check(fn, x, full, cols, plane, vcols, vplane, ops=["aten.index_put.default"])


def test_index_put_mask_with_index_declined():
    x, m, i = torch.randn(3, 4), torch.tensor([True, False, True]), torch.tensor([0, 1])

    def fn(x, m, i, v):
        return aten.index_put.default(x, [m, i], v) + 1

    v = torch.randn(2)
    out, report = run_fxvino(fn, x, m, i, v, fullgraph=True)
    torch.testing.assert_close(out, fn(x, m, i, v))
    reasons = [fb.reason for fb in report.fallbacks if fb.op == "aten.index_put.default"]
    assert reasons and "data-dependent" in reasons[0], str(report)


def test_put():
    gen = torch.Generator().manual_seed(6)
    x, src = torch.randn(3, 4, generator=gen), torch.randn(2, 3, generator=gen)
    idx = torch.tensor([[0, -1, 5], [5, 11, -12]])  # duplicates and negatives

    def fn(x, idx, src):
        return aten.put.default(x, idx, src, True), aten.put.default(x, idx[:1], src[:1])

    _check(fn, x, idx, src, ops=["aten.put.default"])


# ----------------------------------------------------------------------------- *_scatter


@pytest.mark.parametrize(
    ("dim", "start", "end", "step"),
    [(0, None, None, 1), (1, 1, -1, 2), (-1, -4, None, 3), (1, 2, 100, 1), (0, 5, 2, 1)],
)
def test_slice_scatter(dim, start, end, step):
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(5, 7, generator=gen)
    src = torch.empty_like(x).normal_(generator=gen)
    src = src[(slice(None),) * (dim % 2) + (slice(start, end, step),)].clone()

    def fn(x, src):
        return aten.slice_scatter.default(x, src, dim, start, end, step) * 2

    if src.numel() == 0:  # empty slice: graph is just the multiply
        out, report = run_fxvino(fn, x, src, fullgraph=True)
        torch.testing.assert_close(out, fn(x, src))
        assert_all_on_openvino(report)
        return
    _check(fn, x, src, ops=["aten.slice_scatter.default"])


def test_slice_scatter_int64():
    x, src = torch.arange(12).reshape(3, 4), -torch.arange(6).reshape(3, 2)
    _check(lambda x, s: aten.slice_scatter.default(x, s, 1, 0, 4, 2), x, src, ops=["aten.slice_scatter.default"])


def test_slice_scatter_dynamic():
    def fn(x, src):
        return aten.slice_scatter.default(x, src, 1, 1, x.shape[1] - 1) + 1

    compiled = torch.compile(fn, backend="fxvino", dynamic=True, fullgraph=True)
    gen = torch.Generator().manual_seed(8)
    with fxvino.collect_reports() as report, torch.no_grad():
        for n in (4, 6, 9):
            x, src = torch.randn(3, n, generator=gen), torch.randn(3, n - 2, generator=gen)
            torch.testing.assert_close(compiled(x, src), fn(x, src))
    assert len(report.graphs) == 1, str(report)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.slice_scatter.default"] == 1


def test_select_scatter_and_fill():
    """Both are decomposed by fxvino's capture; the lowerings are exercised on an ATen graph."""
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(3, 4, 5, generator=gen)
    s1, s2 = torch.randn(3, 5, generator=gen), torch.randn(4, 5, generator=gen)

    def fn(x, s1, s2):
        return (
            aten.select_scatter.default(x, s1, 1, -1),
            aten.select_scatter.default(x, s2, 0, 2),
            aten.fill.Scalar(x, 2.5),
            aten.fill.Tensor(x.to(torch.int64), torch.tensor(3.7)),
        )

    out, report = _run_aten(fn, x, s1, s2)
    torch.testing.assert_close(out, fn(x, s1, s2))
    assert not report.torch_ops and not report.fallbacks, report.summary()
    for op in ("aten.select_scatter.default", "aten.fill.Scalar", "aten.fill.Tensor"):
        assert report.ov_ops[op] > 0, report.summary()


def test_diagonal_and_diagonal_scatter():
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(3, 4, 5, generator=gen)

    def fn(x):
        return (
            aten.diagonal.default(x) * 2,
            aten.diagonal.default(x, 2, -1, 1) * 2,
            aten.diagonal.default(x, -1, 2, 0) * 2,
            aten.diagonal.default(x, 7, 0, 1) * 2,  # empty
        )

    _check(fn, x, ops=["aten.diagonal.default"])
    src = torch.randn(5, 3, generator=gen)
    _check(lambda x, s: aten.diagonal_scatter.default(x, s, -1, 1, 0), x, src, ops=["aten.diagonal_scatter.default"])


def test_diagonal_dynamic():
    def fn(x):
        return torch.diagonal(x, 1, 0, 1) + 1

    compiled = torch.compile(fn, backend="fxvino", dynamic=True, fullgraph=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for n in (3, 5):
            x = torch.randn(n, n + 1, 2)
            torch.testing.assert_close(compiled(x), fn(x))
    assert len(report.graphs) == 1, str(report)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.diagonal.default"] == 1


# ----------------------------------------------------------------------------- masked_scatter, copy


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_masked_scatter(dtype):
    gen = torch.Generator().manual_seed(11)
    x = _values((4, 5), dtype, gen)
    mask = torch.rand(4, 5, generator=gen) > 0.4
    row_mask = torch.tensor([True, False, True, True, False])  # broadcast over rows
    src = _values((6, 5), dtype, gen)  # more elements than Trues

    def fn(x, mask, row_mask, src):
        return aten.masked_scatter.default(x, mask, src), aten.masked_scatter.default(x, row_mask, src)

    _check(fn, x, mask, row_mask, src, ops=["aten.masked_scatter.default"])


def test_copy_broadcasts_and_casts():
    x, y = torch.randn(3, 4), torch.arange(4)

    def fn(x, y):
        z = x.clone()
        z.copy_(y)
        return z

    _check(fn, x, y, ops=["aten.copy.default"])


# ----------------------------------------------------------------------------- embedding bags


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    gen = torch.Generator().manual_seed(12)
    weight = torch.randn(10, 3, generator=gen)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
    offsets = torch.tensor([0, 4, 4, 7])  # bag 1 is empty
    psw = torch.rand(10, generator=gen) if mode == "sum" else None

    def fn(w, i, o):
        return (
            F.embedding_bag(i, w, o, mode=mode, per_sample_weights=psw),
            F.embedding_bag(i, w, o, mode=mode, padding_idx=4),
            F.embedding_bag(i, w, torch.cat([o, o.new_tensor([10])]), mode=mode, include_last_offset=True),
            F.embedding_bag(i.view(2, 5), w, mode=mode, padding_idx=0),
        )

    _check(fn, weight, indices, offsets, ops=["aten._embedding_bag_forward_only.default"])


def test_embedding_bag_aten_op():
    weight, indices, offsets = torch.randn(6, 4), torch.tensor([0, 5, 5, 2, 1]), torch.tensor([0, 2, 2])

    def fn(w, i, o):
        return aten._embedding_bag.default(w, i, o, False, 1)[0]

    _check(fn, weight, indices, offsets, ops=["aten._embedding_bag.default"])


# ----------------------------------------------------------------------------- as_strided


def test_as_strided():
    x = torch.randn(4, 6)

    def fn(x):
        return torch.as_strided(x, (3, 3, 2), (6, 1, 3), 2) * 2  # overlapping windows

    _check(fn, x, ops=["aten.as_strided.default"])
    src = torch.randn(3, 2)

    def scatter(x, src):
        return aten.as_strided_scatter.default(x, src, (3, 2), (5, 2), 3)

    _check(scatter, x, src, ops=["aten.as_strided_scatter.default"])


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_as_strided_copy_reads_through_its_arguments_not_its_output_strides(dynamic):
    """as_strided_copy's result is contiguous: the layout read comes from its size/stride arguments
    (strides (1, 2) once came out transposed)."""

    def fn(x):
        return aten.as_strided_copy.default(x * 2, (2, x.shape[1] - 1), (1, 2), 1) + 1

    x = torch.randn(3, 3)
    out, report = run_fxvino(fn, x, fullgraph=True, dynamic=dynamic)
    torch.testing.assert_close(out, fn(x), rtol=0, atol=0)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.as_strided_copy.default"] == 1, str(report)


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x: torch.as_strided(x.t(), (2, 3), (1, 2)), (4, 5)),
        (lambda x: torch.as_strided(x[1:, 2:], (2, 2), (5, 1)), (4, 5)),  # offset taken from the view
        (lambda x: torch.as_strided(x[1:], (3, 2), (5, 2), 6), (4, 5)),  # explicit storage offset
        (lambda x: torch.as_strided(x.expand(3, 4), (3, 2), (0, 1)), (1, 4)),
        (lambda x: torch.as_strided(torch.as_strided(x, (3, 4), (4, 1)), (2, 2), (4, 2), 1), (12,)),
        (lambda x: torch.as_strided(x, (2, 2), (1, 2)) * 2, "transposed input"),
    ],
    ids=["transpose", "slice", "slice-offset", "expand", "chained", "non-contiguous-input"],
)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_as_strided_of_views(fn, shape, dynamic):
    """as_strided addresses storage: each position read maps back to the view's element there."""
    x = torch.randn(6, 4).t() if shape == "transposed input" else torch.randn(shape)
    out, report = run_fxvino(fn, x, fullgraph=True, dynamic=dynamic)
    torch.testing.assert_close(out, fn(x), rtol=0, atol=0)
    assert_all_on_openvino(report)


def test_as_strided_outside_its_base_runs_in_pytorch_with_the_real_views():
    """The input is a view of a larger storage: as_strided reads past it, so it and the views
    leading to it run in PyTorch (an OpenVINO partition would hand it a fresh contiguous copy)."""

    def fn(x):
        return torch.as_strided(x.t()[1:], (2, 2), (5, 1), 0) * 2  # position 0 is outside x

    x = torch.randn(4, 5)[:, 1:3]
    out, report = run_fxvino(fn, x, fullgraph=True)
    torch.testing.assert_close(out, fn(x))
    reasons = [fb.reason for fb in report.fallbacks if fb.op == "aten.as_strided.default"]
    assert reasons and "outside the tensor its view chain starts from" in reasons[0], str(report)
    assert report.torch_ops["aten.slice.Tensor"] == 1, str(report)


def _sliding_chunks(x):
    """Longformer's ``_chunk``: overlapping windows of ``2w`` rows, ``w`` apart, as_strided over a view."""
    b, n, d = x.shape
    w = 4
    chunks = x.view(b, n // (2 * w), 2 * w, d)
    size = [b, chunks.shape[1] * 2 - 1, 2 * w, d]
    stride = [chunks.stride(0), chunks.stride(1) // 2, chunks.stride(2), chunks.stride(3)]
    return chunks.as_strided(size=size, stride=stride)


def _transposed_result(x):
    y = x.t() + 1  # elementwise keeps the transposed layout: y's storage is in x's order
    assert y.stride() == (1, y.shape[0])
    return torch.as_strided(y, (y.shape[1] - 1, 3), (y.shape[0], 1), 1)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.as_strided(x, (x.shape[0] - 1, 2 * x.shape[1]), (x.shape[1], 1)),  # overlapping rows
        lambda x: torch.as_strided(x[1:], (2, x.shape[1]), (x.shape[1], 1)),  # symbolic offset of the view
        lambda x: torch.as_strided(x.t(), (2, 3), (x.shape[1], 1), x.shape[1] + 1),  # symbolic explicit offset
        lambda x: _sliding_chunks(x.view(1, -1, 3)),
        _transposed_result,  # the base's storage order is not its dim order
        lambda x: torch.as_strided(torch.as_strided(x, (x.shape[0], 2), (x.shape[1], 2)), (2, 2), (1, 1), 1),
        lambda x: torch.as_strided(x, (0, x.shape[1]), (x.shape[1], 1)),  # nothing read
    ],
    ids=["rows", "slice-offset", "explicit-offset", "sliding-chunks", "transposed-base", "chained", "empty"],
)
def test_as_strided_symbolic_layouts(fn):
    """Symbolic sizes, strides and offsets: positions computed in the graph; one compiled graph serves
    every size (each call checked against eager)."""
    compiled = torch.compile(lambda x: fn(x * 2) * 3, backend="fxvino", dynamic=True, fullgraph=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for rows in (8, 16, 24):
            x = torch.randn(rows, 6)
            torch.testing.assert_close(compiled(x), fn(x * 2) * 3, rtol=0, atol=0)
    assert len(report.graphs) == 1, str(report)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.as_strided.default"] >= 1, str(report)


def test_as_strided_output_viewing_an_input_with_symbolic_arguments():
    """AOTAutograd rebuilds such an output with as_strided from the returned tensor's own strides:
    it and its views run in PyTorch, where they are real views (a copy from OpenVINO came back wrong)."""

    def fn(x):
        return torch.as_strided(x, (x.shape[0] - 1, 2), (x.shape[1], 1), 1)

    x = torch.randn(5, 4)
    out, report = run_fxvino(fn, x, fullgraph=True, dynamic=True)
    torch.testing.assert_close(out, fn(x), rtol=0, atol=0)
    assert out.stride() == (4, 1) and out.storage_offset() == 1
    reasons = [fb.reason for fb in report.fallbacks if fb.op == "aten.as_strided.default"]
    assert reasons and "views with symbolic arguments" in reasons[0], str(report)


def test_as_strided_symbolic_of_a_gappy_input_is_declined():
    """With symbolic sizes, positions are computed against the storage image of a dense base; a graph
    input that is a column slice of a wider tensor is not one, so the op stays in PyTorch."""

    def inside(x):  # columns 1-2 of each row but the last: inside x, yet x has gaps in its storage
        return torch.as_strided(x, (x.shape[0] - 1, 2), (x.stride(0), 1), x.storage_offset() + 1) * 2

    def outside(x):  # rows of x.shape[1] consecutive positions: they run into the gaps
        return torch.as_strided(x, (x.shape[0] - 1, 2), (x.shape[1], 1)) * 2

    x = torch.randn(8, 9)[:, 2:7]
    for fn, why in [(inside, "fill its storage densely"), (outside, "reads storage outside the tensor")]:
        out, report = run_fxvino(fn, x, fullgraph=True, dynamic=True)
        torch.testing.assert_close(out, fn(x), rtol=0, atol=0)
        reasons = [fb.reason for fb in report.fallbacks if fb.op == "aten.as_strided.default"]
        assert reasons and why in reasons[0], str(report)
