"""Padding (constant / reflection / replication) and repeat against eager PyTorch."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fxvino
from fxvino.capture import decompositions
from fxvino.options import Options
from harness import assert_all_on_openvino, run_fxvino

aten = torch.ops.aten

MODE_PADS = [
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.reflection_pad3d.default,
    aten.replication_pad1d.default,
    aten.replication_pad2d.default,
    aten.replication_pad3d.default,
]


@pytest.fixture
def keep_mode_pads():
    """Capture keeps reflection/replication pads whole (the Core ATen table would decompose them)."""
    assert set(MODE_PADS) <= decompositions.KEEP_UNDECOMPOSED
    assert not set(MODE_PADS) & set(decompositions.decomposition_table(Options()))


def _check(fn, *args, op, dynamic=None):
    out, report = run_fxvino(fn, *args, fullgraph=True, dynamic=dynamic)
    torch.testing.assert_close(out, fn(*args), rtol=0, atol=0)
    assert_all_on_openvino(report)
    assert report.ov_ops[op] >= 1, str(report)


@pytest.mark.parametrize(
    "shape, pad, value",
    [
        ((2, 3, 5, 6), (1, 2), 0.0),
        ((2, 3, 5, 6), (1, 2, -1, 1), 0.0),  # negative pads crop
        ((2, 3, 5, 6), (-2, -1, 0, 3, 1, 0), -1.5),
        ((4, 5), (0, 0, 2, 2), 7.0),
        ((2, 3, 4, 5, 6), (1, -1, 2, 0, -1, 1), 2.0),
    ],
)
def test_constant_pad_nd(shape, pad, value):
    x = torch.randn(shape)
    _check(lambda x: F.pad(x, pad, value=value), x, op="aten.constant_pad_nd.default")


def test_constant_pad_nd_integer_input():
    x = torch.randint(-5, 5, (3, 4), dtype=torch.int32)
    _check(lambda x: F.pad(x, (2, 1, 1, 0), value=9), x, op="aten.constant_pad_nd.default")


def test_constant_pad_nd_dynamic_pads_follow_the_shape():
    """Pad the last dim to a multiple of 8: the pad amount is a SymInt computed in-graph."""

    def fn(x):
        return F.pad(x, (1, (8 - x.shape[-1] % 8) % 8 + 1, 0, 2), value=0.5)

    compiled = torch.compile(fn, backend="fxvino", dynamic=True, fullgraph=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for shape in [(2, 5, 11), (3, 4, 17), (4, 6, 8)]:
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0)
    assert_all_on_openvino(report)
    assert len(report.graphs) == 1, str(report)  # one compile served every size
    assert report.ov_ops["aten.constant_pad_nd.default"] == 1


@pytest.mark.parametrize(
    "mode, shape, pad",
    [
        ("reflect", (2, 3, 7), (2, 3)),
        ("reflect", (2, 3, 5, 6), (1, 2, 4, 0)),
        ("reflect", (1, 2, 4, 5, 6), (1, 2, 3, 1, 0, 2)),
        ("replicate", (2, 3, 7), (3, 0)),
        ("replicate", (2, 3, 5, 6), (1, 2, 4, 0)),
        ("replicate", (1, 2, 4, 5, 6), (1, 2, 3, 1, 0, 2)),
    ],
)
def test_reflection_and_replication_pads(keep_mode_pads, mode, shape, pad):
    x = torch.randn(shape)
    kind = "reflection" if mode == "reflect" else "replication"
    op = f"aten.{kind}_pad{len(shape) - 2}d.default"
    _check(lambda x: F.pad(x, pad, mode=mode), x, op=op)


def test_replication_pad_dynamic(keep_mode_pads):
    fn = lambda x: F.pad(x, (2, 1, 0, 3), mode="replicate")  # noqa: E731
    x = torch.randn(2, 3, 6, 7)
    _check(fn, x, op="aten.replication_pad2d.default", dynamic=True)


@pytest.mark.parametrize(
    "shape, repeats",
    [((2, 3), (2, 1)), ((2, 3, 4), (1, 3, 2)), ((3,), (2, 2, 1)), ((2, 3, 4), (2, 1, 1, 2))],
)
def test_repeat(shape, repeats):
    x = torch.randn(shape)
    _check(lambda x: x.repeat(*repeats), x, op="aten.repeat.default")


def test_repeat_dynamic():
    x = torch.randn(2, 3, 4)
    _check(lambda x: x.repeat(2, 1, 3), x, op="aten.repeat.default", dynamic=True)
