"""Scaled dot-product attention onto OpenVINO's ScaledDotProductAttention (opset13)."""

from __future__ import annotations

import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


def _sdpa_ok(node: torch.fx.Node) -> str | None:
    dropout = node.kwargs.get("dropout_p", node.args[3] if len(node.args) > 3 else 0.0)
    if dropout:
        return "dropout_p > 0 needs random numbers matching PyTorch's"
    if 0 not in h.used_outputs(node) or h.used_outputs(node) - {0}:
        return "only the attention output (not logsumexp) is produced"
    return None


@lowers(aten._scaled_dot_product_flash_attention_for_cpu.default, validator=_sdpa_ok)
def sdpa_flash_cpu(ctx, node, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    dtype = h.out_dtype(node)
    args = [q, k, v]
    if attn_mask is not None:
        args.append(attn_mask if h.dtype_of(attn_mask) == torch.bool else h.cast(attn_mask, dtype))
    elif scale is not None:
        args.append(h.const(0, dtype))
    if scale is not None:
        args.append(h.const(scale, dtype))
    out = ops.scaled_dot_product_attention(*args, causal=bool(is_causal)).output(0)
    return (out, None)
