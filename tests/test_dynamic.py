"""Dynamic shapes: one OpenVINO compile serves every size Dynamo's guards admit."""

from __future__ import annotations

import torch

import fxvino
from fxvino.tools import zoo

SEQ_LENS = (32, 64, 96, 128, 160)


def _sweep(compiled, model, batch):
    with fxvino.collect_reports() as report, torch.no_grad():
        for seq in SEQ_LENS:
            ids = torch.randint(0, 1000, (batch, seq))
            torch.testing.assert_close(compiled(ids).last_hidden_state, model(ids).last_hidden_state)
    return report


def test_bert_sequence_sweep_compiles_once_with_dynamic_true():
    model, _ = zoo.build("bert", num_hidden_layers=2)
    report = _sweep(torch.compile(model, backend="fxvino", dynamic=True), model, batch=1)
    assert report.num_ov_partitions == 1, str(report)
    assert not report.fallbacks


def test_bert_sweep_recompiles_once_by_default():
    """Dynamo compiles static first, then once dynamic: two OpenVINO compiles for five sizes."""
    model, _ = zoo.build("bert", num_hidden_layers=2)
    report = _sweep(torch.compile(model, backend="fxvino"), model, batch=2)
    assert report.num_ov_partitions == 2, str(report)
    assert not report.fallbacks


def test_symbolic_shape_arithmetic_runs_in_graph():
    def fn(x):
        b, s = x.shape
        return x.reshape(b * s // 2, 2).sum(-1) + s

    compiled = torch.compile(fn, backend="fxvino", dynamic=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for s in (4, 6, 10):
            x = torch.randn(3, s)
            torch.testing.assert_close(compiled(x), fn(x))
    assert report.num_ov_partitions == 1 and not report.fallbacks, str(report)
