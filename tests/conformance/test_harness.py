"""The harness itself must be able to fail: fallbacks and wrong values are caught."""

from __future__ import annotations

import collections

import pytest
import torch

from fxvino.report import Fallback, GraphReport, Report

from . import harness


def _report(ov: dict[str, int], torch_ops: dict[str, int] = {}, fallbacks=(), nodes: int | None = None) -> Report:  # noqa: B006
    g = GraphReport("g0", "inference")
    g.ov_ops = collections.Counter(ov)
    g.torch_ops = collections.Counter(torch_ops)
    g.fallbacks = list(fallbacks)
    g.num_nodes = sum(ov.values()) + sum(torch_ops.values()) if nodes is None else nodes
    return Report([g])


def test_clean_report_passes() -> None:
    harness.check_report(_report({"aten.add.Tensor": 1}), allow_empty=False)


def test_missing_lowering_fails() -> None:
    fb = Fallback("x", "aten.addmv.default", "no OpenVINO lowering", "pytorch")
    with pytest.raises(harness.ConformanceFailure) as e:
        harness.check_report(_report({}, {"aten.addmv.default": 1}, [fb]), allow_empty=False)
    assert e.value.kind == "missing-lowering" and "aten.addmv.default" in str(e.value)


def test_partition_compile_error_fails_and_is_condensed() -> None:
    reason = (
        "OpenVINO compile failed: RuntimeError: Exception from src/inference/src/cpp/core.cpp:117:\n"
        "Exception from src/inference/src/dev/plugin.cpp:54:\nobject is not initialized\n"
    )
    fb = Fallback("g0.fused_0", "partition of 2 nodes", reason, "inductor")
    with pytest.raises(harness.ConformanceFailure) as e:
        harness.check_report(_report({}, {"aten.mm.default": 1}, [fb]), allow_empty=False)
    assert e.value.kind == "ov-compile-error"
    assert str(e.value).endswith("RuntimeError: object is not initialized")


def test_op_left_in_pytorch_without_fallback_fails() -> None:
    with pytest.raises(harness.ConformanceFailure) as e:
        harness.check_report(_report({"aten.add.Tensor": 1}, {"aten.view.default": 1}), allow_empty=False)
    assert e.value.kind == "ran-in-pytorch"


def test_empty_graph_fails_unless_allowed() -> None:
    with pytest.raises(harness.ConformanceFailure) as e:
        harness.check_report(_report({}), allow_empty=False)
    assert e.value.kind == "nothing-on-openvino"
    with pytest.raises(harness.ConformanceFailure):
        harness.check_report(Report([]), allow_empty=False)
    harness.check_report(_report({}), allow_empty=True)


def test_wrong_values_fail() -> None:
    harness.compare(
        torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]), values=True, atol=None, rtol=None
    )
    with pytest.raises(harness.ConformanceFailure) as e:
        harness.compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]), values=True, atol=None, rtol=None)
    assert e.value.kind == "wrong-result"
    with pytest.raises(harness.ConformanceFailure):  # dtype differs
        harness.compare(torch.tensor([1], dtype=torch.int32), torch.tensor([1]), values=True, atol=None, rtol=None)
    with pytest.raises(harness.ConformanceFailure):  # meta-only still checks shapes
        harness.compare(torch.zeros(2), torch.zeros(3), values=False, atol=None, rtol=None)


@torch.library.custom_op("fxvino_conformance::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_live_fallback_is_caught() -> None:
    """An op fxvino cannot know (a custom op) must fail the sample as a missing lowering."""
    sample = type("S", (), {"input": torch.randn(3), "args": (), "kwargs": {}})()
    with pytest.raises(harness.ConformanceFailure) as e:
        harness.run_sample(lambda x: torch.ops.fxvino_conformance.twice(x) + 1, sample)
    assert e.value.kind == "missing-lowering" and "fxvino_conformance.twice" in str(e.value)


def test_live_pass() -> None:
    sample = type("S", (), {"input": torch.randn(3), "args": (torch.randn(3),), "kwargs": {}})()
    result = harness.run_sample(torch.add, sample)
    assert result.ov_ops > 0 and "aten.add.Tensor" in result.aten_ops


def test_condense_keeps_the_specific_line() -> None:
    text = (
        "lowering gather (aten.gather.default) failed: RuntimeError: Check 'a == b' failed at x.hpp:45:\n"
        "While validating node 'opset6::GatherElements GatherElements_31883 (...)':\n"
        "data and indices rank must be equal. But instead got: 1 and 2\n"
    )
    assert harness.condense(text) == (
        "lowering gather (aten.gather.default) failed: RuntimeError: "
        "data and indices rank must be equal. But instead got: 1 and 2"
    )


def test_tie_tolerant_sort() -> None:
    cmp = harness.TieTolerantSort(lambda input, dim=-1, descending=False, stable=False: None, "values_indices")
    x = torch.tensor([1, 0, 1, 0])
    expected = torch.sort(x)
    other_ties = torch.return_types.sort((torch.tensor([0, 0, 1, 1]), torch.tensor([3, 1, 2, 0])))
    cmp(other_ties, expected, (x,), {})  # same values, tie order differs: fine
    with pytest.raises(harness.ConformanceFailure):  # stable=True pins the order
        cmp(other_ties, expected, (x,), {"stable": True})
    wrong = torch.return_types.sort((torch.tensor([0, 0, 1, 1]), torch.tensor([3, 0, 2, 1])))
    with pytest.raises(harness.ConformanceFailure):  # indices pick other values
        cmp(wrong, expected, (x,), {})
