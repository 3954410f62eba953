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


def gpt_oss() -> torch.nn.Module:
    """gpt-oss's layout (8 experts, top 2, biased experts with clamped SwiGLU, attention sinks,
    alternating sliding and full attention): transformers runs its experts through the
    ``grouped_mm_fallback`` custom op, forward and backward."""
    from transformers import GptOssConfig, GptOssForCausalLM

    cfg = GptOssConfig(
        vocab_size=128, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_local_experts=8, num_experts_per_tok=2, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"], max_position_embeddings=128,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )  # fmt: skip
    torch.manual_seed(0)
    model = GptOssForCausalLM(cfg).train()
    model.loss_type = "ForCausalLM"
    return model


def mixtral() -> torch.nn.Module:
    """Mixtral's layout (4 experts, top 2, no biases; its expert weights reach the custom op transposed)."""
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(
        vocab_size=128, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=128,
    )  # fmt: skip
    torch.manual_seed(0)
    model = MixtralForCausalLM(cfg).train()
    model.loss_type = "ForCausalLM"
    return model


def causal_lm_batches(n: int = 1, length: int = 64) -> list:
    g = torch.Generator().manual_seed(2)
    return [torch.randint(0, 128, (2, length), generator=g) for _ in range(n)]


def causal_lm_loss(model, batch) -> torch.Tensor:
    return model(input_ids=batch, labels=batch).loss


def longformer_mlm() -> torch.nn.Module:
    """Longformer's masked LM: sliding-window attention, a graph break at ``.item()`` of "any
    global attention?", and the LM head's decoder tied to the word embeddings across that break."""
    from transformers import LongformerConfig, LongformerForMaskedLM

    cfg = LongformerConfig(
        vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        attention_window=32, max_position_embeddings=200, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return LongformerForMaskedLM(cfg).train()


def longformer_batches(n: int = 1) -> list:
    g = torch.Generator().manual_seed(2)
    return [torch.randint(0, 500, (2, 64), generator=g) for _ in range(n)]


def mlm_loss(model, batch) -> torch.Tensor:
    return model(input_ids=batch, labels=batch).loss


def suite_decoder(name: str) -> torch.nn.Module:
    """A decoder of the model suite (benchmarks/models.py) in train mode, for its vocabulary of 1000."""
    from benchmarks import models

    torch.manual_seed(0)
    model, _ = models.BY_NAME[name].build()
    model.loss_type = "ForCausalLM"
    return model.train()
