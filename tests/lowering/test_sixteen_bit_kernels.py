"""16-bit ops whose ATen kernels compute in f32 where fxvino rounded to 16 bits, or the other way
round, equal eager's bit for bit.

ATen's 16-bit ``mul`` and ``div`` kernels take a one-element second operand (a Python number, a
0-d tensor of another dtype) by its own value in f32 and round once; the tensor kernels round
the quotient to 16 bits before ``trunc``; ``leaky_relu`` multiplies by its slope in f32,
``rsqrt`` rounds ``1 / sqrt(x)`` once, and ``cumsum`` accumulates 16-bit types in plain f32.
fxvino had rounded the scalars and the root to 16 bits and summed in compensated f32 (as
torch sums f32 in double): on a Zen 5, f16 ``x * 0.1`` was 1,418 of 4,096 values off, bf16 872,
f16 ``x / 0.1`` 1,483, truncating division by a tensor 494 (f16) and 1,199 (bf16), f16
``leaky_relu`` 630, bf16 ``rsqrt`` 1,158, f16 ``cumsum`` 23. Expectations come from eager on
the machine.
"""

from __future__ import annotations

import pytest
import torch

from harness import assert_all_on_openvino, cpu_computes_bf16, run_fxvino

CASES = {
    "times_a_number": lambda x, y: x * 0.1,
    "times_a_number_it_holds": lambda x, y: x * 0.375,
    "times_a_0d_float32": lambda x, y: x * torch.tensor(0.1),
    "0d_float32_times": lambda x, y: torch.tensor(0.1) * x,  # eager rounds 0.1 to 16 bits here
    "over_a_number": lambda x, y: x / 0.1,
    "over_a_0d_float64": lambda x, y: x / torch.tensor(0.3, dtype=torch.float64),
    "number_over_tensor": lambda x, y: torch.tensor(0.1) / y,
    "trunc_over_a_tensor": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    "trunc_over_a_number": lambda x, y: torch.div(x, 0.3, rounding_mode="trunc"),
    "trunc_over_a_number_it_holds": lambda x, y: torch.div(x, 3, rounding_mode="trunc"),
    "trunc_over_one_element": lambda x, y: torch.div(x, y[:1], rounding_mode="trunc"),
    "leaky_relu": lambda x, y: torch.nn.functional.leaky_relu(x, 0.01),
    "leaky_relu_slope_it_holds": lambda x, y: torch.nn.functional.leaky_relu(x, 0.25),
    "rsqrt": lambda x, y: x.abs().rsqrt(),
    "cumsum": lambda x, y: x.cumsum(0),
    "cumsum_to_float32": lambda x, y: x.cumsum(0, dtype=torch.float32),
}
# With bf16 kernels (AVX512-BF16, AMX) the plugin computes these with the bf16 constant, since
# the casts to f32 and back cost (GPT-2 bf16 4-12%): within a bf16 step of eager's there.
BF16_CONSTANT_WITH_BF16_KERNELS = {"times_a_number", "times_a_0d_float32", "leaky_relu"}
PARAMS = [pytest.param(c, d, id=f"{c}-{str(d)[6:]}") for c in CASES for d in (torch.float16, torch.bfloat16)]


@pytest.mark.numerics
@pytest.mark.parametrize(("case", "dtype"), PARAMS)
def test_a_16bit_op_equals_eagers_kernel(case, dtype):
    fn = CASES[case]
    torch.manual_seed(0)
    x, y = (torch.randn(4096) * 100).to(dtype), torch.randn(4096).to(dtype)
    out, report = run_fxvino(fn, x, y)
    assert out.dtype == fn(x, y).dtype
    step = 2**-7 if dtype == torch.bfloat16 and case in BF16_CONSTANT_WITH_BF16_KERNELS and cpu_computes_bf16() else 0.0
    torch.testing.assert_close(out, fn(x, y), rtol=step, atol=0.0, equal_nan=True)
    assert_all_on_openvino(report)
