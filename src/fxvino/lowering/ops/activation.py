"""Activations and softmax: kept undecomposed where OpenVINO has a fused kernel."""

from __future__ import annotations

import math

import openvino as ov
import openvino.opset16 as ops
import torch
from openvino.utils.node_factory import NodeFactory

from fxvino.lowering import helpers as h
from fxvino.lowering import precise
from fxvino.lowering.registry import lowers
from fxvino.lowering.rounding import op_operand, op_result, opmath_operands

aten = torch.ops.aten


def _approx(node: torch.fx.Node) -> str | None:
    mode = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return None if mode in ("none", "tanh") else f"unknown approximate={mode!r}"


@lowers(aten.gelu.default, validator=_approx)
def gelu(ctx, node, x, approximate="none"):
    return ops.gelu(x, "erf" if approximate == "none" else "tanh").output(0)


# Above this many rows (tokens) the CPU plugin's LLMMLP kernel is slower than its separate
# products (4 gated-MLP layers of a 1.1B Llama in bf16 on AMX, LLMMLP/FullyConnected time: 0.96-0.99x
# up to 16 rows, 1.05x at 32, 1.46x at 64, 1.5-1.7x at 128-512), and it holds an extra copy of
# the MLP weights per compiled model.
LLM_MLP_MAX_ROWS = 32


@lowers(aten.silu.default)
def silu(ctx, node, x):
    """Swish, in the shape that decides whether the CPU plugin may fuse a gated MLP around it.

    A one-input Swish (beta 1) is what the plugin's MLPFusion matches: gate, up and down
    products and the SiLU become one LLMMLP kernel on AMX under the bf16 inference precision.
    That kernel wins only for a few rows (a decode step); for more rows, or a row count only
    known at run time (a prompt), a Swish with an explicit beta keeps the products separate:
    1.1B Llama bf16 prefill of 512 tokens 967 -> 695 ms, and that graph holds one packed copy
    of the MLP weights instead of two. The Python opset function adds an f32 beta, which bf16
    inputs reject, so the beta is built in the input's type.
    """
    rows = h.static_shape(x)[:-1]
    if None not in rows and math.prod(rows) <= LLM_MLP_MAX_ROWS:
        return plain_swish(x)
    return ops.swish(x, h.const(1.0, h.dtype_of(x))).output(0)


def plain_swish(x: ov.Output) -> ov.Output:
    """The one-input Swish (beta 1) that the CPU plugin's MLPFusion matches (``ops.swish`` always
    adds a beta input)."""
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
    """Not the plugin's SoftPlus, which loses the tail (0 at -15, 930x the value at -20)."""
    (x,) = opmath_operands(node, x)
    dtype = h.dtype_of(x)
    bx = ops.multiply(x, h.const(beta, dtype)).output(0) if beta != 1 else x
    soft = precise.softplus(bx)
    if beta != 1:
        soft = ops.divide(soft, h.const(beta, dtype)).output(0)
    return op_result(ops.select(ops.greater(bx, h.const(threshold, dtype)), x, soft).output(0), h.out_dtype(node))


@lowers(aten.elu.default)
def elu(ctx, node, x, alpha=1.0, scale=1.0, input_scale=1.0):
    """The plugin's Elu; SELU's and CELU's scales in f32 for 16-bit inputs (SELU's 1.0507 as a
    bf16 constant is 1.0547: 2,873 of 4,096 bf16 results were off eager's, by up to 4 steps)."""
    scaled = scale != 1 or input_scale != 1
    (x,) = opmath_operands(node, x) if scaled else (x,)
    dtype = h.dtype_of(x)
    if input_scale != 1:
        x = ops.multiply(x, h.const(input_scale, dtype)).output(0)
    y = ops.elu(x, float(alpha)).output(0)
    if scale != 1:
        y = ops.multiply(y, h.const(scale, dtype)).output(0)
    return op_result(y, h.out_dtype(node)) if scaled else h.cast(y, h.out_dtype(node))


# Producers the CPU plugin fuses a PRelu into as a post-op (a bias Add after them too).
_FUSING_PRODUCTS = frozenset({"Convolution", "GroupConvolution", "ConvolutionBackpropData", "MatMul"})


def _after_a_product(x: ov.Output) -> bool:
    node = x.get_node()
    if node.get_type_name() == "Add":
        return any(_after_a_product(node.input_value(i)) for i in range(2))
    return node.get_type_name() in _FUSING_PRODUCTS


@lowers(aten.leaky_relu.default)
def leaky_relu(ctx, node, x, negative_slope=0.01):
    """ATen multiplies 16-bit values by the f32 slope and rounds once: a slope the type does not
    hold (0.01, 0.2) is applied in f32 (as an f16 constant, 630 of 4,096 f16 results were off)
    where the device computes the type in f32 anyway. Where it has kernels for it (bf16 on
    AVX512-BF16 and AMX), and after a convolution or a matrix product, which the plugin fuses
    the PRelu into, the 16-bit slope is kept: the casts around an f32 PRelu cost a pass over
    the product's output (bf16 convolutions on a Zen 5)."""
    dtype = h.out_dtype(node)
    free = dtype in ctx.widened and not _after_a_product(x)  # computed in f32 anyway
    compute = h.opmath_dtype(dtype) if free and not h.holds(dtype, negative_slope) else dtype
    x = h.cast(x, dtype)
    x = op_operand(x) if compute != dtype else x
    return op_result(ops.prelu(x, h.const([negative_slope], compute)).output(0), dtype)


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
    """``x - (max + log(sum(exp(x - max))))``. With the row's shift formed first, ``x - max`` feeds
    only the exponential and the CPU plugin fuses the two. OpenVINO's LogSoftmax keeps ``x - max``
    for its final subtraction beside ``exp(x - max)``: two tensors of ``x``'s size. On GPT-2's
    training logits (98 MB) that was a 98 MB arena and 32 ms, against none and 27 ms.

    A slice holding NaN or +inf is all NaN in torch. The plugin's exponential gives +inf for
    NaN, so such a slice's sum is not finite (a finite slice's is at most its length): it is
    made NaN, which the rest of the slice then inherits."""
    x = h.cast(x, h.out_dtype(node))
    r = h.rank(x)
    if r == 0:
        return ops.log_softmax(x, 0).output(0)
    axis = h.const([h.norm_dim(dim, r)], torch.int64)
    peak = ops.reduce_max(x, axis, True)
    total = ops.reduce_sum(ops.exp(ops.subtract(x, peak)), axis, True)
    total = ops.select(ops.is_finite(total), total, h.const(float("nan"), h.dtype_of(x)))
    return ops.subtract(x, ops.add(peak, ops.log(total))).output(0)
