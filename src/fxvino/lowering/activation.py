"""Activations and softmax: kept undecomposed where OpenVINO has a fused kernel."""

from __future__ import annotations

import openvino.opset16 as ops
import torch
from openvino.utils.node_factory import NodeFactory

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


def _approx(node: torch.fx.Node) -> str | None:
    mode = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return None if mode in ("none", "tanh") else f"unknown approximate={mode!r}"


@lowers(aten.gelu.default, validator=_approx)
def gelu(ctx, node, x, approximate="none"):
    return ops.gelu(x, "erf" if approximate == "none" else "tanh").output(0)


@lowers(aten.silu.default)
def silu(ctx, node, x):
    """Swish without a beta input (beta 1). The Python opset function always adds an f32 beta
    constant, which f16/bf16 inputs reject, and a two-input Swish is not the shape the CPU
    plugin's LLM fusions match (gate/up/down products and SiLU into one LLMMLP kernel on AMX)."""
    return NodeFactory("opset4").create("Swish", [x], {}).output(0)


@lowers(aten.hardswish.default)
def hardswish(ctx, node, x):
    return ops.hswish(x).output(0)


@lowers(aten.hardsigmoid.default)
def hardsigmoid(ctx, node, x):
    return ops.hsigmoid(x).output(0)


@lowers(aten.mish.default)
def mish(ctx, node, x):
    return ops.mish(x).output(0)


@lowers(aten.softplus.default)
def softplus(ctx, node, x, beta=1, threshold=20):
    dtype = h.out_dtype(node)
    bx = ops.multiply(x, h.const(beta, dtype)) if beta != 1 else x
    soft = ops.divide(ops.softplus(bx), h.const(beta, dtype)) if beta != 1 else ops.softplus(bx)
    return ops.select(ops.greater(bx, h.const(threshold, dtype)), x, soft).output(0)


@lowers(aten.elu.default)
def elu(ctx, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    dtype = h.out_dtype(node)
    if input_scale != 1:
        x = ops.multiply(x, h.const(input_scale, dtype)).output(0)
    y = ops.elu(x, float(alpha)).output(0)
    if scale != 1:
        y = ops.multiply(y, h.const(scale, dtype)).output(0)
    return y


@lowers(aten.leaky_relu.default)
def leaky_relu(ctx, node, x, negative_slope=0.01):
    return ops.prelu(x, h.const([negative_slope], h.out_dtype(node))).output(0)


@lowers(aten.hardtanh.default)
def hardtanh(ctx, node, x, min_val=-1.0, max_val=1.0):
    dtype = h.out_dtype(node)
    return ops.minimum(ops.maximum(x, h.const(min_val, dtype)), h.const(max_val, dtype)).output(0)


@lowers(aten._softmax.default)
def softmax(ctx, node, x, dim, half_to_float):
    x = h.cast(x, h.out_dtype(node))
    return ops.softmax(x, h.norm_dim(dim, h.rank(x))).output(0)


@lowers(aten._log_softmax.default)
def log_softmax(ctx, node, x, dim, half_to_float):
    x = h.cast(x, h.out_dtype(node))
    return ops.log_softmax(x, h.norm_dim(dim, h.rank(x))).output(0)
