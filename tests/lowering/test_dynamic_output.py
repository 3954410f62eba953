"""Data-dependent results on OpenVINO: nonzero, boolean-mask indexing and ``.item()``.

They need Dynamo's ``capture_dynamic_output_shape_ops`` / ``capture_scalar_outputs`` (without
them Dynamo graph-breaks and runs these ops eagerly itself).
"""

from __future__ import annotations

import pytest
import torch

from harness import assert_all_on_openvino, run_fxvino


@pytest.fixture(autouse=True)
def _capture_data_dependent():
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True):
        yield


def _check(fn, *args):
    out, report = run_fxvino(fn, *args, fullgraph=True)
    expected = fn(*args)
    if isinstance(expected, torch.Tensor):
        torch.testing.assert_close(out, expected)
    else:
        assert type(out) is type(expected) and out == pytest.approx(expected, rel=1e-6), (out, expected)
    assert_all_on_openvino(report, partitions=None)
    return report


@pytest.mark.parametrize(
    "x",
    [
        torch.tensor([[0.0, 1, 2], [3, 0, float("nan")]]),
        torch.randn(2, 3, 4) > 0,
        torch.tensor([0, 5, 0, -2]),
        torch.zeros(3, 2),
        torch.tensor(2.0),
        torch.tensor(0),
    ],
    ids=["float-nan", "bool-3d", "int", "all-zero", "0d", "0d-zero"],
)
def test_nonzero(x):
    report = _check(torch.nonzero, x)
    assert report.ov_ops["aten.nonzero.default"] == 1


def test_nonzero_feeds_more_ops():
    _check(lambda x: torch.nonzero(x > 0).float().sum(0) * 2 + 1, torch.randn(5, 6))


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (lambda x, m: x[m] * 2, [(4, 5), (4, 5)]),
        (lambda x, m: x[m], [(4, 5, 3), (4, 5)]),  # a 2-d mask over the leading dims
        (lambda x, m: x[:, m], [(3, 6, 2), (6,)]),
        (lambda x, m: x[m].sum(0), [(7, 3), (7,)]),
    ],
    ids=["full", "leading", "middle", "rows"],
)
def test_boolean_mask_indexing(fn, shapes):
    torch.manual_seed(0)
    x = torch.randn(shapes[0])
    mask = torch.rand(shapes[1]) > 0.5
    report = _check(fn, x, mask)
    assert report.ov_ops["aten.index.Tensor"] == 1


@pytest.mark.parametrize(
    "fn, x",
    [
        (lambda x: x.sum().item(), torch.randn(4)),
        (lambda x: (x > 0).sum().item(), torch.randn(6)),
        (lambda x: bool((x > 0).any().item()), torch.randn(6)),
        (lambda x: x * x.max().item(), torch.randn(4)),
    ],
    ids=["float", "int", "bool", "used-in-graph"],
)
def test_item(fn, x):
    _check(fn, x)


def test_item_sets_a_size():
    _check(lambda x, n: torch.zeros(n.item()) + x.sum(), torch.randn(4), torch.tensor(3))


@pytest.mark.parametrize(
    "fn, args",
    [
        (torch.repeat_interleave, (torch.tensor([0, 1, 2, 0, 3]),)),
        (lambda x, r: torch.repeat_interleave(x, r, dim=1), (torch.randn(2, 3, 4), torch.tensor([0, 1, 2]))),
    ],
    ids=["indices", "dim"],
)
def test_repeat_interleave_with_tensor_repeats(fn, args):
    report = _check(fn, *args)
    assert report.ov_ops["aten.repeat_interleave.Tensor"] == 1


def test_views_of_an_input_at_data_dependent_positions_are_real_views():
    """tensor_split at .item() positions returns views of the input, which AOTAutograd rebuilds from
    the returned tensors' own strides and offsets: the partition computes each view's sizes and
    storage offset, and the runtime returns real views of the input."""

    def fn(x, i):
        return torch.tensor_split(x, i, dim=2)

    x, i = torch.randn(2, 3, 5), torch.tensor([1, 3])
    out, report = run_fxvino(fn, x, i, fullgraph=True)
    for a, b in zip(out, fn(x, i), strict=True):
        torch.testing.assert_close(a, b)
        assert a.storage_offset() == b.storage_offset() and a.stride() == b.stride()
        assert a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()  # a view, as in eager
    assert_all_on_openvino(report, partitions=None)
    assert report.ov_ops["aten.sym_storage_offset.default"] == 2, str(report)


def _check_all(fn, *args, op: str):
    """Every output equal to eager's (NaN in the same places), and ``op`` ran on OpenVINO."""
    out, report = run_fxvino(fn, *args, fullgraph=True)
    expected = fn(*args)
    for got, want in zip(
        out if isinstance(out, tuple) else (out,), expected if isinstance(expected, tuple) else (expected,), strict=True
    ):
        assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    assert_all_on_openvino(report, partitions=None, ops=[op])


_REPEATS = torch.tensor([[3.0, 1, float("nan"), 2], [1, float("nan"), 3, -0.0], [0.0, 2, 2, float("inf")]])


@pytest.mark.parametrize(
    "x, mask",
    [
        (torch.randn(4, 5), torch.rand(4, 5) > 0.5),
        (torch.randn(4, 5), torch.rand(4, 1) > 0.3),  # the mask broadcasts over x
        (torch.randn(5), torch.rand(3, 5) > 0.5),  # x broadcasts over the mask
        (torch.tensor(2.5), torch.tensor([True, False, True])),
        (torch.arange(6).reshape(2, 3), torch.zeros(2, 3, dtype=torch.bool)),  # nothing selected
        (torch.randn(3, 4).to(torch.bfloat16), torch.rand(3, 4) > 0.5),
    ],
    ids=["same-shape", "mask-broadcasts", "x-broadcasts", "0d-x", "none", "bf16"],
)
def test_masked_select(x, mask):
    _check_all(torch.masked_select, x, mask, op="aten.masked_select.default")


@pytest.mark.parametrize(
    "x",
    [
        _REPEATS,  # NaN each a value of their own, -0.0 with 0.0, inf
        torch.randint(-3, 4, (5, 6)),
        torch.rand(9) > 0.5,
        torch.randint(0, 5, (4, 4)).to(torch.bfloat16),
        torch.tensor(7.0),
        torch.arange(10, 0, -1),
    ],
    ids=["float", "int", "bool", "bf16", "0d", "all-distinct"],
)
@pytest.mark.parametrize("inverse, counts", [(False, False), (True, False), (True, True), (False, True)])
def test_unique(x, inverse, counts):
    def fn(t):
        return torch.unique(t, sorted=True, return_inverse=inverse, return_counts=counts)

    _check_all(fn, x, op="aten._unique2.default")


def test_unique_unsorted_sorts_as_torchs_cpu_kernel_does():
    _check_all(
        lambda t: torch.unique(t, sorted=False, return_inverse=True),
        torch.tensor([5, 1, 5, 2, 1, 9]),
        op="aten._unique2.default",
    )


@pytest.mark.parametrize(
    "x",
    [
        torch.tensor([1.0, 1, float("nan"), float("nan"), 2, -0.0, 0.0, 1, 1]),
        torch.randint(0, 3, (4, 5)),
        torch.tensor([True, True, False, True]),
        torch.tensor(3),
    ],
    ids=["float", "int-2d", "bool", "0d"],
)
@pytest.mark.parametrize("inverse, counts", [(False, False), (True, True)])
def test_unique_consecutive(x, inverse, counts):
    def fn(t):
        return torch.unique_consecutive(t, return_inverse=inverse, return_counts=counts)

    _check_all(fn, x, op="aten.unique_consecutive.default")


@pytest.mark.parametrize("size, fill", [(8, -1), (2, -1), (6, 7), (0, -1)], ids=["padded", "cut", "fill", "none"])
def test_nonzero_static(size, fill):
    x = torch.tensor([[0, 1, 2], [3, 0, 0]])
    _check_all(lambda t: torch.nonzero_static(t, size=size, fill_value=fill), x, op="aten.nonzero_static.default")


@pytest.mark.parametrize(
    "x, weights, minlength",
    [
        (torch.tensor([0, 3, 3, 1, 7, 3]), None, 0),
        (torch.tensor([2, 2, 0]), None, 6),  # minlength beyond the largest value
        (torch.tensor([4, 1, 4, 0]), torch.tensor([0.5, 1.5, -2.0, 3.0]), 2),
        (torch.tensor([1, 0, 1], dtype=torch.int32), torch.tensor([2, 3, 4]), 0),  # integer weights: float64
        (torch.zeros(0, dtype=torch.int64), None, 3),
    ],
    ids=["counts", "minlength", "float-weights", "int-weights", "empty"],
)
def test_bincount(x, weights, minlength):
    _check_all(lambda x, w: torch.bincount(x, w, minlength), x, weights, op="aten.bincount.default")
