"""Integer division by zero raises eager's error under fxvino too (lowering/eager_checks.py).

The CPU plugin's integer quotients and remainders returned a number for a zero divisor (``-3 //
0`` gave 0, ``-3 % 0`` gave -3) where eager raises ``ZeroDivisionError``. Each case runs with a
zero divisor (eager's error must come back) and with nonzero ones, before and after the bad call
(eager's results, on OpenVINO, no fallback). Every 8-bit pair is checked too: uint8's and int8's
quotients and remainders were off where an intermediate went below zero or past 127.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fxvino
from harness import assert_all_on_openvino

# name -> (function, the op that must run on OpenVINO)
CASES: dict[str, tuple[Callable, str]] = {
    "floor_divide": (torch.floor_divide, "aten.div.Tensor_mode"),  # (PyTorch decomposes it)
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), "aten.div.Tensor_mode"),
    "div_trunc": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), "aten.div.Tensor_mode"),
    "remainder": (torch.remainder, "aten.remainder.Tensor"),
    "fmod": (torch.fmod, "aten.fmod.Tensor"),
}
DTYPES = (torch.int64, torch.int32, torch.int8, torch.uint8)


def _operands(dtype: torch.dtype, zero: bool) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.tensor([[7, 100], [9, 5]], dtype=dtype)
    a = a if dtype == torch.uint8 else a * torch.tensor([1, -1], dtype=dtype)
    b = torch.tensor([[2, 0 if zero else 3], [4, 1]], dtype=dtype)
    return a, b


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_a_zero_integer_divisor_raises_as_eager_does(name: str, dtype: torch.dtype):
    fn, op = CASES[name]
    good, bad = _operands(dtype, False), _operands(dtype, True)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):  # the case is a bad one
        fn(*bad)
    compiled = torch.compile(fn, backend="fxvino")
    with fxvino.collect_reports() as report:
        out = compiled(*good)
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            compiled(*bad)
        again = compiled(*good)
    torch.testing.assert_close(out, fn(*good), rtol=0, atol=0)
    torch.testing.assert_close(again, fn(*good), rtol=0, atol=0)
    assert_all_on_openvino(report, partitions=None, ops=(op,))


def test_a_zero_divisor_inside_a_larger_graph_raises_before_any_result():
    """The division feeds later work and the graph returns other results too: nothing comes back."""

    def fn(a, b):
        q = a // b
        return (q * 2 + 1).sum(), a + 1

    a = torch.arange(8).reshape(2, 4)
    compiled = torch.compile(fn, backend="fxvino")
    with fxvino.collect_reports() as report:
        for _ in range(2):
            with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                compiled(a, torch.tensor([1, 2, 0, 3]))
            divisor = torch.tensor([1, 2, 5, 3])
            torch.testing.assert_close(compiled(a, divisor), fn(a, divisor), rtol=0, atol=0)
    assert_all_on_openvino(report, partitions=None, ops=("aten.div.Tensor_mode",))


@pytest.mark.numerics
@pytest.mark.parametrize("dtype", (torch.uint8, torch.int8), ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_every_8_bit_quotient_and_remainder_equals_torchs(name: str, dtype: torch.dtype):
    """All 256 x 255 pairs of 8-bit operands with a nonzero divisor. uint8's were off (``7 // 2``
    gave 4, ``7 % 2`` gave 0: a remainder below zero wrapped); int8's ``-128 // -1`` wraps in torch."""
    fn, op = CASES[name]
    values = torch.arange(256, dtype=torch.int32).to(dtype)
    a, b = torch.meshgrid(values, values[values != 0], indexing="ij")
    with fxvino.collect_reports() as report:
        out = torch.compile(fn, backend="fxvino")(a.contiguous(), b.contiguous())
    torch.testing.assert_close(out, fn(a, b), rtol=0, atol=0)
    assert_all_on_openvino(report, partitions=None, ops=(op,))
