"""Large outputs of training graphs (activations, gradients, logits) are lent, not copied: a
result must still never change while anything holds it, whatever later steps run."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from train_loop import TRAINING

import fxvino


def _wide_mlp() -> torch.nn.Module:
    torch.manual_seed(0)  # 1 MB weights, 512 KB activations: above the runtime's lending size
    return torch.nn.Sequential(
        torch.nn.Linear(512, 512),
        torch.nn.GELU(),
        torch.nn.Linear(512, 512),
        torch.nn.Tanh(),
        torch.nn.Linear(512, 512),
    )


def test_held_outputs_and_accumulated_gradients_stay_right():
    """Three micro-batches per step without zero_grad in between, every output kept: more
    results held than the runtime lends at once (it copies past that), and gradients accumulate
    in place into memory an earlier backward lent."""
    model = _wide_mlp()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino", options=TRAINING)
    opts = [torch.optim.SGD(m.parameters(), lr=1e-2) for m in (model, twin)]
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randn(256, 512, generator=g), torch.randn(256, 512, generator=g)) for _ in range(9)]
    held, ref_held, grads, ref_grads = [], [], [], []
    with fxvino.collect_reports() as report:
        for step in range(3):
            for fn, opt, outs, gs in ((compiled, opts[0], held, grads), (twin, opts[1], ref_held, ref_grads)):
                opt.zero_grad(set_to_none=False)
                for x, y in batches[3 * step : 3 * step + 3]:
                    out = fn(x)
                    F.mse_loss(out, y).backward()
                    outs.append(out)
                gs.append([p.grad.clone() for p in (model if fn is compiled else twin).parameters()])
                opt.step()
    for i, (ours, ref) in enumerate(zip(held, ref_held, strict=True)):
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5, msg=lambda m, i=i: f"output {i}: {m}")
    for ours, ref in zip(grads, ref_grads, strict=True):
        for a, b in zip(ours, ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    assert not report.fallbacks and not report.torch_ops, str(report)
