"""int64 values beyond int32 give eager's results (lowering/eager_checks.py, runtime/int32_range.py).

OpenVINO's CPU plugin computes int64 as int32: an input past 2**31 lost its high half, a constant
or a cast saturated, a sum or product wrapped, all silently (``x * (2**33 + 5)`` gave 2**31 - 1).
Each case runs with values whose results fit int32 (on OpenVINO, no fallback) and with values
whose results do not (eager's exact values, the call run eagerly and reported), then small
values again on OpenVINO.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fxvino
from harness import assert_all_on_openvino

BIG = 2**40 + 7
# name -> (function, arguments with results inside int32, arguments with results outside, an op
# that must run on OpenVINO)
CASES: dict[str, tuple[Callable, tuple, tuple, str]] = {
    "input_add": (lambda x: x + 1, (torch.tensor([5, -7]),), (torch.tensor([BIG, -7]),), "aten.add.Tensor"),
    "input_floor_divide": (
        lambda x, y: x // y,
        (torch.tensor([9, -9]), torch.tensor([2, 4])),
        (torch.tensor([BIG, -BIG]), torch.tensor([3, 1000])),
        "aten.div.Tensor_mode",
    ),
    "input_gathered": (  # no arithmetic at all: the value itself was truncated
        lambda table, i: table[i],
        (torch.tensor([3, 2**31 - 1, -(2**31)]), torch.tensor([1, 2])),
        (torch.tensor([3, BIG, 5]), torch.tensor([1, 2])),
        "aten.index.Tensor",
    ),
    "mul_constant": (lambda x: x * (2**33 + 5), (torch.tensor([0, 0]),), (torch.tensor([1, -2]),), "aten.mul.Tensor"),
    "hash_then_modulo": (  # a hashing trick: the product leaves int32, the result does not
        lambda x: (x * 2654435761) % 1000,
        (torch.tensor([0]),),
        (torch.tensor([1, 2, 3]),),
        "aten.remainder.Scalar",
    ),
    "mul": (
        lambda x, y: x * y,
        (torch.tensor([46340, -3]), torch.tensor([46340, 5])),
        (torch.tensor([46341, -3]), torch.tensor([46341, 5])),
        "aten.mul.Tensor",
    ),
    "sub": (
        lambda x, y: x - y,
        (torch.tensor([2**30]), torch.tensor([-(2**30) + 8192])),  # (the checks keep a margin)
        (torch.tensor([2**30]), torch.tensor([-(2**30)])),
        "aten.sub.Tensor",
    ),
    "float_to_int64": (
        lambda x: (x * 1e6).long(),
        (torch.tensor([2.5, -2000.0]),),
        (torch.tensor([2.5, -3000.0]),),
        "aten._to_copy.default",
    ),
    "sum": (
        lambda x: x.sum(),
        (torch.tensor([2**30, 2**29]),),
        (torch.tensor([2**30, 2**30]),),
        "aten.sum.dim_IntList",
    ),
    "cumsum": (
        lambda x: x.cumsum(0),
        (torch.tensor([2**29, 2**29, -(2**29)]),),
        (torch.tensor([2**30, 2**30, -(2**30)]),),
        "aten.cumsum.default",
    ),
    "prod": (lambda x: x.prod(), (torch.tensor([2**15, 2**15]),), (torch.tensor([2**16, 2**16]),), "aten.prod.default"),
    "cumprod": (  # the product ends at 0, a partial product does not
        lambda x: x.cumprod(0),
        (torch.tensor([2**10, 2**10, 0]),),
        (torch.tensor([2**20, 2**20, 0]),),
        "aten.cumprod.default",
    ),
    "pow": (lambda x: x**3, (torch.tensor([1290, -3]),), (torch.tensor([1291, -3]),), "aten.pow.Tensor_Scalar"),
    "left_shift": (
        lambda x, n: x << n,
        (torch.tensor([1, 3]), torch.tensor([30, 64])),
        (torch.tensor([1, 3]), torch.tensor([31, 64])),
        "aten.__lshift__.Tensor",
    ),
    "neg": (lambda x: -x, (torch.tensor([-(2**30), 7]),), (torch.tensor([-(2**31), 7]),), "aten.neg.default"),
    "scatter_add": (
        lambda x, s: x.scatter_add(0, torch.tensor([1, 1]), s),
        (torch.tensor([0, 5, -3]), torch.tensor([2**29, 2**29])),
        (torch.tensor([0, 5, -3]), torch.tensor([2**30, 2**30])),
        "aten.scatter_add.default",
    ),
    "index_put_accumulate": (
        lambda x, v: x.index_put((torch.tensor([2, 2]),), v, accumulate=True),
        (torch.tensor([0, 5, -3]), torch.tensor([2**29, 2**29])),
        (torch.tensor([0, 5, -3]), torch.tensor([2**30, 2**30])),
        "aten.index_put.default",
    ),
}


def _same(got, want) -> None:
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("name", list(CASES))
def test_int64_results_beyond_int32_are_eagers(name: str):
    fn, small, big, op = CASES[name]
    compiled = torch.compile(fn, backend="fxvino")
    with fxvino.collect_reports() as report:
        _same(compiled(*small), fn(*small))
        assert_all_on_openvino(report, partitions=None, ops=(op,))
        _same(compiled(*big), fn(*big))
        _same(compiled(*small), fn(*small))
        _same(compiled(*big), fn(*big))
    assert [f.ran_on for f in report.fallbacks] == ["eager"], str(report)  # the big calls, reported once
    assert "int32" in report.fallbacks[0].reason


def test_a_frozen_int64_constant_beyond_int32_is_left_to_pytorch():
    """A buffer's values are known while lowering: its readers run in PyTorch, the rest on OpenVINO."""

    class Hashes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.tensor([BIG, 5, -(2**35)]))

        def forward(self, i, x):
            return self.table[i], torch.relu(x) + 1

    model, args = Hashes(), (torch.tensor([0, 2, 1]), torch.randn(4))
    with fxvino.collect_reports() as report, torch.no_grad():
        got = torch.compile(model, backend="fxvino")(*args)
    for g, w in zip(got, model(*args), strict=True):
        _same(g, w)
    assert report.fallbacks and all("int32" in f.reason for f in report.fallbacks), str(report)
    assert report.ov_ops["aten.relu.default"] == 1, str(report)


def test_a_constant_beyond_int32_made_in_the_graph_gives_eagers_values():
    def fn(x):
        return torch.where(x > 0, torch.full((2,), 2**40), x)

    x = torch.tensor([3, -1])
    with fxvino.collect_reports() as report:
        _same(torch.compile(fn, backend="fxvino")(x), fn(x))
    assert report.fallbacks and "int32" in report.fallbacks[0].reason, str(report)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x == 2**40,
        lambda x: x < 2**40,
        lambda x: x % 2**40,
        lambda x: x & (2**40 + 3),
        lambda x: x.scatter(0, torch.tensor([1]), 2**40),
        lambda x: x.masked_fill(x < 0, -(2**40)),
    ],
    ids=["eq", "lt", "remainder", "bitwise_and", "scatter", "masked_fill"],
)
def test_a_python_int_beyond_int32_beside_int64_tensors_runs_in_pytorch(fn: Callable):
    """The plugin saturated it (``x == 2**40`` was True for ``x = 2**31 - 1``); its op now runs in
    PyTorch, reported, and the rest of the graph on OpenVINO."""

    def graph(x):
        return fn(x), x.neg()

    x = torch.tensor([2**31 - 1, 5, -3])  # (inside int32: the input check lets it through)
    with fxvino.collect_reports() as report:
        got = torch.compile(graph, backend="fxvino")(x)
    for g, w in zip(got, graph(x), strict=True):
        _same(g, w)
    assert report.fallbacks and all("int32" in f.reason for f in report.fallbacks), str(report)
    assert report.ov_ops["aten.neg.default"] == 1, str(report)
