"""Ops the CPU plugin computes in a scalar loop run in PyTorch on large static tensors.

OpenVINO's CPU plugin has no vectorized kernel for Log, Sin, Atan and their kin: 4-5 ns an element
whatever the value, several times eager's time (``partitioning/support.py``). From
``SLOW_ON_CPU_ELEMENTS`` elements such an op runs in PyTorch, between OpenVINO partitions, and the
report says why; below that, or with a dynamic shape, it stays on OpenVINO.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fxvino.partitioning.support import SLOW_ON_CPU_ELEMENTS
from harness import assert_all_on_openvino, run_fxvino

LARGE = 4 * SLOW_ON_CPU_ELEMENTS
OPS = {
    "log": (torch.log, "aten.log.default"),
    "log1p": (torch.log1p, "aten.log1p.default"),
    "sin": (torch.sin, "aten.sin.default"),
    "atan": (torch.atan, "aten.atan.default"),
    "atan2": (lambda x: torch.atan2(x, x - 1), "aten.atan2.default"),
}


def _input(n: int) -> torch.Tensor:
    return torch.rand(n // 64, 64, generator=torch.Generator().manual_seed(0)) + 0.25


@pytest.mark.parametrize("name", list(OPS))
def test_a_large_reference_loop_op_runs_in_pytorch_with_its_reason(name):
    fn, op = OPS[name]
    x = _input(LARGE)
    out, report = run_fxvino(fn, x, dynamic=False)
    assert torch.equal(out, fn(x))  # eager's own kernel computed it
    assert report.torch_ops[op] == 1, str(report)
    (fallback,) = report.fallbacks
    assert fallback.op == op and fallback.ran_on == "pytorch"
    assert "scalar loop" in fallback.reason and f"{LARGE:,} elements" in fallback.reason, fallback.reason


@pytest.mark.parametrize("name", list(OPS))
def test_a_small_one_stays_on_openvino(name):
    fn, op = OPS[name]
    x = _input(SLOW_ON_CPU_ELEMENTS // 4)
    out, report = run_fxvino(fn, x, dynamic=False)
    torch.testing.assert_close(out, fn(x))
    assert_all_on_openvino(report, ops=(op,))


def test_a_dynamic_shape_stays_on_openvino():
    """A call may bring any size: the partition is compiled once for all of them."""
    x = _input(LARGE)
    out, report = run_fxvino(torch.sin, x, dynamic=True)
    torch.testing.assert_close(out, torch.sin(x))
    assert_all_on_openvino(report, ops=("aten.sin.default",))


def test_logsigmoid_keeps_its_log1p_on_openvino():
    """PyTorch decomposes logsigmoid into log1p(exp(-|x|)), which fxvino lowers as a series of
    fused ops without OpenVINO's Log: nothing to move."""
    x = _input(LARGE) * 8 - 4
    out, report = run_fxvino(F.logsigmoid, x, dynamic=False)
    torch.testing.assert_close(out, F.logsigmoid(x))
    assert_all_on_openvino(report, ops=("aten.log1p.default",))


def test_the_ops_around_it_stay_on_openvino():
    fn = lambda x: torch.sin(x * 2) + torch.log(x) * 3  # noqa: E731
    x = _input(LARGE)
    out, report = run_fxvino(fn, x, dynamic=False)
    torch.testing.assert_close(out, fn(x))
    assert dict(report.torch_ops) == {"aten.sin.default": 1, "aten.log.default": 1}, str(report)
    assert report.ov_ops["aten.mul.Tensor"] == 2 and report.ov_ops["aten.add.Tensor"] == 1, str(report)


def test_export_keeps_every_op_in_the_openvino_model():
    """Export has no PyTorch to run anything in: the rule is the torch.compile partitioner's."""
    import fxvino

    class Log(torch.nn.Module):
        def forward(self, x):
            return torch.log(x)

    exported = fxvino.export(Log(), (_input(LARGE),))
    kinds = {op.get_type_name() for op in exported.ov_model.get_ordered_ops()}
    assert "Log" in kinds, kinds
