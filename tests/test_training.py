"""Training through AOTAutograd: forward on OpenVINO, gradients match eager."""

from __future__ import annotations

import copy

import pytest
import torch

import fxvino


@pytest.mark.parametrize("aot_autograd", [False, True])
def test_gradients_match_eager(aot_autograd):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    )
    ref_model = copy.deepcopy(model)
    x = torch.randn(8, 16)
    compiled = torch.compile(model, backend="fxvino", options={"aot_autograd": aot_autograd})
    with fxvino.collect_reports() as report:
        out = compiled(x)
        out.square().sum().backward()
    ref = ref_model(x)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref)
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    kinds = {g.kind: g for g in report.graphs}
    assert kinds["forward"].ov_partitions and not kinds["forward"].fallbacks
    if aot_autograd:
        assert kinds["backward"].ov_partitions and not kinds["backward"].fallbacks, str(report)
    else:
        (fb,) = kinds["backward"].fallbacks
        assert "backward runs in PyTorch" in fb.reason
