"""Core ATen ops that deliberately stay in PyTorch, each with the reason reports show."""

from __future__ import annotations

import torch

from fxvino.lowering.registry import declines

aten = torch.ops.aten

declines(
    aten.randperm.default,
    reason="a random permutation needs a sort of random keys per call (rand, randn and dropout are lowered)",
)
declines(
    aten.sym_stride.int,
    aten.sym_is_contiguous.default,
    reason="memory layout queries have no meaning for OpenVINO values",
)
declines(
    aten.resize_.default,
    reason="an in-place resize of a tensor's storage: functional graphs do not hold one, OpenVINO values have none",
)
declines(
    aten.atan2.out,
    reason="out= variants never appear in functional graphs (atan2.default is lowered)",
)
