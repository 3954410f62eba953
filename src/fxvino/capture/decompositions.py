"""fxvino's own decompositions: fused PyTorch kernels without one in PyTorch's tables.

``nn.TransformerEncoderLayer`` in eval mode under ``no_grad`` takes a fast path, a single
``aten._transformer_encoder_layer_fwd`` kernel that PyTorch does not decompose, so it ran in
PyTorch. Written out here with the ops it fuses (linear, SDPA, layer norm, GELU/ReLU), it
traces into ops fxvino lowers, and the attention meets OpenVINO's fused SDPA again.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

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


DECOMPOSITIONS: dict[torch._ops.OpOverload, Callable] = {
    aten._transformer_encoder_layer_fwd.default: _encoder_layer_fwd,
}
