"""backend="fxvino" works without importing fxvino, through the Dynamo entry point."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import fxvino
from fxvino.report import collect_reports


def test_entry_point_registers_the_backend_in_a_fresh_process():
    code = (
        "import torch, sys\n"
        "assert 'fxvino' not in sys.modules\n"
        "print('fxvino' in torch._dynamo.list_backends())\n"
        "f = torch.compile(lambda x: x * 2 + 1, backend='fxvino')\n"
        "print(f(torch.ones(3)).tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split("\n")[:2] == ["True", "[3.0, 3.0, 3.0]"], out.stderr[-2000:]


def test_explain_reports_what_ran_where():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    report = fxvino.explain(model, torch.randn(2, 8))
    (graph,) = report.graphs
    assert graph.kind == "inference"
    assert graph.num_nodes == sum(graph.ov_ops.values()) == 3  # permute, addmm, relu
    assert graph.ov_ops["aten.addmm.default"] == 1
    assert len(graph.partitions) == 1 and graph.compile_seconds > 0
    text = str(report)
    assert "3 on OpenVINO in 1 partition(s)" in text and "0 in PyTorch" in text


def test_explain_with_disabled_op_names_the_reason():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    report = fxvino.explain(model, torch.randn(2, 8), options={"disabled_ops": ["aten.relu.default"]})
    assert "relu (aten.relu.default) -> pytorch: listed in disabled_ops" in str(report)


def test_reports_are_scoped_to_their_block():
    compiled = torch.compile(lambda x: x + 1, backend="fxvino")
    with collect_reports() as outer, collect_reports() as inner, torch.no_grad():
        compiled(torch.ones(2))
    assert len(inner.graphs) == len(outer.graphs) == 1
    with collect_reports() as later, torch.no_grad():
        compiled(torch.ones(2))  # cached: nothing new is compiled
    assert later.graphs == []


@pytest.mark.parametrize("bad", [{"precision": "f8"}, {"device": "TPU"}])
def test_explain_rejects_bad_options(bad):
    with pytest.raises(Exception, match="valid|available devices"):
        fxvino.explain(lambda x: x + 1, torch.ones(2), options=bad)
