"""fxvino's model suite: 77 architectures from configs with random weights, each checked against eager.

Per model: is fxvino's output equal to eager's (float32, max |fxvino - eager| / max |eager| <= 1e-4),
how many ops ran on OpenVINO and how many in PyTorch, how many OpenVINO partitions, every fallback
with its reason, and the speed-up over eager (medians of 18 calls, in alternating blocks). Decoder models also
run ``generate()`` (greedy, 8 new tokens, ``model.forward = torch.compile(model.forward, ...)``)
and must give eager's tokens. Each model runs in its own process, so a crash or a hang costs only
that model. Models needing an optional library (diffusers) are skipped without it.

    .venv/bin/python -m benchmarks.models                   # every model (~15 min on 2 cores)
    .venv/bin/python -m benchmarks.models --models bert,llama --markdown /tmp/m.md
    .venv/bin/python -m benchmarks.models --list

Configs are small (hidden 64, 2 layers, 16 tokens, 32-64 px images): the suite proves coverage and
correctness, not speed; the speed-up column is for spotting pathologies (a steady 0.2x is a problem;
on a machine shared with other work single rows swing several-fold between runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TOLERANCE = 1e-4
SEQ = 16
IMAGE = 32
# Between timed blocks: longer than PyTorch's OpenMP and OpenVINO's TBB threads spin before sleeping.
_SETTLE_S = 0.02


@dataclasses.dataclass(frozen=True)
class Spec:
    """One architecture: how to build it (model, example kwargs) and what it covers."""

    name: str
    family: str  # encoder | decoder | encoder-decoder | vision | cnn | audio | nn | diffusion
    covers: str  # what it exercises that others do not
    build: Callable[[], tuple[Any, dict[str, Any]]]
    generate: bool = False
    output: str | None = None  # the output field to compare, when the first tensor is not the one to judge
    # Dynamo settings the model needs to be captured at all (nn.LSTM is skipped unless allow_rnn is set)
    dynamo_config: tuple[tuple[str, Any], ...] = ()


def _tf(
    config_cls: str,
    model_cls: str,
    inputs: str = "text",
    *,
    prepare: Callable[[Any], None] | None = None,
    **cfg: Any,
) -> Callable[[], tuple[Any, dict]]:
    """A transformers model built from a small config with random weights (``prepare`` fixes up weights
    that initialisation leaves degenerate)."""

    def build() -> tuple[Any, dict]:
        import torch
        import transformers

        config = getattr(transformers, config_cls)(**cfg)
        model = getattr(transformers, model_cls)(config).eval()
        if prepare is not None:
            prepare(model)
        return model, _inputs(inputs, config, torch)

    return build


def _random_codebooks(model: Any) -> None:
    """EnCodec's codebooks are zero buffers until trained: every code would tie at 0 and the decoder would see
    zeros, so the comparison would not exercise quantisation at all."""
    import torch

    g = torch.Generator().manual_seed(2)
    for layer in model.quantizer.layers:
        layer.codebook.embed.copy_(torch.randn(layer.codebook.embed.shape, generator=g))


def _inputs(kind: str, config: Any, torch: Any) -> dict[str, Any]:
    g = torch.Generator().manual_seed(1)
    if kind == "text":
        return {"input_ids": torch.randint(3, config.vocab_size, (1, SEQ), generator=g)}
    if kind == "seq2seq":
        ids = torch.randint(3, config.vocab_size, (1, SEQ), generator=g)
        return {"input_ids": ids, "decoder_input_ids": ids[:, :8]}
    if kind == "image":
        size = getattr(config, "image_size", IMAGE)
        size = size if isinstance(size, int) else size[0]
        return {"pixel_values": torch.randn(1, getattr(config, "num_channels", 3), size, size, generator=g)}
    if kind == "audio":
        return {"input_values": torch.randn(1, 1600, generator=g)}
    if kind == "whisper":
        frames = 2 * config.max_source_positions
        ids = torch.randint(3, config.vocab_size, (1, 8), generator=g)
        return {"input_features": torch.randn(1, config.num_mel_bins, frames, generator=g), "decoder_input_ids": ids}
    if kind == "whisper-encoder":
        frames = 2 * config.max_source_positions
        return {"input_features": torch.randn(1, config.num_mel_bins, frames, generator=g)}
    if kind == "ast":
        return {"input_values": torch.randn(1, config.max_length, config.num_mel_bins, generator=g)}
    if kind == "codec":
        return {"input_values": torch.randn(1, config.audio_channels, 800, generator=g)}
    raise ValueError(kind)


_ENC = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}
_ENC_VOCAB = {**_ENC, "vocab_size": 1000, "max_position_embeddings": 128}
_DEC = {**_ENC, "vocab_size": 1000, "max_position_embeddings": 128}
_VIT = {**_ENC, "image_size": IMAGE, "patch_size": 8}
_SEQ2SEQ = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "vocab_size": 1000,
}
_W2V = {
    "conv_dim": [16, 16],
    "conv_stride": [5, 2],
    "conv_kernel": [10, 3],
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 4,
}
_WHISPER_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1}


def _cnn(kind: str) -> Callable[[], tuple[Any, dict]]:
    """Hand-built CNNs with the normalisations and pools transformers' vision models rarely use."""

    def build() -> tuple[Any, dict]:
        import torch
        from torch import nn

        if kind == "groupnorm":
            layers = [nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU(), nn.AdaptiveAvgPool2d((3, 5))]
        elif kind == "instancenorm":
            layers = [nn.Conv2d(3, 8, 3), nn.InstanceNorm2d(8, affine=True), nn.LeakyReLU(0.1), nn.AdaptiveMaxPool2d(2)]
        elif kind == "lrn-ceil":
            layers = [
                nn.Conv2d(3, 8, 5, stride=2),
                nn.LocalResponseNorm(3),
                nn.ReLU(),
                nn.MaxPool2d(3, stride=2, ceil_mode=True),
                nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
            ]
        elif kind == "efficientnet-head":  # a pool whose kernel exceeds the map (EfficientNet's head)
            layers = [
                nn.Conv2d(3, 8, 3, stride=4),
                nn.BatchNorm2d(8),
                nn.Hardswish(),
                nn.AvgPool2d(1280, ceil_mode=True),
            ]
        elif kind == "depthwise-transposed":
            layers = [
                nn.Conv2d(3, 12, 3, padding=1),
                nn.Conv2d(12, 12, 3, padding=2, dilation=2, groups=12),
                nn.PReLU(12),
                nn.ConvTranspose2d(12, 8, 4, stride=2, padding=1, groups=4),
                nn.PixelShuffle(2),
                nn.Upsample(scale_factor=0.5, mode="bilinear"),
            ]
        else:
            raise ValueError(kind)
        torch.manual_seed(0)
        model = nn.Sequential(*layers).eval()
        return model, {"input": torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1))}

    return build


def _nn(kind: str) -> Callable[[], tuple[Any, dict]]:
    """Hand-built torch.nn models for what transformers' models rarely produce: recurrent cells,
    nn.MultiheadAttention with masks, and one Dynamo graph serving several module instances."""

    def build() -> tuple[Any, dict]:
        import torch
        from torch import nn

        g = torch.Generator().manual_seed(1)
        torch.manual_seed(0)
        if kind == "rnn":

            class Recurrent(nn.Module):
                """A bidirectional 2-layer LSTM feeding a GRU: the cells unroll into per-step matmuls."""

                def __init__(self) -> None:
                    super().__init__()
                    self.lstm = nn.LSTM(32, 48, num_layers=2, batch_first=True, bidirectional=True)
                    self.gru = nn.GRU(96, 32, batch_first=True)

                def forward(self, x: torch.Tensor) -> torch.Tensor:
                    return self.gru(self.lstm(x)[0])[0]

            return Recurrent().eval(), {"x": torch.randn(2, SEQ, 32, generator=g)}
        if kind == "transformer-decoder":
            layer = nn.TransformerDecoderLayer(64, 4, 128, dropout=0.0, batch_first=True, norm_first=True)
            model = nn.TransformerDecoder(layer, num_layers=2).eval()
            tgt_mask = nn.Transformer.generate_square_subsequent_mask(8)
            inputs = {
                "tgt": torch.randn(1, 8, 64, generator=g),
                "memory": torch.randn(1, SEQ, 64, generator=g),
                "tgt_mask": tgt_mask,
                # without it the decoder checks the mask with .item() and Dynamo captures no graph at all
                "tgt_is_causal": True,
                "memory_key_padding_mask": torch.arange(SEQ)[None] >= SEQ - 3,
            }
            return model, inputs
        if kind == "graph-break-blocks":

            class Block(nn.Module):
                """A block whose forward breaks the Dynamo graph: the code after the break is one compiled
                graph that every instance calls with its own weights (parameters are graph inputs that
                Dynamo does not guard on), as in transformers models with data-dependent branches."""

                def __init__(self) -> None:
                    super().__init__()
                    self.norm = nn.LayerNorm(32)
                    self.fc = nn.Linear(32, 32)

                def forward(self, x: torch.Tensor) -> torch.Tensor:
                    x = self.norm(x)
                    torch._dynamo.graph_break()
                    return x + self.fc(x).relu()

            return nn.Sequential(*(Block() for _ in range(3))).eval(), {"input": torch.randn(2, SEQ, 32, generator=g)}
        raise ValueError(kind)

    return build


def _diffusers(kind: str) -> Callable[[], tuple[Any, dict]]:
    """Small diffusers models (the optional ``models`` extra); a missing diffusers makes the row a skip."""

    def build() -> tuple[Any, dict]:
        import diffusers
        import torch

        g = torch.Generator().manual_seed(1)
        torch.manual_seed(0)
        if kind == "unet":
            model = diffusers.UNet2DConditionModel(
                sample_size=16,
                in_channels=4,
                out_channels=4,
                block_out_channels=(32, 64),
                layers_per_block=1,
                down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
                cross_attention_dim=32,
                attention_head_dim=8,
                norm_num_groups=8,
            )
            inputs = {
                "sample": torch.randn(1, 4, 16, 16, generator=g),
                "timestep": torch.tensor([10]),
                "encoder_hidden_states": torch.randn(1, 8, 32, generator=g),
            }
        elif kind == "vae":
            model = diffusers.AutoencoderKL(
                in_channels=3,
                out_channels=3,
                down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
                block_out_channels=(16, 32),
                layers_per_block=1,
                latent_channels=4,
                norm_num_groups=8,
                sample_size=IMAGE,
            )
            inputs = {"sample": torch.randn(1, 3, IMAGE, IMAGE, generator=g)}
        elif kind == "dit":
            model = diffusers.DiTTransformer2DModel(
                num_attention_heads=2,
                attention_head_dim=16,
                in_channels=4,
                out_channels=4,
                num_layers=2,
                sample_size=8,
                patch_size=2,
                num_embeds_ada_norm=10,
            )
            inputs = {
                "hidden_states": torch.randn(1, 4, 8, 8, generator=g),
                "timestep": torch.tensor([3]),
                "class_labels": torch.tensor([1]),
            }
        else:
            raise ValueError(kind)
        return model.eval(), inputs

    return build


SPECS: list[Spec] = [
    # encoders
    Spec("bert", "encoder", "MHA, GELU, LayerNorm", _tf("BertConfig", "BertModel", **_ENC_VOCAB)),
    Spec("roberta", "encoder", "padding-offset positions", _tf("RobertaConfig", "RobertaModel", **_ENC_VOCAB)),
    Spec(
        "distilbert",
        "encoder",
        "no token types",
        _tf("DistilBertConfig", "DistilBertModel", dim=64, n_layers=2, n_heads=4, hidden_dim=128, vocab_size=1000),
    ),
    Spec(
        "albert",
        "encoder",
        "shared layers, factorised embeddings",
        _tf("AlbertConfig", "AlbertModel", embedding_size=32, **_ENC_VOCAB),
    ),
    Spec(
        "deberta-v2",
        "encoder",
        "disentangled relative attention, gathers",
        _tf("DebertaV2Config", "DebertaV2Model", **_ENC_VOCAB),
    ),
    Spec(
        "electra",
        "encoder",
        "embedding projection",
        _tf("ElectraConfig", "ElectraModel", embedding_size=32, **_ENC_VOCAB),
    ),
    Spec(
        "xlm-roberta", "encoder", "large vocabulary embedding", _tf("XLMRobertaConfig", "XLMRobertaModel", **_ENC_VOCAB)
    ),
    Spec("mpnet", "encoder", "relative position buckets", _tf("MPNetConfig", "MPNetModel", **_ENC_VOCAB)),
    Spec(
        "longformer",
        "encoder",
        "sliding-window attention through as_strided",
        _tf(
            "LongformerConfig", "LongformerModel", attention_window=8, **{**_ENC_VOCAB, "max_position_embeddings": 200}
        ),
    ),
    Spec(
        "convbert",
        "encoder",
        "span-based dynamic convolution, unfold",
        _tf("ConvBertConfig", "ConvBertModel", embedding_size=64, **_ENC_VOCAB),
    ),
    Spec(
        "modernbert",
        "encoder",
        "alternating local/global attention, rotary, GeGLU",
        _tf(
            "ModernBertConfig",
            "ModernBertModel",
            global_attn_every_n_layers=2,
            local_attention=8,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            cls_token_id=1,
            sep_token_id=2,
            **_ENC_VOCAB,
        ),
    ),
    Spec(
        "funnel",
        "encoder",
        "sequence pooling between blocks, relative attention",
        _tf(
            "FunnelConfig",
            "FunnelModel",
            d_model=64,
            n_head=4,
            d_head=16,
            d_inner=128,
            block_sizes=[1, 1],
            vocab_size=1000,
        ),
    ),
    Spec(
        "clip-text",
        "encoder",
        "causal mask in an encoder, quick GELU, argmax pooling",
        _tf("CLIPTextConfig", "CLIPTextModel", **{**_ENC_VOCAB, "max_position_embeddings": 32}),
    ),
    # decoders
    Spec(
        "gpt2",
        "decoder",
        "MHA, Conv1D, learned positions",
        _tf("GPT2Config", "GPT2LMHeadModel", n_embd=64, n_layer=2, n_head=4, vocab_size=1000),
        True,
    ),
    Spec(
        "gpt-neo",
        "decoder",
        "local/global attention layers",
        _tf(
            "GPTNeoConfig",
            "GPTNeoForCausalLM",
            hidden_size=64,
            num_layers=2,
            num_heads=4,
            attention_types=[[["global", "local"], 1]],
            window_size=8,
            vocab_size=1000,
            max_position_embeddings=128,
        ),
        True,
    ),
    Spec(
        "gpt-j",
        "decoder",
        "rotary (interleaved), parallel blocks",
        _tf(
            "GPTJConfig",
            "GPTJForCausalLM",
            n_embd=64,
            n_layer=2,
            n_head=4,
            rotary_dim=8,
            vocab_size=1000,
            n_positions=128,
        ),
        True,
    ),
    Spec("gpt-neox", "decoder", "partial rotary, fused QKV", _tf("GPTNeoXConfig", "GPTNeoXForCausalLM", **_DEC), True),
    Spec(
        "opt",
        "decoder",
        "learned offset positions",
        _tf(
            "OPTConfig",
            "OPTForCausalLM",
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            ffn_dim=128,
            word_embed_proj_dim=64,
            vocab_size=1000,
        ),
        True,
    ),
    Spec(
        "bloom",
        "decoder",
        "ALiBi",
        _tf("BloomConfig", "BloomForCausalLM", hidden_size=64, n_layer=2, n_head=4, vocab_size=1000),
        True,
    ),
    Spec(
        "falcon",
        "decoder",
        "multi-query attention, parallel attention",
        _tf(
            "FalconConfig",
            "FalconForCausalLM",
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            multi_query=True,
            vocab_size=1000,
        ),
        True,
    ),
    Spec(
        "llama",
        "decoder",
        "GQA, RMSNorm, rotary, SwiGLU",
        _tf("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, **_DEC),
        True,
    ),
    Spec(
        "mistral",
        "decoder",
        "GQA with a sliding window",
        _tf("MistralConfig", "MistralForCausalLM", num_key_value_heads=2, sliding_window=8, **_DEC),
        True,
    ),
    Spec(
        "qwen2", "decoder", "GQA, QKV bias", _tf("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2, **_DEC), True
    ),
    Spec(
        "qwen3",
        "decoder",
        "GQA, QK-norm",
        _tf("Qwen3Config", "Qwen3ForCausalLM", num_key_value_heads=2, head_dim=16, **_DEC),
        True,
    ),
    Spec(
        "gemma",
        "decoder",
        "MQA, GeGLU, scaled embeddings",
        _tf("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=1, head_dim=16, **_DEC),
        True,
    ),
    Spec(
        "gemma2",
        "decoder",
        "soft-capping, alternating local/global",
        _tf("Gemma2Config", "Gemma2ForCausalLM", num_key_value_heads=2, head_dim=16, sliding_window=8, **_DEC),
        True,
    ),
    Spec(
        "gemma3",
        "decoder",
        "QK-norm, local/global layers with their own rotary bases",
        _tf(
            "Gemma3TextConfig",
            "Gemma3ForCausalLM",
            num_key_value_heads=2,
            head_dim=16,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
            **_DEC,
        ),
        True,
    ),
    Spec("phi", "decoder", "partial rotary, parallel MLP", _tf("PhiConfig", "PhiForCausalLM", **_DEC), True),
    Spec(
        "phi3",
        "decoder",
        "fused QKV and gate-up",
        _tf("Phi3Config", "Phi3ForCausalLM", num_key_value_heads=2, pad_token_id=0, **_DEC),
        True,
    ),
    Spec(
        "mixtral",
        "decoder",
        "mixture of experts (top-2 routing)",
        _tf(
            "MixtralConfig",
            "MixtralForCausalLM",
            num_key_value_heads=2,
            num_local_experts=4,
            num_experts_per_tok=2,
            **_DEC,
        ),
        True,
    ),
    Spec(
        "qwen2-moe",
        "decoder",
        "MoE with a shared expert",
        _tf(
            "Qwen2MoeConfig",
            "Qwen2MoeForCausalLM",
            num_key_value_heads=2,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            shared_expert_intermediate_size=64,
            **_DEC,
        ),
        True,
    ),
    Spec(
        "stablelm",
        "decoder",
        "partial rotary, LayerNorm",
        _tf("StableLmConfig", "StableLmForCausalLM", num_key_value_heads=2, **_DEC),
        True,
    ),
    Spec(
        "starcoder2",
        "decoder",
        "GQA, sliding window, biases",
        _tf("Starcoder2Config", "Starcoder2ForCausalLM", num_key_value_heads=2, **_DEC),
        True,
    ),
    Spec(
        "mpt",
        "decoder",
        "ALiBi without biases",
        _tf(
            "MptConfig",
            "MptForCausalLM",
            d_model=64,
            n_heads=4,
            n_layers=2,
            expansion_ratio=2,
            vocab_size=1000,
            max_seq_len=128,
        ),
        True,
    ),
    Spec(
        "gpt-bigcode",
        "decoder",
        "multi-query attention, fused KV",
        _tf(
            "GPTBigCodeConfig",
            "GPTBigCodeForCausalLM",
            n_embd=64,
            n_layer=2,
            n_head=4,
            multi_query=True,
            vocab_size=1000,
            n_positions=128,
            bos_token_id=1,
            eos_token_id=2,
        ),
        True,
    ),
    Spec(
        "mamba",
        "decoder",
        "selective state-space scan, causal conv1d",
        _tf("MambaConfig", "MambaForCausalLM", hidden_size=64, num_hidden_layers=2, vocab_size=1000, state_size=8),
        True,
    ),
    Spec(
        "deepseek-v3",
        "decoder",
        "multi-head latent attention, grouped top-k MoE routing",
        _tf(
            "DeepseekV3Config",
            "DeepseekV3ForCausalLM",
            intermediate_size=128,
            moe_intermediate_size=32,
            first_k_dense_replace=1,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_group=1,
            topk_group=1,
            kv_lora_rank=16,
            q_lora_rank=32,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=16,
            num_key_value_heads=4,
            **{k: v for k, v in _DEC.items() if k != "intermediate_size"},
        ),
        True,
    ),
    Spec(
        "gpt-oss",
        "decoder",
        "attention sinks, sliding window, MoE with clamped SwiGLU",
        _tf(
            "GptOssConfig",
            "GptOssForCausalLM",
            num_key_value_heads=2,
            head_dim=16,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"],
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            **{**_DEC, "intermediate_size": 64},
        ),
        True,
    ),
    # encoder-decoders
    Spec(
        "t5",
        "encoder-decoder",
        "relative attention bias, RMSNorm",
        _tf(
            "T5Config", "T5Model", "seq2seq", d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=1000
        ),
    ),
    Spec(
        "bart",
        "encoder-decoder",
        "cross-attention",
        _tf(
            "BartConfig",
            "BartModel",
            "seq2seq",
            **_SEQ2SEQ,
            max_position_embeddings=128,
        ),
    ),
    Spec(
        "marian",
        "encoder-decoder",
        "sinusoidal positions",
        _tf(
            "MarianConfig",
            "MarianModel",
            "seq2seq",
            **_SEQ2SEQ,
            max_position_embeddings=128,
            pad_token_id=0,
            decoder_start_token_id=0,
        ),
    ),
    Spec(
        "pegasus",
        "encoder-decoder",
        "pre-norm, sinusoidal positions",
        _tf(
            "PegasusConfig",
            "PegasusModel",
            "seq2seq",
            **_SEQ2SEQ,
            max_position_embeddings=128,
        ),
    ),
    Spec(
        "whisper",
        "encoder-decoder",
        "conv front-end on log-mel features",
        _tf(
            "WhisperConfig",
            "WhisperModel",
            "whisper",
            **_SEQ2SEQ,
            num_mel_bins=16,
            max_source_positions=32,
            max_target_positions=64,
            **_WHISPER_IDS,
        ),
    ),
    # vision
    Spec("vit", "vision", "patch embedding conv, class token", _tf("ViTConfig", "ViTModel", "image", **_VIT)),
    Spec("deit", "vision", "distillation token", _tf("DeiTConfig", "DeiTModel", "image", **_VIT)),
    Spec(
        "beit",
        "vision",
        "relative position bias table",
        _tf("BeitConfig", "BeitModel", "image", use_relative_position_bias=True, **_VIT),
    ),
    Spec(
        "dinov2",
        "vision",
        "interpolated position embeddings, layer scale",
        _tf("Dinov2Config", "Dinov2Model", "image", **_VIT),
    ),
    Spec(
        "swin",
        "vision",
        "shifted windows (roll), patch merging",
        _tf(
            "SwinConfig",
            "SwinModel",
            "image",
            image_size=IMAGE,
            patch_size=4,
            embed_dim=16,
            depths=[2, 2],
            num_heads=[2, 4],
            window_size=4,
        ),
    ),
    Spec(
        "segformer",
        "vision",
        "overlapping patch embeddings, reduced attention",
        _tf(
            "SegformerConfig",
            "SegformerModel",
            "image",
            num_encoder_blocks=2,
            depths=[1, 1],
            sr_ratios=[2, 1],
            hidden_sizes=[16, 32],
            num_attention_heads=[1, 2],
            patch_sizes=[7, 3],
            strides=[4, 2],
            mlp_ratios=[2, 2],
        ),
    ),
    Spec(
        "mobilevit",
        "vision",
        "unfold/fold of patches around convs",
        _tf(
            "MobileViTConfig",
            "MobileViTModel",
            "image",
            image_size=64,
            hidden_sizes=[16, 24, 32],
            neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
            num_attention_heads=2,
        ),
    ),
    Spec(
        "clip-vision",
        "vision",
        "pre-LayerNorm, quick GELU, class embedding",
        _tf("CLIPVisionConfig", "CLIPVisionModel", "image", **_VIT),
    ),
    Spec(
        "levit",
        "vision",
        "attention biases gathered by offset, subsampling attention, hardswish",
        _tf(
            "LevitConfig",
            "LevitModel",
            "image",
            image_size=64,
            hidden_sizes=[32, 48, 64],
            num_attention_heads=[2, 2, 2],
            depths=[1, 1, 1],
            key_dim=[8, 8, 8],
            patch_size=16,
            down_ops=[["Subsample", 8, 2, 4, 2, 2], ["Subsample", 8, 2, 4, 2, 2]],
        ),
    ),
    Spec(
        "poolformer",
        "vision",
        "average pooling as token mixer (count_include_pad=False), GroupNorm(1)",
        _tf("PoolFormerConfig", "PoolFormerModel", "image", hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1]),
    ),
    Spec(
        "convnext",
        "cnn",
        "depthwise 7x7, channels-last LayerNorm",
        _tf("ConvNextConfig", "ConvNextModel", "image", hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
    ),
    Spec(
        "convnextv2",
        "cnn",
        "global response normalisation",
        _tf("ConvNextV2Config", "ConvNextV2Model", "image", hidden_sizes=[16, 32], depths=[1, 1], num_stages=2),
    ),
    Spec(
        "resnet",
        "cnn",
        "bottlenecks, batch norm, max pool",
        _tf(
            "ResNetConfig",
            "ResNetModel",
            "image",
            embedding_size=16,
            hidden_sizes=[16, 32],
            depths=[1, 1],
            layer_type="bottleneck",
        ),
    ),
    Spec(
        "efficientnet",
        "cnn",
        "squeeze-excite, depthwise, swish, ceil-mode pool head",
        _tf(
            "EfficientNetConfig",
            "EfficientNetModel",
            "image",
            image_size=IMAGE,
            width_coefficient=0.25,
            depth_coefficient=0.25,
            hidden_dim=320,
        ),
    ),
    Spec(
        "regnet",
        "cnn",
        "grouped convs, squeeze-excite",
        _tf(
            "RegNetConfig",
            "RegNetModel",
            "image",
            embedding_size=16,
            hidden_sizes=[16, 32],
            depths=[1, 1],
            groups_width=8,
        ),
    ),
    Spec(
        "mobilenet-v2",
        "cnn",
        "inverted residuals, ReLU6",
        _tf("MobileNetV2Config", "MobileNetV2Model", "image", image_size=IMAGE, depth_multiplier=0.35),
    ),
    Spec("cnn-groupnorm", "cnn", "GroupNorm, SiLU, adaptive avg pool to 3x5", _cnn("groupnorm")),
    Spec("cnn-instancenorm", "cnn", "InstanceNorm, LeakyReLU, adaptive max pool", _cnn("instancenorm")),
    Spec("cnn-lrn-ceil", "cnn", "LocalResponseNorm, ceil-mode max/avg pools", _cnn("lrn-ceil")),
    Spec("cnn-efficientnet-head", "cnn", "pool kernel 1280 over a small map", _cnn("efficientnet-head")),
    Spec(
        "cnn-depthwise-transposed",
        "cnn",
        "dilated depthwise, grouped transposed conv, PReLU, pixel shuffle",
        _cnn("depthwise-transposed"),
    ),
    # audio
    Spec(
        "wav2vec2",
        "audio",
        "conv feature encoder, positional conv (weight norm)",
        _tf(
            "Wav2Vec2Config",
            "Wav2Vec2Model",
            "audio",
            **_W2V,
            **_ENC,
        ),
    ),
    Spec(
        "hubert",
        "audio",
        "wav2vec2-style encoder, group-norm feature extractor",
        _tf(
            "HubertConfig",
            "HubertModel",
            "audio",
            **_W2V,
            **_ENC,
        ),
    ),
    Spec(
        "whisper-encoder",
        "audio",
        "the encoder alone",
        _tf(
            "WhisperConfig",
            "WhisperForAudioClassification",
            "whisper-encoder",
            **_SEQ2SEQ,
            num_mel_bins=16,
            max_source_positions=32,
            **_WHISPER_IDS,
        ),
    ),
    Spec(
        "ast",
        "audio",
        "spectrogram patches, two class tokens",
        _tf(
            "ASTConfig",
            "ASTModel",
            "ast",
            max_length=64,
            num_mel_bins=32,
            patch_size=8,
            frequency_stride=8,
            time_stride=8,
            **_ENC,
        ),
    ),
    Spec(
        "wav2vec2-conformer",
        "audio",
        "conformer blocks: rotary attention, GLU, depthwise conv1d",
        _tf(
            "Wav2Vec2ConformerConfig",
            "Wav2Vec2ConformerModel",
            "audio",
            position_embeddings_type="rotary",
            conv_depthwise_kernel_size=7,
            **_W2V,
            **_ENC,
        ),
    ),
    Spec(
        "wavlm",
        "audio",
        "gated relative position bias",
        _tf("WavLMConfig", "WavLMModel", "audio", num_buckets=32, max_bucket_distance=64, **_W2V, **_ENC),
    ),
    Spec(
        "encodec",
        "audio",
        "LSTM, residual vector quantisation (argmin over codebooks), transposed conv1d",
        _tf(
            "EncodecConfig",
            "EncodecModel",
            "codec",
            hidden_size=32,
            num_filters=8,
            num_residual_layers=1,
            upsampling_ratios=[4, 2],
            codebook_size=64,
            codebook_dim=32,
            target_bandwidths=[6.0],
            sampling_rate=2400,
            prepare=_random_codebooks,
        ),
        output="audio_values",
        dynamo_config=(("allow_rnn", True),),
    ),
    # hand-built torch.nn models
    Spec(
        "rnn",
        "nn",
        "bidirectional 2-layer LSTM into a GRU (Dynamo's allow_rnn)",
        _nn("rnn"),
        dynamo_config=(("allow_rnn", True),),
    ),
    Spec(
        "transformer-decoder",
        "nn",
        "nn.TransformerDecoder: causal and key-padding masks, cross-attention",
        _nn("transformer-decoder"),
    ),
    Spec(
        "graph-break-blocks",
        "nn",
        "one graph (after a graph break) called by 3 module instances with their own weights",
        _nn("graph-break-blocks"),
    ),
    # diffusion (optional: pip install diffusers)
    Spec(
        "unet",
        "diffusion",
        "UNet2DConditionModel: timestep embedding, cross-attention, GroupNorm, nearest upsampling",
        _diffusers("unet"),
    ),
    Spec("vae", "diffusion", "AutoencoderKL: encode, posterior mode, decode", _diffusers("vae")),
    Spec("dit", "diffusion", "DiT: patchify, adaLN-zero conditioning on timestep and class", _diffusers("dit")),
]
BY_NAME = {s.name: s for s in SPECS}


def _main_output(out: Any, field: str | None = None) -> Any:
    """The tensor judged against eager: ``field`` of the output if the spec names one, else its first tensor."""
    import torch

    if field is not None:
        return getattr(out, field)
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, (tuple, list)):
        return next(o for o in out if isinstance(o, torch.Tensor))
    raise TypeError(f"no tensor output in {type(out).__name__}")


def _isa() -> str:
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        return platform.machine()
    have = [f for f in ("avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8") if f" {f}" in flags]
    return ", ".join(have) or "no avx512"


def run_one(name: str, *, timing_calls: int = 18, generate: bool = True) -> dict[str, Any]:
    """Build, compile and judge one model in this process; returns its row."""
    import torch

    import fxvino

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    spec = BY_NAME[name]
    row: dict[str, Any] = {"model": name, "family": spec.family, "covers": spec.covers}
    torch.manual_seed(0)
    try:
        model, inputs = spec.build()
    except ImportError as e:  # an optional library (diffusers) is not installed: nothing to judge
        row.update(ok=False, skipped=f"{e.name or e} is not installed")
        return row
    with torch.no_grad(), torch._dynamo.config.patch(dict(spec.dynamo_config)):
        expected = _main_output(model(**inputs), spec.output)
        compiled = torch.compile(model, backend="fxvino")
        t0 = time.perf_counter()
        with fxvino.collect_reports() as report:
            actual = _main_output(compiled(**inputs), spec.output)
        row["first_call_s"] = round(time.perf_counter() - t0, 2)
        scale = expected.abs().max().item() or 1.0
        row["rel_err"] = (actual - expected).abs().max().item() / scale
        eager_t, fx_t = _time_blocks(model, compiled, inputs, timing_calls)
    row["eager_ms"] = round(1e3 * statistics.median(eager_t), 3)
    row["fxvino_ms"] = round(1e3 * statistics.median(fx_t), 3)
    row["speedup"] = statistics.median(eager_t) / statistics.median(fx_t)
    _add_report(row, report)
    if spec.generate and generate:
        row["generate"] = _generate(spec, fxvino, torch)
    row["ok"] = _ok(row)
    return row


def _time_blocks(model: Any, compiled: Any, inputs: dict[str, Any], calls: int) -> tuple[list, list]:
    """Per-call seconds of eager and fxvino (two warm-up calls each, then :func:`time_in_blocks`)."""
    for _ in range(2):
        model(**inputs)
        compiled(**inputs)
    blocks = min(calls, 6)
    times = time_in_blocks(
        {"eager": lambda: model(**inputs), "fxvino": lambda: compiled(**inputs)}, blocks, -(-calls // blocks)
    )
    return times["eager"], times["fxvino"]


def time_in_blocks(contenders: dict[str, Callable[[], Any]], blocks: int, per_block: int) -> dict[str, list[float]]:
    """Per-call seconds of each contender, in short blocks that alternate (ABBA), each after a pause.

    Not call by call: a call that follows another backend's pays for it. PyTorch's OpenMP threads
    keep spinning for milliseconds after its ops and OpenVINO's threads then share the cores with
    them (docs/performance/call-path.md), so alternating single calls measured the switch, and
    mostly against fxvino: on the AMX Xeon, VAE 1.57x eager that way against 2.26x in blocks,
    ResNet 1.96x against 2.45x. The pause (longer than either spin) and one untimed call start
    each block alike; alternating blocks still spreads the machine's other load over all. No GC
    while timing: with millisecond calls on a shared 2-core machine a single pause would otherwise
    decide a median.
    """
    import gc

    times: dict[str, list[float]] = {name: [] for name in contenders}
    order = list(contenders.items())
    gc.disable()
    try:
        for b in range(blocks):
            for name, fn in order if b % 4 in (0, 3) else order[::-1]:
                time.sleep(_SETTLE_S)
                fn()
                for _ in range(per_block):
                    t = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t)
    finally:
        gc.enable()
    return times


def _add_report(row: dict[str, Any], report: Any) -> None:
    row["ov_ops"] = sum(report.ov_ops.values())
    row["torch_ops"] = sum(report.torch_ops.values())
    row["partitions"] = report.num_ov_partitions
    row["graphs"] = len(report.graphs)
    seen: dict[str, str] = {}
    for f in report.fallbacks:
        seen.setdefault(f"{f.op} -> {f.ran_on}", f.reason.splitlines()[0][:160])
    row["fallbacks"] = [f"{k}: {v}" for k, v in seen.items()]
    # A frame Dynamo ran eagerly (its recompile limit reached) never reached fxvino: not on OpenVINO.
    row["fallbacks"] += [f"Dynamo ran a frame eagerly x{b.count}: {b.kind}" for b in report.dynamo if b.eager_frame]


def _generate(spec: Spec, fxvino: Any, torch: Any) -> dict[str, Any]:
    torch.manual_seed(0)
    model, inputs = spec.build()
    ids = inputs["input_ids"]
    kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
    expected = model.generate(ids, **kwargs)
    model.forward = torch.compile(model.forward, backend="fxvino")
    with fxvino.collect_reports() as report:
        out = model.generate(ids, **kwargs)
    result: dict[str, Any] = {"tokens_equal": bool(torch.equal(out, expected))}
    _add_report(result, report)
    return result


def _ok(row: dict[str, Any]) -> bool:
    fully = row["torch_ops"] == 0 and not row["fallbacks"] and row["ov_ops"] > 0
    gen = row.get("generate")
    if gen is not None:
        fully = fully and gen["tokens_equal"] and gen["torch_ops"] == 0 and not gen["fallbacks"]
    return bool(row["rel_err"] <= TOLERANCE and fully)


def _run_isolated(name: str, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.models", "--child", name]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=Path(__file__).parents[1])
    except subprocess.TimeoutExpired:
        return {"model": name, "ok": False, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:200]
        return {"model": name, "ok": False, "error": f"exit {proc.returncode}: {tail}"}
    row = json.loads(lines[-1])
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    return row


def _reason(row: dict[str, Any]) -> str:
    if "error" in row:
        return row["error"]
    if "skipped" in row:
        return f"skipped: {row['skipped']}"
    why = []
    if row["rel_err"] > TOLERANCE:
        why.append(f"relative error {row['rel_err']:.1e}")
    gen = row.get("generate") or {}
    if gen and not gen.get("tokens_equal", True):
        why.append("generate() tokens differ from eager")
    why += row["fallbacks"] + gen.get("fallbacks", [])
    return "; ".join(dict.fromkeys(why)) or "nothing on OpenVINO"


def _short_fallbacks(row: dict[str, Any]) -> str:
    """The fallbacks of a row (its own call and generate()'s) for one table cell: op and reason, cut short."""
    items = dict.fromkeys(row.get("fallbacks", []) + (row.get("generate") or {}).get("fallbacks", []))
    cells = [f[:70] + ("..." if len(f) > 70 else "") for f in items]
    return "; ".join(cells).replace("|", "/")


def _progress(row: dict[str, Any]) -> str:
    """One line per finished model, so a long run shows its results as it goes."""
    if "error" in row or "skipped" in row:
        return f"NOT OK: {_reason(row)[:150]}"
    gen = row.get("generate")
    text = (
        f"rel. err {row['rel_err']:.1e}, ops OV/PyTorch {row['ov_ops']}/{row['torch_ops']}, "
        f"{row['partitions']} partition(s), {row['speedup']:.2f}x, first call {row['first_call_s']:.1f} s"
    )
    if gen is not None:
        text += ", generate " + ("same tokens" if gen["tokens_equal"] else "DIFFERENT tokens")
    return ("ok: " if row.get("ok") else "NOT OK: ") + text + ("" if row.get("ok") else f" [{_reason(row)[:150]}]")


def _speed(row: dict[str, Any]) -> str:
    """Speed-up with the two medians it comes from (rows of older runs have only the ratio)."""
    text = f"{row['speedup']:.2f}x"
    if "eager_ms" in row:
        text += f" ({row['eager_ms']:.2f} / {row['fxvino_ms']:.2f} ms)"
    return text


def render(rows: list[dict[str, Any]], header: str) -> str:
    lines = [
        header,
        "",
        "| model | family | correct (rel. err) | ops OV / PyTorch | graphs / OV partitions | fallbacks | generate "
        "| speed-up (eager / fxvino) | first call |",
        "|---|---|---|--:|--:|---|---|--:|--:|",
    ]
    for r in rows:
        family = BY_NAME[r["model"]].family if r["model"] in BY_NAME else r.get("family", "")
        if "error" in r or "skipped" in r:
            what = "error" if "error" in r else "skipped"
            lines.append(f"| {r['model']} | {family} | {what} | | | {_reason(r)[:80]} | | | |")
            continue
        gen = r.get("generate")
        gtxt = "" if gen is None else ("same tokens" if gen["tokens_equal"] else "DIFFERENT")
        if gen is not None:
            gtxt += f", {gen['ov_ops']}/{gen['torch_ops']} ops in {gen['graphs']} graphs"
        mark = "yes" if r["rel_err"] <= TOLERANCE else "NO"
        lines.append(
            f"| {r['model']} | {family} | {mark} ({r['rel_err']:.1e}) | {r['ov_ops']} / {r['torch_ops']} | "
            f"{r.get('graphs', '?')} / {r['partitions']} | {_short_fallbacks(r) or '-'} | {gtxt} | "
            f"{_speed(r)} | {r['first_call_s']:.1f} s |"
        )
    good = [r for r in rows if r.get("ok")]
    skipped = [r for r in rows if "skipped" in r]
    lines += [
        "",
        f"**{len(good)} / {len(rows) - len(skipped)} correct and fully on OpenVINO** (float32, relative error <= "
        f"{TOLERANCE:g}, no op in PyTorch, no fallback; decoders also with eager's generate() tokens)"
        + (f"; {len(skipped)} skipped." if skipped else "."),
    ]
    bad = [r for r in rows if not r.get("ok")]
    if bad:
        lines += ["", "Not there yet:", ""] + [f"- **{r['model']}**: {_reason(r)}" for r in bad]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated subset (default: all)")
    parser.add_argument("--list", action="store_true", help="list the models and what each covers")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model (default 300)")
    parser.add_argument("--json", help="write every row as JSON")
    parser.add_argument("--markdown", help="write the table as markdown")
    parser.add_argument(
        "--merge", nargs="+", metavar="JSON", help="re-render from runs' --json files (later rows replace earlier)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.merge:
        runs = [json.loads(Path(f).read_text()) for f in args.merge]
        merged = {r["model"]: r for run in runs for r in run["rows"]}
        order = [s.name for s in SPECS if s.name in merged]
        header = runs[0]["header"] + (
            f" (merged with {len(runs) - 1} re-run(s): {', '.join(args.merge[1:])})" if len(runs) > 1 else ""
        )
        text = render([merged[n] for n in order], header)
        print(text)
        if args.markdown:
            Path(args.markdown).write_text(text)
        return 0
    if args.child:
        print(json.dumps(run_one(args.child)), flush=True)
        return 0
    if args.list:
        for s in SPECS:
            print(f"{s.name:26} {s.family:16} {s.covers}{' (+generate)' if s.generate else ''}")
        return 0
    names = [n.strip() for n in args.models.split(",")] if args.models else [s.name for s in SPECS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; valid: {', '.join(BY_NAME)}")
    import openvino
    import torch

    header = (
        f"fxvino model suite, {time.strftime('%Y-%m-%d')}: torch {torch.__version__}, openvino "
        f"{openvino.__version__}, {os.cpu_count()} cores ({_isa()}); float32, 2 threads, random weights"
    )
    print(header, flush=True)
    rows = []
    for i, name in enumerate(names, 1):
        row = _run_isolated(name, args.timeout)
        rows.append(row)
        print(f"[{i}/{len(names)}] {name}: {_progress(row)}", flush=True)
    text = render(rows, header)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
