"""Fine-tuning loops run twice, eagerly and compiled with fxvino, and compared step by step."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

import fxvino

TRAINING = {"aot_autograd": True}


@dataclasses.dataclass
class Run:
    losses: list[float]
    model: torch.nn.Module
    report: fxvino.Report | None = None


def train(
    model: torch.nn.Module,
    batches: Sequence[Any],
    loss_fn: Callable[[Callable, Any], torch.Tensor],
    *,
    compiled: bool,
    step: Callable[[torch.nn.Module, torch.optim.Optimizer, Callable, Any], torch.Tensor] | None = None,
    lr: float = 1e-3,
) -> Run:
    """AdamW over ``batches``; ``step`` replaces the plain zero_grad/forward/backward/step."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    fn = torch.compile(model, backend="fxvino", options=TRAINING) if compiled else model
    step = step or plain_step
    losses = []
    with fxvino.collect_reports() as report:
        for b in batches:
            losses.append(step(fn, opt, loss_fn, b).item())
    return Run(losses, model, report if compiled else None)


def plain_step(fn: Callable, opt: torch.optim.Optimizer, loss_fn: Callable, batch: Any) -> torch.Tensor:
    opt.zero_grad()
    loss = loss_fn(fn, batch)
    loss.backward()
    opt.step()
    return loss.detach()


def train_both(model: torch.nn.Module, batches: Sequence[Any], loss_fn: Callable, **kw: Any) -> tuple[Run, Run]:
    """(eager, fxvino) runs from the same initial weights and the same random state."""
    twin = copy.deepcopy(model)
    torch.manual_seed(1)
    eager = train(twin, batches, loss_fn, compiled=False, **kw)
    torch.manual_seed(1)
    ours = train(model, batches, loss_fn, compiled=True, **kw)
    return eager, ours


def assert_same_training(eager: Run, ours: Run, rtol: float = 1e-4, atol: float = 1e-4) -> None:
    """Every step's loss within ``rtol`` of eager's; final parameters and buffers within tolerance."""
    for i, (a, b) in enumerate(zip(ours.losses, eager.losses, strict=True)):
        assert abs(a - b) <= rtol * abs(b), f"step {i}: loss {a} vs eager {b}"
    ref = dict(eager.model.state_dict())
    for name, value in ours.model.state_dict().items():
        if value.is_floating_point():
            torch.testing.assert_close(value, ref[name], rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")
        else:
            assert torch.equal(value, ref[name]), name


def assert_training_on_openvino(report: fxvino.Report) -> None:
    """Forward and backward graphs were compiled, and nothing ran in PyTorch or fell back."""
    kinds = {g.kind for g in report.graphs}
    assert {"forward", "backward"} <= kinds, str(report)
    assert not report.fallbacks, str(report)
    assert not report.torch_ops, str(report)
    for g in report.graphs:
        assert g.ov_partitions, str(report)


def train_like_eager(model: torch.nn.Module, x: torch.Tensor, steps: int, before_backward=None) -> fxvino.Report:
    """Trains ``model`` compiled and an eager twin on ``x`` (loss: the output's mean square);
    their gradients must agree and the compiled steps run on OpenVINO only.
    ``before_backward(report)`` runs between the first forward and its backward."""
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino", options=TRAINING)
    with fxvino.collect_reports() as report:
        for step in range(steps):
            loss = compiled(x).square().mean()
            if step == 0 and before_backward is not None:
                before_backward(report)
            loss.backward()
    for _ in range(steps):
        twin(x).square().mean().backward()
    for ours, ref in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-4, atol=1e-5)
    assert not report.fallbacks and not report.torch_ops, str(report)
    return report
