"""Chains of arithmetic with constants equal eager's where the plugin's reassociation would not.

``lowering/constant_chains.py`` keeps ``(x + a) + b`` and ``(x * a) * b`` from being fused where
the fused constant cancels or leaves the float range. Each case below differed from eager before
it on every CPU class; expectations come from eager on the machine."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest
import torch

from fxvino.lowering.constant_chains import keep_constant_chains
from harness import assert_all_on_openvino, run_fxvino

MAGIC = 1.5 * 2**23  # x + MAGIC - MAGIC rounds an f32 to an integer
CASES = {
    "round_by_magic": (lambda x: (x * 1000 + MAGIC) - MAGIC, [torch.float32]),
    "add_then_subtract_one": (lambda x: (x * 1e-7 + 1) - 1, [torch.float32]),
    "three_addends_that_cancel": (lambda x: x * 1e-7 + 1 + 2 - 3, [torch.float32]),
    "constant_minus_x": (lambda x: (1 - x * 1e-7) - 1, [torch.float32]),
    "add_after_a_cancel": (lambda x: (x * 1e-7 + 1) - 1 + 5, [torch.float32]),
    "sum_past_the_range": (lambda x: (x + 3e38) + 3e38, [torch.float32]),
    "product_past_the_range": (lambda x: x * 1e30 * 1e30, [torch.float32, torch.bfloat16]),
    "quotient_below_the_range": (lambda x: x / 1e30 / 1e30, [torch.float32, torch.bfloat16]),
}
PARAMS = [(case, dtype) for case, (_, dtypes) in CASES.items() for dtype in dtypes]
# The scale of a case's input, where its constants matter.
SCALES = {"sum_past_the_range": 1e38, "product_past_the_range": 1e-30, "quotient_below_the_range": 1e30}


def _input(case: str, dtype: torch.dtype) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(4096) * SCALES.get(case, 4.0)
    x[:64] = 0.0  # 0 * inf is NaN where eager's 0 * 1e30 * 1e30 is 0
    x[64:128] = -3.0 * SCALES.get(case, 1.0)  # (x + 3e38) + 3e38 is 3e38 there, inf fused
    return x.to(dtype)


@pytest.mark.numerics
@pytest.mark.parametrize(("case", "dtype"), PARAMS, ids=[f"{c}-{str(d)[6:]}" for c, d in PARAMS])
def test_a_chain_of_constants_gives_eagers_result(case, dtype):
    fn = CASES[case][0]
    x = _input(case, dtype)
    out, report = run_fxvino(fn, x)
    # The cases' failures were NaN for 0, infinities for finite values and 0 for 1e-30, or off by
    # up to 0.04.
    tolerance = 0.0 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out, fn(x), equal_nan=True, rtol=tolerance, atol=0.0)
    assert_all_on_openvino(report)


def _chain(first: str, a: float, second: str, b: float, readers: int = 1) -> ov.Model:
    x = ops.parameter([4], ov.Type.f32)
    inner = getattr(ops, first)(x, ops.constant(np.float32(a)))
    outer = getattr(ops, second)(inner, ops.constant(np.float32(b)))
    results = [outer] + [ops.relu(inner)] * (readers - 1)
    return ov.Model(results, [x])


@pytest.mark.parametrize(
    ("first", "a", "second", "b", "kept"),
    [
        ("add", 1.0, "subtract", 1.0, 1),  # cancels
        ("subtract", -1.0, "add", -0.75, 1),  # x + 1 - 0.75: cancels three quarters
        ("add", 1.0, "add", 2.0, 0),  # a rounding at most
        ("add", 1.0, "subtract", 0.25, 0),
        ("multiply", 1e30, "multiply", 1e30, 1),  # overflows
        ("divide", 1e30, "divide", 1e30, 1),  # underflows
        ("multiply", 3.0, "divide", 7.0, 0),
        ("multiply", 1e30, "add", 1e30, 0),  # not a chain the plugin fuses
    ],
    ids=lambda v: str(v),
)
def test_only_chains_beyond_a_rounding_get_a_run_time_constant(first, a, second, b, kept):
    assert keep_constant_chains(_chain(first, a, second, b)) == kept


def test_every_op_of_a_sum_that_cancels_is_kept_and_a_product_only_where_it_leaves_the_range():
    x = ops.parameter([4], ov.Type.f32)
    one = ops.constant(np.float32(1.0))
    total = ops.subtract(ops.add(ops.add(ops.add(x, one), one), one), ops.constant(np.float32(3.0)))
    product = ops.multiply(
        ops.multiply(ops.multiply(x, ops.constant(np.float32(1e20))), ops.constant(np.float32(1e20))),
        ops.constant(np.float32(1e-20)),
    )
    assert keep_constant_chains(ov.Model([total, product], [x])) == 3 + 1


def test_a_first_op_with_other_readers_is_not_fused_so_it_is_left_alone():
    assert keep_constant_chains(_chain("add", 1.0, "subtract", 1.0, readers=2)) == 0
