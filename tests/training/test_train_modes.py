"""Switching train()/eval() and grad mode between steps: each mode gets its own graph, and an
evaluation after optimizer steps computes with the weights as they are now."""

from __future__ import annotations

import copy

import torch
import train_models as models
from train_loop import TRAINING, plain_step

import fxvino


def _eval_logits(model, batch):
    with torch.no_grad():
        return model(pixel_values=batch[0]).logits


def _interleave(model, rounds: int, steps: int):
    """``rounds`` x (``steps`` training steps, one no_grad evaluation), compiled and eager."""
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino", options=TRAINING)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, twin)]
    batches = models.resnet_batches(rounds * steps + rounds)
    pairs = []
    with fxvino.collect_reports() as report:
        for r in range(rounds):
            for s in range(steps):
                b = batches[r * steps + s]
                for fn, m, opt in ((compiled, model, opts[0]), (twin, twin, opts[1])):
                    m.train()
                    plain_step(fn, opt, models.resnet_loss, b)
            test = batches[rounds * steps + r]
            model.eval(), twin.eval()
            pairs.append((_eval_logits(compiled, test), _eval_logits(twin, test)))
    return pairs, report


def test_first_evaluation_after_training_steps():
    """Training steps (batch norm in training mode), then eval() under no_grad: a new inference
    graph, built from the trained weights and running statistics."""
    ((ours, eager),), report = _interleave(models.resnet(), rounds=1, steps=3)
    torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-5)
    assert {g.kind for g in report.graphs} == {"forward", "backward", "inference"}
    assert not report.fallbacks and not report.torch_ops, str(report)


def test_evaluations_between_training_steps_see_updated_weights():
    """Optimizer steps (and batch norm's running statistics) change frozen weights in place: every
    evaluation between steps computes with the current weights (runtime.frozen_weights.FrozenWeights checks
    version counters and data pointers), never the first evaluation's."""
    pairs, _ = _interleave(models.resnet(), rounds=3, steps=2)
    for i, (ours, eager) in enumerate(pairs):
        torch.testing.assert_close(ours, eager, rtol=1e-4, atol=1e-5, msg=lambda m, i=i: f"evaluation {i}: {m}")


def test_train_eval_and_grad_mode_switches():
    """Dropout is on only in train(); eval() with and without grad computes eager's logits, and
    training resumes where it stopped."""
    model = models.bert(dropout=0.1)
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino", options=TRAINING)
    opt, twin_opt = (torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (model, twin))
    batches = models.bert_batches(4)
    ids, labels = batches[0]
    with fxvino.collect_reports() as report:
        torch.manual_seed(0)
        train_out = [compiled(input_ids=ids, labels=labels).logits.detach() for _ in range(2)]
        assert not torch.equal(*train_out)  # fresh dropout masks per call
        model.eval(), twin.eval()
        logits = compiled(input_ids=ids).logits  # eval with grad: forward/backward graphs, no dropout
        torch.testing.assert_close(logits, twin(input_ids=ids).logits, rtol=1e-4, atol=1e-5)
        logits.sum().backward()
        twin(input_ids=ids).logits.sum().backward()
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        opt.zero_grad(), twin_opt.zero_grad()
        with torch.no_grad():
            torch.testing.assert_close(compiled(input_ids=ids).logits, twin(input_ids=ids).logits, rtol=1e-4, atol=1e-5)
        model.train(), twin.train()
        loss = plain_step(compiled, opt, models.bert_loss, batches[1])
        assert torch.isfinite(loss)
    kinds = [g.kind for g in report.graphs]
    assert kinds.count("forward") == 2 and kinds.count("backward") == 2 and kinds.count("inference") == 1, kinds
    assert not report.fallbacks and not report.torch_ops, str(report)
