"""Float division equals eager's bit for bit (``lowering/exact_division.py``).

OpenVINO rewrote ``x / y`` as ``x * y**-1`` while compiling, which rounds twice: every case
below but the power-of-two divisors differed from eager in hundreds to thousands of 4,096
values, on every CPU class (f32 ``x / y``: 1,107; ``x / 7``: 2,210; f16 ``x / 3``: 1,376).
Expectations come from eager on the machine.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest
import torch

import fxvino
from fxvino.lowering.exact_division import keep_divisions_exact, kept_exact
from harness import assert_all_on_openvino, run_fxvino

FLOATS = [torch.float32, torch.float16, torch.bfloat16]
# Chains of 16-bit ops are computed in f32 and rounded once (docs: Guarantees), so they are
# eager's bit for bit only in f32: ``10 / y`` is eager's ``y.reciprocal() * 10``. 16-bit
# truncating division: test_sixteen_bit_kernels.py.
CASES = {
    "tensor_by_tensor": (lambda x, y: x / y, FLOATS),
    "by_a_constant": (lambda x, y: x / 7, FLOATS),
    "by_a_power_of_two": (lambda x, y: x / 8, FLOATS),
    "broadcast_divisor": (lambda x, y: x.view(64, 64) / y[:64].view(64, 1), FLOATS),
    "scaled_then_divided": (lambda x, y: (x * 3) / 7, [torch.float32]),
    "constant_by_tensor": (lambda x, y: 10 / y, [torch.float32]),
    "div_with_trunc": (lambda x, y: torch.div(x, y, rounding_mode="trunc"), [torch.float32]),
}
PARAMS = [pytest.param(c, d, id=f"{c}-{str(d)[6:]}") for c, (_, dtypes) in CASES.items() for d in dtypes]


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return (torch.randn(4096) * 100).to(dtype), torch.randn(4096).to(dtype)  # trunc's quotients: -1e5..1e5


@pytest.mark.numerics
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize(("case", "dtype"), PARAMS)
def test_a_division_equals_eagers_bit_for_bit(case, dtype, dynamic):
    fn = CASES[case][0]
    x, y = _inputs(dtype)
    out, report = run_fxvino(fn, x, y, dynamic=dynamic)
    torch.testing.assert_close(out, fn(x, y), rtol=0.0, atol=0.0, equal_nan=True)
    assert_all_on_openvino(report)


@pytest.mark.numerics
def test_the_gradients_of_a_division_equal_eagers():
    """The backward divides too (``grad / y`` and ``-grad * (x / y) / y``; a sum's grad is ones)."""
    x, y = _inputs(torch.float32)
    leaves = [x.clone().requires_grad_(), y.clone().requires_grad_()]
    eager = [x.clone().requires_grad_(), y.clone().requires_grad_()]
    compiled = torch.compile(lambda a, b: (a / b).sum(), backend="fxvino", options={"aot_autograd": True})
    with fxvino.collect_reports() as report:
        compiled(*leaves).backward()
    (eager[0] / eager[1]).sum().backward()
    for got, want in zip(leaves, eager, strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=0.0, atol=0.0)
    assert not report.fallbacks and not report.torch_ops, str(report)


def _division(divisor: ov.Node, dtype: ov.Type = ov.Type.f32) -> ov.Model:
    x = ops.parameter([4], dtype)
    return ov.Model([ops.divide(x, divisor)], [x])


@pytest.mark.parametrize(
    ("divisor", "marked"),
    [
        (np.float32(7.0), 1),
        (np.float32(0.1), 1),
        (np.float32(8.0), 0),  # the reciprocal is exact: left a multiply the plugin can fuse
        (np.float32(-0.25), 0),
        (np.array([2.0, 4.0, 0.5, 1.0], np.float32), 0),
        (np.array([2.0, 3.0, 0.5, 1.0], np.float32), 1),
        (np.float32(2.0**-127), 0),  # a subnormal divisor, but its reciprocal 2**127 is normal
        (np.float32(2.0**127), 1),  # the plugin would flush its reciprocal 2**-127 to 0
        (np.float32(0.0), 1),  # 1 / 0 is inf, not a power of two
    ],
    ids=str,
)
def test_only_divisors_without_an_exact_reciprocal_are_kept_divisions(divisor, marked):
    model = _division(ops.constant(divisor))
    assert keep_divisions_exact(model) == marked
    assert kept_exact(next(n for n in model.get_ordered_ops() if n.get_type_name() == "Divide")) == bool(marked)


_AXIS = ops.constant(np.array([1], np.int64))
_W = np.random.default_rng(1).uniform(0.1, 1.0, (6, 6, 3, 3)).astype(np.float32)
_M = np.random.default_rng(2).uniform(0.1, 1.0, (5, 5)).astype(np.float32)


def _shape_count(x):  # var's N - 0, from the static shape the plugin folds
    n = ops.gather(ops.shape_of(x, "i64"), _AXIS, ops.constant(np.int64(0)))
    return ops.convert(ops.reduce_prod(n, ops.constant(np.int64(0)), False), ov.Type.f32)


def _conv(x):
    return ops.convolution(x, ops.constant(_W), [1, 1], [1, 1], [1, 1], [1, 1])


def _f32(v: float):
    return ops.constant(np.float32(v))


def _sum(x):
    return ops.reduce_sum(x, _AXIS, False)


def _product(x):
    return ops.matmul(x, ops.constant(_M), False, False)


def _rstd(x):  # layer norm's saved 1 / sqrt(mean + eps)
    return ops.divide(_f32(1), ops.sqrt(ops.add(ops.reduce_mean(x, _AXIS, True), _f32(1e-5))))


def _conv_reference(x):
    return (2 / torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(_W), padding=1)).numpy()


# (model of x, numpy of x): a Divide by or of a constant after a kernel the plugin fuses it into.
FUSED = {
    "sum_over_6": (lambda x: ops.divide(_sum(x), _f32(6)), lambda x: x.sum(1) / 6),
    "sum_over_its_count": (lambda x: ops.divide(_sum(x), _shape_count(x)), lambda x: x.sum(1) / 6),
    "rstd": (_rstd, lambda x: 1 / np.sqrt(x.mean(1, keepdims=True) + 1e-5)),
    "two_over_a_convolution": (lambda x: ops.divide(_f32(2), _conv(x)), _conv_reference),
    "two_over_a_product": (lambda x: ops.divide(_f32(2), _product(x)), lambda x: 2 / (x @ _M)),
}


@pytest.mark.parametrize("case", FUSED)
def test_a_division_the_plugin_would_fuse_into_a_kernel_stays_its_rewrite(case):
    """Kept a Divide, the plugin's fused kernel computed wrong values (``x.sum(1) / 6`` up to 0.9
    off, ``rstd`` its reciprocal), so those are left to the rewrite."""
    build, expected = FUSED[case]
    x = ops.parameter([2, 6, 5, 5], ov.Type.f32)
    model = ov.Model([build(x)], [x])
    assert keep_divisions_exact(model) == 0
    data = np.random.default_rng(0).uniform(0.5, 2.0, (2, 6, 5, 5)).astype(np.float32)
    got = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})([data])[0]
    np.testing.assert_allclose(got, expected(data), rtol=1e-5)


@pytest.mark.numerics
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_reductions_divided_equal_eagers(dim, dynamic):
    """``sum / n`` and ``var`` over the middle and outer axes: the plugin's fused kernel got
    them wrong when the division was kept; they keep the rewrite, within an f32 step."""
    x = torch.randn(4, 6, 5)
    fn = lambda x: (x.sum(dim) / 6, torch.var_mean(x, dim=dim, correction=0), x.pow(2).mean(dim).rsqrt())  # noqa: E731
    out, report = run_fxvino(fn, x, dynamic=dynamic)
    torch.testing.assert_close(out, fn(x))
    assert_all_on_openvino(report)


def test_integer_divisions_are_left_alone():
    """OpenVINO does not rewrite them; fxvino corrects the plugin's integer quotients itself."""
    x, y = ops.parameter([4], ov.Type.i32), ops.parameter([4], ov.Type.i32)
    assert keep_divisions_exact(ov.Model([ops.divide(x, y)], [x, y])) == 0
