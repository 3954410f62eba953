"""Indices eager rejects raise under fxvino too (lowering/eager_checks.py).

OpenVINO's gathers and scatters took an index out of range silently (a token id past the
vocabulary embedded as zeros; eager and Inductor raise). Each case runs with an index out of range
(eager's error, or the error of the ATen graph eager runs, must come back) and with indices in
range, negative ones where torch wraps them (eager's results, every op on OpenVINO, no fallback).
Training graphs (forward and backward) are checked as inference graphs are.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import fxvino
from fxvino.cache import store as fxcache
from harness import assert_all_on_openvino

torch.manual_seed(0)
WEIGHT = torch.randn(10, 4)
X = torch.randn(3, 4)

# name -> (function, valid arguments, the same with an index out of range, ops that must run on OpenVINO)
CASES: dict[str, tuple[Callable, tuple, tuple, tuple[str, ...]]] = {
    "embedding": (
        lambda i: F.embedding(i, WEIGHT),
        (torch.tensor([[1, 9], [0, 3]]),),
        (torch.tensor([[1, 12], [0, 3]]),),
        ("aten.embedding.default",),
    ),
    "index_select": (
        lambda x, i: torch.index_select(x, 1, i),
        (X, torch.tensor([3, 0])),
        (X, torch.tensor([3, 4])),
        ("aten.index_select.default",),
    ),
    "gather": (
        lambda x, i: torch.gather(x, 1, i),
        (X, torch.tensor([[0, 3], [1, 2], [3, 3]])),
        (X, torch.tensor([[0, 5], [1, 2], [3, 3]])),
        ("aten.gather.default",),
    ),
    "index": (
        lambda x, i: x[i],
        (X, torch.tensor([0, -1, -3, 2])),
        (X, torch.tensor([0, -4])),
        ("aten.index.Tensor",),
    ),
    "index_two_dims": (
        lambda x, i, j: x[i, j],
        (X, torch.tensor([0, 2]), torch.tensor([-1, 3])),
        (X, torch.tensor([0, 2]), torch.tensor([-1, 4])),
        ("aten.index.Tensor",),
    ),
    "scatter": (
        lambda x, i: x.scatter(1, i, 1.0),
        (X, torch.tensor([[0, 3]])),
        (X, torch.tensor([[0, 4]])),
        ("aten.scatter.value",),
    ),
    "scatter_add": (
        lambda x, i, s: x.scatter_add(0, i, s),
        (torch.zeros(3), torch.tensor([0, 2, 2]), torch.ones(3)),
        (torch.zeros(3), torch.tensor([0, 3, 2]), torch.ones(3)),
        ("aten.scatter_add.default",),
    ),
    "index_put": (
        lambda x, i: x.index_put((i,), torch.tensor(1.0)),
        (torch.zeros(3), torch.tensor([1, -1])),
        (torch.zeros(3), torch.tensor([1, 5])),
        ("aten.index_put.default",),
    ),
    "one_hot": (  # PyTorch's decomposition asserts the classes: one of the graph's checks
        lambda i: F.one_hot(i, 3),
        (torch.tensor([0, 2, 1]),),
        (torch.tensor([0, 5, 1]),),
        ("aten._assert_async.msg",),
    ),
    "cross_entropy_target": (
        lambda x, t: F.cross_entropy(x, t),
        (torch.randn(2, 3), torch.tensor([0, 2])),
        (torch.randn(2, 3), torch.tensor([0, 7])),
        ("aten.gather.default",),
    ),
    "embedding_bag": (
        lambda i, o: F.embedding_bag(i, WEIGHT, o),
        (torch.tensor([1, 2, 9]), torch.tensor([0, 2])),
        (torch.tensor([1, 2, 10]), torch.tensor([0, 2])),
        ("aten._embedding_bag_forward_only.default",),
    ),
    "put": (
        lambda x, i: x.put(i, torch.ones(2)),
        (X, torch.tensor([0, -12])),
        (X, torch.tensor([0, 12])),
        ("aten.put.default",),
    ),
    "masked_scatter": (  # a source with fewer elements than the mask's trues
        lambda x, m: x.masked_scatter(m, torch.ones(2)),
        (torch.zeros(4), torch.tensor([True, False, True, False])),
        (torch.zeros(4), torch.tensor([True, True, True, False])),
        ("aten.masked_scatter.default",),
    ),
    "embedding_bag_first_offset": (
        lambda i, o: F.embedding_bag(i, WEIGHT, o),
        (torch.tensor([1, 2, 9]), torch.tensor([0, 3])),  # (an empty last bag)
        (torch.tensor([1, 2, 9]), torch.tensor([1, 2])),
        ("aten._embedding_bag_forward_only.default",),
    ),
    "embedding_bag_last_offset": (
        lambda i, o: F.embedding_bag(i, WEIGHT, o, include_last_offset=True),
        (torch.tensor([1, 2, 9]), torch.tensor([0, 1, 3])),
        (torch.tensor([1, 2, 9]), torch.tensor([0, 1, 4])),
        ("aten._embedding_bag_forward_only.default",),
    ),
    "embedding_bag_decreasing_offsets": (
        lambda i, o: F.embedding_bag(i, WEIGHT, o),
        (torch.tensor([1, 2, 9]), torch.tensor([0, 2, 2])),
        (torch.tensor([1, 2, 9]), torch.tensor([0, 2, 1])),
        ("aten._embedding_bag_forward_only.default",),
    ),
    "searchsorted_sorter": (
        lambda b, v, s: torch.searchsorted(b, v, sorter=s),
        (torch.tensor([3.0, 1.0, 2.0]), torch.tensor([2.5]), torch.tensor([1, 2, 0])),
        (torch.tensor([3.0, 1.0, 2.0]), torch.tensor([2.5]), torch.tensor([1, 2, 5])),
        ("aten.searchsorted.Tensor",),
    ),
    "binary_cross_entropy": (  # (its decomposition leaves out the check of the input's range)
        lambda x, y: F.binary_cross_entropy(x, y),
        (torch.tensor([0.5, 1.0, 0.0]), torch.tensor([1.0, 0.0, 0.0])),
        (torch.tensor([0.5, 1.5, 0.0]), torch.tensor([1.0, 0.0, 0.0])),
        ("aten._assert_async.msg",),
    ),
}


# Functions PyTorch decomposes before fxvino sees them: the eager run is of their ATen graph,
# whose error says the same in other words (a gather's bound for cross_entropy's target).
DECOMPOSED = {"one_hot": "Class values must be smaller", "cross_entropy_target": "index 7 is out of bounds"}


@pytest.mark.parametrize("name", list(CASES))
def test_an_index_out_of_range_raises_as_eager_does(name: str):
    fn, _, bad, _ = CASES[name]
    with pytest.raises((IndexError, RuntimeError)) as eager:  # the case is a bad one
        fn(*bad)
    compiled = torch.compile(fn, backend="fxvino")
    expected = DECOMPOSED.get(name, re.escape(str(eager.value)))
    with pytest.raises((IndexError, RuntimeError), match=expected), torch.no_grad():
        compiled(*bad)


@pytest.mark.parametrize("name", list(CASES))
def test_indices_in_range_run_on_openvino_with_eager_results(name: str):
    fn, good, bad, ops = CASES[name]
    compiled = torch.compile(fn, backend="fxvino")
    with fxvino.collect_reports() as report, torch.no_grad():
        out = compiled(*good)
        with pytest.raises((IndexError, RuntimeError)):  # the same compiled graph, then a bad call
            compiled(*bad)
        again = compiled(*good)
    torch.testing.assert_close(out, fn(*good))
    torch.testing.assert_close(again, fn(*good))
    assert_all_on_openvino(report, partitions=None, ops=ops)


def test_dynamic_sizes_and_a_cached_partition_keep_the_check(tmp_path):
    """The bound follows a dynamic vocabulary size, and a partition loaded from the model cache
    (no lowering then) still returns its checks."""
    options = {"model_caching": True, "cache_dir": str(tmp_path)}

    def fn(ids, table):
        return F.embedding(ids, table).sum(-1)

    ids, table, larger = torch.tensor([[1, 5]]), torch.randn(6, 3), torch.randn(7, 3)
    for _ in range(2):  # compile (cache miss), then again from the cache
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="fxvino", dynamic=True, options=options)
        with fxvino.collect_reports() as report, torch.no_grad():
            torch.testing.assert_close(compiled(ids, table), fn(ids, table))
            torch.testing.assert_close(compiled(ids, larger), fn(ids, larger))
            with pytest.raises(IndexError, match="index out of range"):
                compiled(torch.tensor([[1, 6]]), table)
        assert_all_on_openvino(report, partitions=None, ops=("aten.embedding.default",))
    assert fxcache.cache_for(tmp_path).stats.hits >= 1  # the second round ran from the cache


# Training graphs (``aot_autograd=True``) check their indices too: the forward's check raises
# before anything is saved for a backward. The weight is a leaf that trains, not a constant.
# one_hot and searchsorted have no gradient; embedding_bag trains in PyTorch (its training form
# has more outputs).
TRAINED = {
    name: case
    for name, case in CASES.items()
    if name not in ("one_hot", "searchsorted_sorter") and not name.startswith("embedding_bag")
}
TRAINED["embedding"] = (
    F.embedding,
    (torch.tensor([[1, 9], [0, 3]]), WEIGHT),
    (torch.tensor([[1, 12], [0, 3]]), WEIGHT),
    ("aten.embedding.default", "aten.embedding_dense_backward.default"),
)


def _leaves(args: tuple) -> tuple:
    """Fresh copies of ``args``, the floating ones leaves that take gradients."""
    return tuple(a.detach().clone().requires_grad_() if a.is_floating_point() else a.clone() for a in args)


@pytest.mark.parametrize("name", list(TRAINED))
def test_training_graphs_raise_for_an_index_out_of_range(name: str):
    fn, good, bad, ops = TRAINED[name]
    with pytest.raises((IndexError, RuntimeError)) as eager:
        fn(*_leaves(bad))
    expected = DECOMPOSED.get(name, re.escape(str(eager.value)))
    compiled = torch.compile(fn, backend="fxvino", options={"aot_autograd": True})
    ours, theirs = _leaves(good), _leaves(good)
    with fxvino.collect_reports() as report:
        out = compiled(*ours)
        out.sum().backward()
        with pytest.raises((IndexError, RuntimeError), match=expected):
            compiled(*_leaves(bad))
        again = compiled(*_leaves(good))
    reference = fn(*theirs)
    reference.sum().backward()
    torch.testing.assert_close(out, reference)
    torch.testing.assert_close(again, reference)
    for mine, eagers in zip(ours, theirs, strict=True):
        if eagers.grad is not None:
            torch.testing.assert_close(mine.grad, eagers.grad)
    assert {g.kind for g in report.graphs} >= {"forward", "backward"}, str(report)
    assert_all_on_openvino(report, partitions=None, ops=ops)


RANDOM: dict[str, tuple[Callable, tuple, tuple, str]] = {
    "bernoulli": (
        torch.bernoulli,
        (torch.tensor([0.0, 0.5, 1.0]),),
        (torch.tensor([0.5, 1.5, 0.0]),),
        "aten.rand.default",
    ),
    "normal_std": (
        torch.normal,
        (torch.zeros(3), torch.tensor([1.0, 0.0, 2.0])),
        (torch.zeros(3), torch.tensor([1.0, -1.0, 2.0])),
        "aten.normal.Tensor_Tensor",
    ),
}


@pytest.mark.parametrize("name", list(RANDOM))
def test_random_draws_with_arguments_eager_rejects_raise(name: str):
    """A probability past 1 or a negative deviation: eager raises; the plugin drew with them."""
    fn, good, bad, op = RANDOM[name]
    with pytest.raises(RuntimeError) as eager:
        fn(*bad)
    compiled = torch.compile(fn, backend="fxvino")
    with fxvino.collect_reports() as report:
        drawn = compiled(*good)
        with pytest.raises(RuntimeError, match=re.escape(str(eager.value).splitlines()[0][:40])):
            compiled(*bad)
    assert drawn.shape == fn(*good).shape
    if name == "bernoulli":  # certain where the probability is 0 or 1
        assert drawn[0] == 0 and drawn[2] == 1
    assert_all_on_openvino(report, partitions=None, ops=(op,))
