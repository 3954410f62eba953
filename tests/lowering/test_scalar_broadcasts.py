"""Scalars broadcast to large static shapes (``zeros_like``, ``full``, ``where(..., 0)``) must not
become full-size constants in the compiled model (lowering/scalar_broadcasts.py), and results stay
eager's."""

from __future__ import annotations

import torch

from fxvino.lowering.scalar_broadcasts import MIN_BYTES
from harness import assert_all_on_openvino, largest_constant_bytes, run_fxvino

ROWS, COLS = 512, 1024  # 2 MB in f32: above the pass's threshold


def _check(fn, *args):
    out, report = run_fxvino(fn, *args, fullgraph=True)
    assert_all_on_openvino(report)
    torch.testing.assert_close(out, fn(*args))
    compiled = report.graphs[0].ov_partitions[0].compiled
    assert largest_constant_bytes(compiled) < MIN_BYTES
    return report


def test_a_filler_read_elementwise_becomes_a_scalar():
    x = torch.randn(ROWS, COLS)
    _check(lambda x: torch.where(x > 0, x, torch.zeros_like(x)) + torch.full_like(x, 2.0) * x, x)


def test_a_filler_needed_whole_is_made_at_run_time():
    """A scatter's zero base and a returned filler need the full tensor: made on each call."""
    idx = torch.randint(0, ROWS, (64,))
    src = torch.randn(64, COLS)

    def fn(idx, src):
        base = torch.zeros(ROWS, COLS).index_add(0, idx, src)
        return base, torch.ones(ROWS, COLS, dtype=torch.bool)

    out, report = run_fxvino(fn, idx, src, fullgraph=True)
    assert_all_on_openvino(report)
    want = fn(idx, src)
    torch.testing.assert_close(out[0], want[0])
    assert torch.equal(out[1], want[1])
    assert largest_constant_bytes(report.graphs[0].ov_partitions[0].compiled) < MIN_BYTES


def _layer_types(report) -> list[str]:
    runtime = report.graphs[0].ov_partitions[0].compiled.get_runtime_model()
    return [op.get_rt_info()["layerType"].astype(str) for op in runtime.get_ordered_ops()]


def test_a_scatter_into_zeros_added_to_a_tensor_scatters_into_that_tensor():
    """A tied embedding's gradient: the embedding's (a scatter into zeros) plus the output layer's."""
    go = torch.randn(4, 64, COLS)
    idx = torch.randint(0, ROWS, (4, 64))
    head = torch.randn(ROWS, COLS)

    def fn(go, idx, head):
        return head + torch.ops.aten.embedding_dense_backward(go, idx, ROWS, -1, False)

    out, report = run_fxvino(fn, go, idx, head, fullgraph=True)
    assert_all_on_openvino(report)
    torch.testing.assert_close(out, fn(go, idx, head))
    kinds = _layer_types(report)
    assert kinds.count("ScatterNDUpdate") == 1 and "Broadcast" not in kinds, kinds

    def also_returned(go, idx, head):  # the scatter is read twice: its zero base stays
        grad = torch.ops.aten.embedding_dense_backward(go, idx, ROWS, -1, False)
        return head + grad, grad

    out, report = run_fxvino(also_returned, go, idx, head, fullgraph=True)
    for ours, want in zip(out, also_returned(go, idx, head), strict=True):
        torch.testing.assert_close(ours, want)
    assert "Broadcast" in _layer_types(report)
