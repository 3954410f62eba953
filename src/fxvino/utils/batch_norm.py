"""Inference batch norm as one per-channel scale and shift, computed as eager's CPU kernel does."""

from __future__ import annotations

import torch


def scale_and_shift(
    weight: torch.Tensor | None, bias: torch.Tensor | None, mean: torch.Tensor, var: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` as ``x * scale + shift``, in f32: the
    form both the batch-norm folding pass and the 16-bit lowering round once to 16 bits."""
    invstd = 1 / torch.sqrt(var.float() + eps)
    scale = invstd if weight is None else weight.float() * invstd
    shift = -mean.float() * scale
    return scale, shift if bias is None else shift + bias.float()
