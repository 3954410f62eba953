"""The decomposition table AOTAutograd applies, and fxvino's own decompositions.

The table is Core ATen's, less the ops OpenVINO has fused kernels for (lowered whole), plus
fxvino's own decompositions of fused PyTorch kernels that have none in PyTorch's tables, plus
the user's ``decompositions`` option.

``nn.TransformerEncoderLayer`` in eval mode under ``no_grad`` takes a fast path, a single
``aten._transformer_encoder_layer_fwd`` kernel that PyTorch does not decompose, so it ran in
PyTorch. Written out here with the ops it fuses (linear, SDPA, layer norm, GELU/ReLU), it
traces into ops fxvino lowers, and the attention meets OpenVINO's fused SDPA again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch._decomp
import torch.nn.functional as F
from torch._decomp import _core_aten_decompositions_post_autograd, get_decompositions

from fxvino.options import Options

aten = torch.ops.aten


def _encoder_layer_fwd(
    src: torch.Tensor,
    embed_dim: int,
    num_heads: int,
    qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor,
    proj_bias: torch.Tensor,
    use_gelu: bool,
    norm_first: bool,
    eps: float,
    norm_weight_1: torch.Tensor,
    norm_bias_1: torch.Tensor,
    norm_weight_2: torch.Tensor,
    norm_bias_2: torch.Tensor,
    ffn_weight_1: torch.Tensor,
    ffn_bias_1: torch.Tensor,
    ffn_weight_2: torch.Tensor,
    ffn_bias_2: torch.Tensor,
    mask: torch.Tensor | None = None,
    mask_type: int | None = None,
) -> torch.Tensor:
    """What the fast path computes (batch-first ``src``; in ``mask``, True means "masked out")."""
    batch, length, _ = src.shape
    head_dim = embed_dim // num_heads

    def self_attention(x: torch.Tensor) -> torch.Tensor:
        q, k, v = F.linear(x, qkv_weight, qkv_bias).chunk(3, dim=-1)
        q, k, v = (t.view(batch, length, num_heads, head_dim).transpose(1, 2) for t in (q, k, v))
        allowed = None
        if mask is not None:
            m = mask[:, None, None, :] if mask_type == 1 else mask  # 1: key padding [B, L]
            allowed = ~m if m.dtype == torch.bool else m  # a float mask is additive
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return F.linear(out.transpose(1, 2).reshape(batch, length, embed_dim), proj_weight, proj_bias)

    def feed_forward(x: torch.Tensor) -> torch.Tensor:
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(hidden) if use_gelu else F.relu(hidden), ffn_weight_2, ffn_bias_2)

    def norm1(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (embed_dim,), norm_weight_1, norm_bias_1, eps)

    def norm2(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (embed_dim,), norm_weight_2, norm_bias_2, eps)

    if norm_first:
        x = src + self_attention(norm1(src))
        return x + feed_forward(norm2(x))
    x = norm1(src + self_attention(src))
    return norm2(x + feed_forward(x))


def _checked(op: torch._ops.OpOverload, condition: Callable[..., torch.Tensor], message: str) -> Callable:
    """``op``'s own decomposition, after the check of its values that its eager kernel makes and the
    decomposition leaves out: the assert lowers into the partition's checks (eager_checks.py), so
    values eager rejects raise instead of giving a result (``binary_cross_entropy`` of an input
    past 1 returned NaN, ``bernoulli`` of a probability past 1 returned ones)."""
    decomposed = torch._decomp.decomposition_table[op]

    def run(*args, **kwargs):
        torch._assert_async(condition(*args), message)
        return decomposed(*args, **kwargs)

    return run


def _probabilities(x: torch.Tensor, *rest) -> torch.Tensor:
    return ((x >= 0) & (x <= 1)).all()


DECOMPOSITIONS: dict[torch._ops.OpOverload, Callable] = {
    aten._transformer_encoder_layer_fwd.default: _encoder_layer_fwd,
    aten.binary_cross_entropy.default: _checked(
        aten.binary_cross_entropy.default, _probabilities, "all elements of input should be between 0 and 1"
    ),
    aten.bernoulli.default: _checked(
        aten.bernoulli.default, _probabilities, "Expected p_in >= 0 && p_in <= 1 to be true, but got false."
    ),
}

# Ops OpenVINO has fused kernels for: lowered directly instead of decomposed.
KEEP_UNDECOMPOSED = frozenset(
    {
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        aten.silu.default,
        aten.hardswish.default,
        aten.hardsigmoid.default,
        aten.mish.default,
        aten.softplus.default,
        aten.elu.default,
        aten.leaky_relu.default,
        aten.hardtanh.default,
        aten.log_softmax.int,
        aten._log_softmax.default,
        aten.native_group_norm.default,
        # Pads, col2im and these backward ops have exact lowerings; the decomposed reflect pad
        # also hits an OpenVINO CPU bug (Abs of an i64 Range).
        aten.reflection_pad1d.default,
        aten.reflection_pad2d.default,
        aten.reflection_pad3d.default,
        aten.replication_pad1d.default,
        aten.replication_pad2d.default,
        aten.replication_pad3d.default,
        aten.col2im.default,
        aten.native_layer_norm_backward.default,
        aten.native_group_norm_backward.default,
        aten.embedding_dense_backward.default,
    }
)
# upsample_* are not listed: torch runs Python kernels for them while AOTAutograd traces, before
# this table is consulted, so they arrive decomposed (and lower fine that way).


def decomposition_table(options: Options) -> dict[torch._ops.OpOverload, Callable]:
    """The decompositions AOTAutograd applies: Core ATen's, less what we lower whole, plus the user's.

    Built once per distinct ``decompositions`` option; each caller gets its own copy of the dict.
    """
    return dict(_decomposition_table(options.decompositions))


# Non-composite ops that torch.export's Core ATen table decomposes beyond the post-autograd one.
_EXPORT_EXTRAS = (
    aten.upsample_nearest1d.default,
    aten.upsample_nearest2d.default,
    aten.upsample_nearest3d.default,
    aten._upsample_nearest_exact1d.default,
    aten._upsample_nearest_exact2d.default,
    aten._upsample_nearest_exact3d.default,
)


@functools.lru_cache(maxsize=8)
def _decomposition_table(extra: tuple[torch._ops.OpOverload, ...]) -> dict[torch._ops.OpOverload, Callable]:
    """``core_aten_decompositions()`` without its ~500 CompositeImplicitAutograd entries.

    Those entries (which cost 0.1-0.35 s to materialise, on every cold start) only map a
    composite op to its own ``decompose()``, which AOTAutograd's tracer does anyway.
    """
    table = _core_aten_decompositions_post_autograd()
    table.update(get_decompositions(list(_EXPORT_EXTRAS)))
    table = {k: v for k, v in table.items() if k not in KEEP_UNDECOMPOSED}
    table.update(DECOMPOSITIONS)
    table.update(get_decompositions(list(extra)))
    return table
