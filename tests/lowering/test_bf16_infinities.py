"""Infinities of bf16 constants equal eager's on every CPU class.

Without bf16 kernels the CPU plugin clamps a bf16 constant's inf to FLT_MAX as it converts the
graph to f32 (see ``fxvino.lowering.bf16_infinities``); these cases each differed from eager as
an AVX2-only CPU before the guard, and run there under ``make test-avx2``. Expectations come from
eager on the machine."""

from __future__ import annotations

import openvino as ov
import openvino.opset16 as ops
import pytest
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.bf16_infinities import keep_bf16_infinities
from fxvino.passes.freezing import FOLD_MAX_BYTES
from harness import WithWeight, assert_all_on_openvino, run_fxvino

INF = float("inf")
# (fn of weight and input, large weight): a weight above FOLD_MAX_BYTES reaches OpenVINO as a
# constant, and so do the scalars the lowerings make of -inf fills.
CASES = {
    "inf_minus_inf": lambda w, x: w + x,
    "exp_of_weight": lambda w, x: torch.exp(w) * x,
    "log_softmax": lambda w, x: torch.log_softmax(w, dim=-1) * x,
    "masked_fill": lambda w, x: torch.masked_fill(x, w > 1, -INF) + torch.flip(x, [-1]),
}


def _weight() -> torch.Tensor:
    torch.manual_seed(0)
    w = torch.randn(FOLD_MAX_BYTES // 2048 + 16, 1024)
    w.view(-1)[torch.randperm(w.numel())[:2000]] = torch.tensor([INF, -INF]).repeat(1000)
    return w.to(torch.bfloat16)


@pytest.mark.numerics
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_bf16_weights_infinities_reach_the_arithmetic(case, dynamic):
    weight = _weight()
    model = WithWeight(weight, CASES[case]).eval()
    # With dynamic=True, x's dims that meet the weight's are specialized; a batch of 2 stays free.
    x = torch.randn((2, *weight.shape) if dynamic else weight.shape).to(torch.bfloat16)
    x.view(-1)[:4000:2] = INF  # inf + -inf must be NaN
    x.view(-1)[1:4000:2] = 0.25  # a finite product of FLT_MAX would show
    out, report = run_fxvino(model, x, dynamic=dynamic)
    torch.testing.assert_close(out, model(x), equal_nan=True, rtol=3e-2, atol=3e-2)
    assert report.graphs[0].frozen_inputs == 1, "the weight was not frozen into the graph"
    assert_all_on_openvino(report)


def _model(weight: torch.Tensor, dynamic: bool = False) -> ov.Model:
    x = ops.parameter([-1] if dynamic else [4], ov.Type.f32)
    total = ops.add(h.owned_constant(weight), ops.convert(x, ov.Type.bf16))
    return ov.Model([ops.convert(total, ov.Type.f32)], [x])


def test_only_constants_holding_inf_are_guarded_and_only_where_bf16_is_widened():
    holding = torch.tensor([1.0, -INF, 2.0, INF], dtype=torch.bfloat16)
    finite = torch.tensor([1.0, -3.0, 2.0, 4.0], dtype=torch.bfloat16)
    assert keep_bf16_infinities(_model(holding), widened=[torch.bfloat16]) == 1
    assert keep_bf16_infinities(_model(holding, dynamic=True), widened=[torch.bfloat16]) == 1
    assert keep_bf16_infinities(_model(holding), widened=[torch.float16]) == 0
    assert keep_bf16_infinities(_model(finite), widened=[torch.bfloat16]) == 0


@pytest.mark.numerics
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_the_guard_gives_back_the_infinities_the_plugin_clamps(dynamic):
    model = _model(torch.tensor([1.0, -INF, 2.0, INF], dtype=torch.bfloat16), dynamic)
    keep_bf16_infinities(model, widened=[torch.bfloat16])
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = torch.from_numpy(compiled([torch.tensor([INF, INF, -1.0, -INF]).numpy()])[0])
    expected = torch.tensor([INF, float("nan"), 1.0, float("nan")])
    torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0)
