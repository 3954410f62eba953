"""Frozen weights never go stale: a graph whose frozen parameters changed in place since it was
compiled compiles again with the current values (runtime.frozen_weights.FrozenWeights)."""

from __future__ import annotations

import torch

import fxvino


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.relu(self.conv(x)).mean((2, 3)))


def _check(model: torch.nn.Module, compiled, x: torch.Tensor) -> fxvino.Report:
    with torch.no_grad(), fxvino.collect_reports() as report:
        got = compiled(x)
        expected = model(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    return report


def test_in_place_weight_changes_are_never_stale():
    torch.manual_seed(0)
    model = _Net().eval()
    x = torch.randn(2, 3, 8, 8)
    compiled = torch.compile(model, backend="fxvino")
    first = _check(model, compiled, x)
    assert first.graphs and first.graphs[0].frozen_inputs == 4, str(first)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        model.lin.weight.copy_(torch.randn(4, 8))  # version counter
    assert len(_check(model, compiled, x).graphs) == 1, "a change in place compiles the graph again"
    model.conv.weight.data = torch.randn(8, 3, 3, 3)  # new data pointer, same parameter object
    assert len(_check(model, compiled, x).graphs) == 1
    model.load_state_dict(original)  # back to the first weights: not the first graph's stale copy of them
    _check(model, compiled, x)
    model.lin.bias.data += 1.0  # through .data: invisible to PyTorch's counters until told
    fxvino.weights_changed(model)
    _check(model, compiled, x)
    assert len(_check(model, compiled, x).graphs) == 0, "unchanged weights compile nothing"


def test_weights_changed_accepts_modules_pipelines_and_lists():
    model = _Net()
    before = [p._version for p in model.parameters()]
    fxvino.weights_changed([model.conv, model.lin])
    assert all(p._version > v for p, v in zip(model.parameters(), before, strict=True))
    try:
        fxvino.weights_changed(3)
    except TypeError as e:
        assert "torch.nn.Module" in str(e)
    else:
        raise AssertionError("weights_changed(3) must fail")


def test_weights_that_keep_changing_end_up_as_inputs():
    """An eval call after each training-like update: refrozen at most REFREEZE_LIMIT times, then one
    compile with weights as inputs serves every later change, still equal to eager."""
    from fxvino.runtime.frozen_weights import REFREEZE_LIMIT

    torch.manual_seed(0)
    model = _Net().eval()
    x = torch.randn(2, 3, 8, 8)
    compiled = torch.compile(model, backend="fxvino")
    compiles = 0
    for _ in range(REFREEZE_LIMIT + 4):
        compiles += len(_check(model, compiled, x).graphs)
        with torch.no_grad():
            model.lin.weight.add_(0.1)
    assert compiles == 1 + REFREEZE_LIMIT + 1, compiles


def test_a_refreeze_that_fails_runs_weights_as_inputs_from_then_on(monkeypatch):
    """A graph whose compile with the new weights fails computes with the current weights as inputs,
    and does not try that compile again on every later call."""
    from fxvino.passes import freezing

    torch.manual_seed(0)
    model = _Net().eval()
    x = torch.randn(2, 3, 8, 8)
    compiled = torch.compile(model, backend="fxvino")
    _check(model, compiled, x)
    attempts = []

    def failing(*args, **kwargs):
        attempts.append(1)
        raise RuntimeError("injected: compiling with the new weights fails")

    monkeypatch.setattr(freezing, "freeze_and_fold", failing)
    with torch.no_grad():
        model.lin.weight.mul_(2.0)
    for _ in range(3):
        _check(model, compiled, x)
        with torch.no_grad():
            model.lin.weight.add_(0.5)  # weights as inputs: current whatever they become
    assert len(attempts) == 1, attempts
