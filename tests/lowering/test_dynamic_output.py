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
