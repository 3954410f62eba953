"""The report names the code Dynamo kept from fxvino: graph breaks, and frames run eagerly."""

from __future__ import annotations

import torch

import fxvino


def _branchy(x):
    y = x * 2
    if y.sum() > 0:  # data-dependent: Dynamo splits the frame here
        return y + 1
    return y - 1


def test_a_graph_break_is_reported_with_its_line():
    x = torch.randn(8)
    report = fxvino.explain(_branchy, x)
    (brk,) = report.dynamo
    line = _branchy.__code__.co_firstlineno + 2
    assert (brk.kind, brk.where, brk.count, brk.eager_frame) == (
        "Data-dependent branching",
        f"test_dynamo_breaks.py:{line}",
        1,
        False,
    )
    assert f"dynamo: graph break x1 at test_dynamo_breaks.py:{line}: Data-dependent branching" in str(report)
    assert len(report.graphs) == 2  # the graphs before and after the break still run on OpenVINO


def test_a_frame_run_eagerly_after_the_recompile_limit_is_reported():
    def scaled(x):
        return x * 3

    compiled = torch.compile(scaled, backend="fxvino", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=1), fxvino.collect_reports() as report, torch.no_grad():
        for n in (4, 5, 6):
            torch.testing.assert_close(compiled(torch.ones(n)), torch.full((n,), 3.0))
    assert len(report.graphs) == 1
    eager = [b for b in report.dynamo if b.eager_frame]
    assert eager and "recompile limit" in eager[0].kind.lower(), str(report)
    assert "dynamo: ran a frame eagerly" in str(report)


def test_a_whole_graph_reports_no_break():
    report = fxvino.explain(lambda x: torch.relu(x) + 1, torch.randn(4))
    assert report.dynamo == []
    assert "dynamo:" not in str(report)


def test_pytorch_between_inferences_brings_the_openmp_spin_hint(monkeypatch):
    """With PyTorch work between OpenVINO inferences (a graph break here), the report says how to
    stop PyTorch's OpenMP threads from spinning on the next inference's cores, unless the
    environment already sets the spin, PyTorch runs one thread, or its backend is not OpenMP."""
    from fxvino import report as reports

    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    broken = fxvino.explain(_branchy, torch.randn(8))
    whole = fxvino.explain(lambda x: torch.relu(x) + 1, torch.randn(4))
    assert whole.hints == [] and "hint:" not in str(whole)
    if torch.get_num_threads() < 2 or "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        assert broken.hints == []
        return
    assert broken.hints == [reports.OPENMP_SPIN_HINT]
    assert f"hint: {reports.OPENMP_SPIN_HINT}" in str(broken)
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    assert broken.hints == [] and "hint:" not in str(broken)
