"""NaN and infinity tests of weights are folded when compiled, not run on every call.

OpenVINO does not fold IsNaN, IsInf or IsFinite; fxvino folds constants in torch only up to
``FOLD_MAX_BYTES``, so these weights are just above it. Expectations come from eager."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest
import torch

from fxvino.devices import core
from fxvino.lowering import helpers as h
from fxvino.lowering.constant_predicates import fold_constant_predicates
from fxvino.lowering.rank1_abs import keep_rank1_abs
from fxvino.passes.freezing import FOLD_MAX_BYTES
from fxvino.tools.exec_graph import constant_work
from harness import WithWeight, assert_all_on_openvino, run_fxvino, sixteen_bit_numerics


def _weight(dtype: torch.dtype) -> torch.Tensor:
    """Random values with NaN and both infinities planted; one byte per element above the
    folding limit, so even a bool test of it is left to OpenVINO."""
    torch.manual_seed(0)
    w = torch.randn(FOLD_MAX_BYTES // 1024 + 16, 1024)
    w.view(-1)[torch.randperm(w.numel())[:3000]] = torch.tensor([float("nan"), float("inf"), float("-inf")]).repeat(
        1000
    )
    return w.to(dtype)


# Lowerings that test for NaN or infinities with IsNaN, IsInf or IsFinite (each of these failed
# with the pass disabled: the test was left in the executable graph over the weight), and
# whether eager's result is exact (else within a few of the type's steps: exp's and
# log_softmax's arithmetic, in f32 inside a graph, is the subject of their OpInfo tests).
CASES = {
    "isinf": (lambda w, x: torch.where(torch.isinf(w), x, w), True),
    "sign": (lambda w, x: torch.sign(w) * x, True),
    "fmax": (lambda w, x: torch.fmax(w, x), True),
    "remainder": (lambda w, x: torch.remainder(w, 3.0) * x, True),
    "exp": (lambda w, x: torch.exp(w) * x, False),
    "log_softmax": (lambda w, x: torch.log_softmax(w, dim=-1) * x, False),
}
STEPS = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(torch.float32, torch.float16, torch.bfloat16))
@pytest.mark.parametrize("case", list(CASES))
def test_a_weights_nan_and_infinity_tests_are_folded(case, dtype):
    weight = _weight(dtype)
    fn, exact = CASES[case]

    model = WithWeight(weight, fn).eval()
    x = torch.randn(1024).to(dtype)
    out, report = run_fxvino(model, x)
    tolerance = 0.0 if exact else STEPS[dtype]
    torch.testing.assert_close(out, model(x), equal_nan=True, rtol=tolerance, atol=tolerance)
    assert report.graphs[0].frozen_inputs == 1, "the weight was not frozen into the graph"
    assert_all_on_openvino(report)
    assert constant_work(report.graphs[0].ov_partitions[0].compiled) == []


def _compiled(predicate, value: np.ndarray | None) -> tuple[ov.CompiledModel, ov.Model, int]:
    """``predicate`` of a constant ``value`` (of a Parameter when None) selecting between it and
    an input, compiled after the pass (and the rank-1 Abs guard, which follows it when lowering,
    since its rewrites emit Abs); and how many tests the pass rewrote."""
    x = ops.parameter([8], ov.Type.f32)
    tested = x.output(0) if value is None else h.owned_constant(torch.from_numpy(value))
    model = ov.Model([ops.select(predicate(tested), ops.negative(x), x)], [x])
    rewritten = fold_constant_predicates(model)
    keep_rank1_abs(model)
    return core().compile_model(model, "CPU"), model, rewritten


PREDICATES = {
    "IsNaN": (ops.is_nan, np.isnan),
    "IsInf": (ops.is_inf, np.isinf),
    "IsInf positive": (lambda v: ops.is_inf(v, {"detect_negative": False}), np.isposinf),
    "IsInf negative": (lambda v: ops.is_inf(v, {"detect_positive": False}), np.isneginf),
    "IsFinite": (ops.is_finite, np.isfinite),
}


@pytest.mark.parametrize("name", list(PREDICATES))
def test_the_rewritten_tests_give_the_plugins_results(name):
    """Each rewrite on a constant holding every special value, against numpy's predicate; the
    same test of a run-time value keeps the plugin's op."""
    predicate, expected = PREDICATES[name]
    value = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -3e38, 1e-40], dtype=np.float32)
    compiled, model, rewritten = _compiled(predicate, value)
    assert rewritten == 1
    assert name.split()[0] not in {op.get_type_name() for op in model.get_ordered_ops()}
    ones = np.ones(8, dtype=np.float32)
    np.testing.assert_array_equal(compiled(ones)[0], np.where(expected(value), -1.0, 1.0))
    assert constant_work(compiled) == []

    _, model, rewritten = _compiled(predicate, None)
    assert rewritten == 0
    assert name.split()[0] in {op.get_type_name() for op in model.get_ordered_ops()}


def test_an_isinf_detecting_no_sign_is_left_alone():
    _, model, rewritten = _compiled(
        lambda v: ops.is_inf(v, {"detect_negative": False, "detect_positive": False}), np.zeros(8, np.float32)
    )
    assert rewritten == 0
    assert "IsInf" in {op.get_type_name() for op in model.get_ordered_ops()}


def test_a_test_reading_a_rewritten_one_is_rewritten_too():
    """The rewritten comparisons are constants' values as well (cummax's scan chains its NaN
    tests: 2 of its 20 were rewritten before the walk knew that)."""
    value = np.array([np.nan, np.inf, -np.inf, 0.0, 1.0, -2.0, 3e38, 5.0], dtype=np.float32)

    def chained(v):
        cleaned = ops.select(ops.is_nan(v), ops.constant(np.float32(np.inf)), v)
        return ops.is_inf(cleaned)

    compiled, model, rewritten = _compiled(chained, value)
    assert rewritten == 2
    ones = np.ones(8, dtype=np.float32)
    cleaned = np.where(np.isnan(value), np.inf, value)
    np.testing.assert_array_equal(compiled(ones)[0], np.where(np.isinf(cleaned), -1.0, 1.0))
    assert constant_work(compiled) == []
