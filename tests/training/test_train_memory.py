"""What a training step's compiled graphs keep besides eager's tensors: no folded full-size
constants (a dropout's element counter, an embedding gradient's zero base, ``where(..., 0)``
fillers). BERT-base's forward and backward held 385 MB of them."""

from __future__ import annotations

import copy

import torch
from train_loop import TRAINING

import fxvino
from harness import largest_constant_bytes


class _Attention(torch.nn.Module):
    """An embedding (2 MB table: its gradient starts from zeros) and a masked score matrix (2 MB)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(4096, 128)
        self.proj = torch.nn.Linear(128, 128)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.proj(self.emb(ids))
        scores = h @ h.transpose(1, 2)
        scores = torch.where(scores > 0, scores, torch.zeros_like(scores))
        return scores.softmax(-1) @ h


def test_training_graphs_hold_no_large_constants():
    torch.manual_seed(0)
    model = _Attention()
    twin = copy.deepcopy(model)
    ids = torch.randint(0, 4096, (32, 128), generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(model, backend="fxvino", options=TRAINING)
    with fxvino.collect_reports() as report:
        compiled(ids).square().mean().backward()
    twin(ids).square().mean().backward()
    for ours, ref in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-4, atol=1e-6)
    assert not report.fallbacks and not report.torch_ops, str(report)
    kinds = [g.kind for g in report.graphs]
    assert kinds == ["forward", "backward"], kinds
    for graph in report.graphs:
        for part in graph.ov_partitions:
            assert largest_constant_bytes(part.compiled) < 1 << 20, graph.kind
