"""Absolute values of 1-D tensors computed from weights or shapes equal eager's.

OpenVINO's CPU plugin dropped such an Abs when compiling (see ``fxvino.lowering.rank1_abs``).
The weights are above ``FOLD_MAX_BYTES``, so torch does not fold them and OpenVINO sees the Abs.
Expectations come from eager or numpy."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest
import torch

from fxvino.devices import core
from fxvino.lowering.rank1_abs import keep_rank1_abs
from fxvino.passes.freezing import FOLD_MAX_BYTES
from harness import WithWeight, assert_all_on_openvino, run_fxvino, sixteen_bit_numerics

# Each of these differed from eager (about half the elements kept their sign) without the pass.
CASES = {
    "shifted": lambda b, x: (b - 3).abs() + x,
    "negated": lambda b, x: (-b).abs() * x,
    "clamped": lambda b, x: torch.clamp(b, max=0.5).abs() + x,
}

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)


@pytest.mark.parametrize("dtype", [*sixteen_bit_numerics(*FLOATS), *(pytest.param(d, id=str(d)[6:]) for d in INTS)])
@pytest.mark.parametrize("case", list(CASES))
def test_abs_of_a_1d_weight_equals_eagers(case, dtype):
    torch.manual_seed(0)
    count = FOLD_MAX_BYTES // dtype.itemsize + 1024
    values = torch.randint(-100, 100, (count,))  # b - 3 is exact in every type: one rounding, as eager's
    model = WithWeight(values.to(dtype), CASES[case]).eval()
    x = (torch.randn(count) if dtype.is_floating_point else torch.randint(-5, 5, (count,))).to(dtype)
    out, report = run_fxvino(model, x)
    torch.testing.assert_close(out, model(x), rtol=0, atol=0)
    assert report.graphs[0].frozen_inputs == 1, "the weight was not frozen into the graph"
    assert_all_on_openvino(report)


def test_abs_of_shape_arithmetic_is_kept():
    """``|[3, 100] - shape(x)|``, compiled after the pass, as numpy computes it."""
    x = ops.parameter([-1, -1], ov.Type.f32)
    distance = ops.abs(ops.subtract(ops.constant(np.array([3, 100], np.int64)), ops.shape_of(x, "i64")))
    model = ov.Model([distance], [x])
    assert keep_rank1_abs(model) == 1
    got = core().compile_model(model, "CPU")([np.zeros((5, 7), np.float32)])[0]
    np.testing.assert_array_equal(got, [2, 93])


def test_abs_of_other_ranks_is_left_alone():
    for shape in ([], [4, 5]):
        x = ops.parameter(shape, ov.Type.f32)
        model = ov.Model([ops.abs(x)], [x])
        assert keep_rank1_abs(model) == 0
        assert [op.get_type_name() for op in model.get_ordered_ops()] == ["Parameter", "Abs", "Result"]
