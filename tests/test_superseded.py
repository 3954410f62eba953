"""Static graphs that a dynamic recompile supersedes release their compiled models, and a
released graph that is called anyway compiles again (superseded.py). Generation, where this
matters, is tested in test_generate.py."""

from __future__ import annotations

import torch

import fxvino


class _Scaled(torch.nn.Module):
    """A product whose scale depends on the batch size: Dynamo guards on it in a dynamic graph."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * (2.0 if x.shape[0] > 5 else 3.0)


def _run(model: torch.nn.Module, compiled, rows: int) -> None:
    x = torch.randn(rows, 8)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_graph_for_size_one_is_not_superseded():
    """Dynamo's dynamic graph still asks for sizes >= 2, so the batch-1 graph stays compiled and
    a batch of 1 after a batch of 3 compiles nothing."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8).eval()
    compiled = torch.compile(model, backend="fxvino")
    with fxvino.collect_reports() as report:
        for rows in (1, 3, 1, 5):
            _run(model, compiled, rows)
    assert len(report.graphs) == 2, str(report)
    assert [g.released for g in report.graphs] == [None, None]


def test_a_released_graph_called_again_compiles_again():
    """Batch 4, then 8: the dynamic graph supersedes the batch-4 one (same ops), but its guard
    (batch > 5) excludes 4. A batch of 4 then reaches the released graph, which compiles again
    and gives eager's result; after that, batches of 4 compile nothing more."""
    torch.manual_seed(0)
    model = _Scaled().eval()
    compiled = torch.compile(model, backend="fxvino")
    with fxvino.collect_reports() as report:
        _run(model, compiled, 4)
        _run(model, compiled, 8)
        assert report.graphs[0].released == f"superseded by graph {report.graphs[1].name}", str(report)
        assert report.graphs[0].ov_partitions[0].compiled is None
        _run(model, compiled, 4)
        assert len(report.graphs) == 3, str(report)  # the batch-4 graph, compiled again
        _run(model, compiled, 4)
        _run(model, compiled, 7)
    assert len(report.graphs) == 3, str(report)
    assert report.graphs[2].released is None


def test_another_instances_graph_is_released_when_its_dynamic_graph_compiles():
    """One graph's code called with two modules' weights: each instance's static graph is released
    when the dynamic graph compiles for that instance's weights, as for the graph's own (a second
    model of the same class running generate() would otherwise keep its first decode step's
    packed weights for good)."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(8, 8).eval(), torch.nn.Linear(8, 8).eval()
    compiled = torch.compile(lambda m, x: m(x), backend="fxvino")

    def run(model, rows):
        x = torch.randn(rows, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(model, x), model(x), rtol=1e-5, atol=1e-5)

    with fxvino.collect_reports() as report:
        run(a, 4)
        run(b, 4)  # the static graph, frozen with b's weights
        static_b = report.graphs[1]
        run(a, 8)  # the dynamic graph releases a's static graph
        assert static_b.ov_partitions[0].compiled is not None, str(report)
        run(b, 8)  # and, compiled with b's weights, b's
        assert static_b.ov_partitions[0].compiled is None, str(report)
        for model in (a, b, a, b):
            run(model, 4)  # the dynamic graph serves both: nothing compiles again
    assert len(report.graphs) == 4, str(report)
    assert report.graphs[0].released and report.graphs[2].released is None and report.graphs[3].released is None
