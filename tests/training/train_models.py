"""Small configurations of the issue's fine-tuning models (random weights, no downloads)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))


def mlp_batches(n: int = 20) -> list:
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(n)]


def mlp_loss(model, batch) -> torch.Tensor:
    return F.cross_entropy(model(batch[0]), batch[1])


def bert(dropout: float = 0.0) -> torch.nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
        num_labels=3, problem_type="single_label_classification",
    )  # fmt: skip
    torch.manual_seed(0)
    return BertForSequenceClassification(cfg).train()


def bert_batches(n: int = 20) -> list:
    g = torch.Generator().manual_seed(2)
    return [(torch.randint(0, 100, (4, 16), generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(n)]


def bert_loss(model, batch) -> torch.Tensor:
    return model(input_ids=batch[0], labels=batch[1]).loss


def gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).train()
    model.loss_type = "ForCausalLM"  # else transformers logs a warning inside forward: a graph break
    return model


def gpt2_batches(n: int = 20) -> list:
    g = torch.Generator().manual_seed(2)
    return [torch.randint(0, 100, (2, 16), generator=g) for _ in range(n)]


def gpt2_loss(model, batch) -> torch.Tensor:
    return model(input_ids=batch, labels=batch).loss


def resnet() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    cfg = ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="bottleneck", num_labels=3,
        problem_type="single_label_classification",
    )  # fmt: skip
    torch.manual_seed(0)
    return ResNetForImageClassification(cfg).train()


def resnet_batches(n: int = 20) -> list:
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(2, 3, 32, 32, generator=g), torch.randint(0, 3, (2,), generator=g)) for _ in range(n)]


def resnet_loss(model, batch) -> torch.Tensor:
    return model(pixel_values=batch[0], labels=batch[1]).loss
