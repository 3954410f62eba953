"""Training techniques on top of the plain loop: gradient accumulation and clipping, bf16
autocast, activation checkpointing, frozen layers and LoRA adapters (peft)."""

from __future__ import annotations

import torch
import torch.utils.checkpoint
import train_models as models
from train_loop import assert_same_training, assert_training_on_openvino, train_both

from harness import cpu_computes_bf16


def _accumulate(fn, opt, loss_fn, batch):
    """Two micro-batches per optimizer step."""
    opt.zero_grad()
    total = 0.0
    for half in (slice(0, 4), slice(4, 8)):
        loss = loss_fn(fn, (batch[0][half], batch[1][half])) / 2
        loss.backward()
        total += loss.detach()
    opt.step()
    return total


def _clipped(fn, opt, loss_fn, batch):
    opt.zero_grad()
    loss = loss_fn(fn, batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(fn.parameters(), max_norm=0.05)
    opt.step()
    return loss.detach()


def test_gradient_accumulation():
    eager, ours = train_both(models.mlp(), models.mlp_batches(), models.mlp_loss, step=_accumulate)
    assert_training_on_openvino(ours.report)
    assert_same_training(eager, ours)


def test_gradient_clipping():
    eager, ours = train_both(models.bert(), models.bert_batches(8), models.bert_loss, step=_clipped)
    assert_training_on_openvino(ours.report)
    assert_same_training(eager, ours)


def _autocast_loss(model, batch):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return models.bert_loss(model, batch)


def test_bf16_autocast():
    """Autocast's bf16 matmuls: on CPUs without bf16 kernels OpenVINO computes them in f32, so the
    losses are then nearer f32 training than eager's bf16 ones; compared with bf16's tolerance."""
    eager, ours = train_both(models.bert(), models.bert_batches(8), _autocast_loss)
    assert_training_on_openvino(ours.report)
    rtol = 2e-2 if not cpu_computes_bf16() else 1e-2
    assert_same_training(eager, ours, rtol=rtol, atol=1e-2)


class _Checkpointed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)) for _ in range(3)
        )
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        for block in self.blocks:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        return self.head(x)


def test_activation_checkpointing():
    torch.manual_seed(0)
    eager, ours = train_both(_Checkpointed(), models.mlp_batches(), models.mlp_loss)
    assert_training_on_openvino(ours.report)
    assert_same_training(eager, ours)


def test_frozen_layers():
    """requires_grad=False parts (the embeddings and first layer) get no gradient and stay put."""
    model = models.bert()
    frozen = [*model.bert.embeddings.parameters(), *model.bert.encoder.layer[0].parameters()]
    for p in frozen:
        p.requires_grad_(False)
    before = [p.clone() for p in frozen]
    eager, ours = train_both(model, models.bert_batches(8), models.bert_loss)
    assert_training_on_openvino(ours.report)
    assert_same_training(eager, ours)
    for p, b in zip(frozen, before, strict=True):
        assert p.grad is None and torch.equal(p, b)


def test_lora_trains_only_adapters():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(models.bert(), LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"]))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or "classifier" in n for n in trainable)
    before = {n: p.clone() for n, p in model.named_parameters()}
    eager, ours = train_both(model, models.bert_batches(8), models.bert_loss)
    assert_training_on_openvino(ours.report)
    assert_same_training(eager, ours)
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) != (n in trainable), n
