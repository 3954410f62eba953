"""CPU plugin properties a lowered graph compiles better with, read off the graph itself.

The plugin decides some optimizations per compiled model rather than per layer, so a graph
can only ask for them through ``compile_model``'s config. ``Options.compile_config`` applies
these on the CPU under the user's own ``config``, which always wins. They are a function of the
graph, which the model cache key already covers; the run-time ones (``RUN_TIME``) are not kept in
a compiled blob, so the model cache stores them beside it and imports with them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import openvino as ov
import torch

from fxvino.devices import may_run_on_cpu, widened_types
from fxvino.lowering.rounding import round_bf16_casts

# What a tiny graph asks for (``_tiny``). These are properties the plugin applies when a compiled
# model is made or imported, not baked into its blob.
TINY = {"INFERENCE_NUM_THREADS": "1", "ENABLE_CPU_PINNING": "NO"}
RUN_TIME = tuple(TINY)

# Multiply-adds plus elements written below which a static graph runs alone on the calling
# thread (``_tiny``): measured on a 2-core Zen 4, a 4x256x256 product or 262144 elements through
# three elementwise ops took no longer on one thread than on two.
TINY_WORK = 2**18

# Ops that write nothing: reading a tensor's shape, or constants folded into their consumers.
_NO_WORK = frozenset({"Parameter", "Constant", "Result", "ShapeOf"})

# Elementwise kinds the CPU plugin computes in a scalar reference loop, with each one's time per
# element in Adds (one thread of the 2-core Zen 4, 64x4096 f32): their elements count that many
# times, so a graph of fewer of them is tiny. A second thread shortens them where a cheap op gains
# nothing: Atan on 16,384 elements 206 -> 162 us (median), on 65,536 865 -> 533, Atanh 1,618 ->
# 1,025, Sin on 262,144 1,730 -> 1,424; all of them counted as tiny before, up to 262,144.
_REFERENCE_LOOP_COST = {
    "Log": 8,
    "Sin": 10,
    "Cos": 10,
    "Acosh": 12,
    "Asin": 16,
    "Acos": 16,
    "Tan": 20,
    "Atan": 20,
    "Cosh": 20,
    "Sinh": 30,
    "Asinh": 40,
    "Atanh": 40,
}


def _source_type(op: ov.Node, i: int) -> str:
    return op.input_value(i).get_node().get_type_name()


def _convolution_output(op: ov.Node) -> bool:
    """A Convolution's output, or its bias Add's."""
    kind = op.get_type_name()
    return kind == "Convolution" or (kind == "Add" and _source_type(op, 0) == "Convolution")


def _quantized_residual_add(op: ov.Node) -> bool:
    """``Add(convolution, FakeQuantize(shortcut))``: the end of a quantized residual block.

    With static shapes the plugin's snippets tokenizer takes that Add and the FakeQuantize after
    it into a float Subgraph before the convolution can absorb them as post-ops (sum, then
    quantize), and each block then writes and re-reads a float tensor: ResNet-50 PT2E int8 at
    batch 8 took 28.0 ms instead of 20.0 on AMX. Native conversion escapes it only because its
    shapes are dynamic. Snippets only fuse elementwise chains in such a graph: turn them off.
    """
    if op.get_type_name() != "Add" or op.get_input_size() != 2:
        return False
    kinds = {_source_type(op, 0), _source_type(op, 1)}
    return "FakeQuantize" in kinds and any(_convolution_output(op.input_value(i).get_node()) for i in range(2))


def _weight_type(op: ov.Node) -> ov.Type | None:
    """The element type of a MatMul's constant right operand (through a Convert), else None."""
    if op.get_type_name() != "MatMul":
        return None
    source = op.input_value(1).get_node()
    if source.get_type_name() == "Convert":
        source = source.input_value(0).get_node()
    return source.get_output_element_type(0) if source.get_type_name() == "Constant" else None


def _gated_activation(op: ov.Node) -> bool:
    """SiLU or GELU of a product (through the reshapes a linear's views leave, which the plugin
    removes), multiplied by another: the gate of a Llama-style MLP."""
    if op.get_type_name() not in ("Swish", "Gelu"):
        return False
    source = op.input_value(0).get_node()
    while source.get_type_name() == "Reshape":
        source = source.input_value(0).get_node()
    if source.get_type_name() != "MatMul":
        return False
    return any(t.get_node().get_type_name() == "Multiply" for t in op.output(0).get_target_inputs())


def _bf16_gated_mlp(ops: list[ov.Node]) -> bool:
    """A gated MLP, and every product over constant weights reads bf16 weights (a model in bf16).

    The plugin turns on its LLM kernels (gate/up/down products and SiLU as one LLMMLP, fused
    Q/K/V projections) only when the compiled model's inference precision is bf16; compiled with
    fxvino's default f32 hint, such a model runs its products in bf16 but without them (1.1B
    Llama decode on AMX: 121.5 -> 98.1 ms/token). Other bf16 graphs (autocast BERT, a bf16 CNN)
    keep the f32 hint, so the float32 islands PyTorch keeps (layer norm, softmax) stay float32.
    """
    if not any(map(_gated_activation, ops)):
        return False
    types = [t for t in map(_weight_type, ops) if t is not None]
    return bool(types) and all(t == ov.Type.bf16 for t in types)


def _work(op: ov.Node) -> int | None:
    """Multiply-adds of a product or convolution, elements written by anything else (a reference
    loop's as many times as ``_REFERENCE_LOOP_COST`` says); None for a dynamic shape (a call may
    bring any size)."""
    if op.get_type_name() in _NO_WORK:
        return 0
    shapes = [op.get_output_partial_shape(i) for i in range(op.get_output_size())]
    if not all(s.is_static for s in shapes):
        return None
    written = sum(math.prod(s.to_shape()) for s in shapes)
    kind = op.get_type_name()
    if kind == "MatMul":
        a = op.get_input_partial_shape(0)
        if not a.is_static or a.rank.get_length() == 0:
            return None
        dims = list(a.to_shape())
        inner = dims[-2] if op.get_attributes()["transpose_a"] and len(dims) > 1 else dims[-1]
        return written * inner
    if kind in ("Convolution", "GroupConvolution"):
        w = op.get_input_partial_shape(1)
        if not w.is_static:
            return None
        per_output = list(w.to_shape())[2:] if kind == "GroupConvolution" else list(w.to_shape())[1:]
        return written * math.prod(per_output)
    return written * _REFERENCE_LOOP_COST.get(kind, 1)


def _tiny(ops: list[ov.Node]) -> bool:
    """Static and at most ``TINY_WORK``: such a graph's run is dominated by what an inference
    costs around its kernels. On one thread the plugin hands no work to a second one, and
    without pinning it does not set the caller's CPU affinity on entry and restore it on exit;
    together that took ``torch.relu(x) + 1`` on 16 floats from 8.9 to 6.8 us per inference
    (and a 64x64 product from 10.8 to 8.4), while products of 64x512x512 and up lost nothing
    to the missing pinning."""
    total = 0
    for op in ops:
        work = _work(op)
        if work is None:
            return False
        total += work
        if total > TINY_WORK:
            return False
    return True


def plugin_config(model: ov.Model) -> dict[str, str]:
    """CPU plugin properties ``model`` runs faster with."""
    ops = list(model.get_ordered_ops())
    config: dict[str, str] = {}
    if any(map(_quantized_residual_add, ops)):
        config["SNIPPETS_MODE"] = "DISABLE"
    if _bf16_gated_mlp(ops):
        config["INFERENCE_PRECISION_HINT"] = "bf16"
    if _tiny(ops):
        config.update(TINY)
    return config


def merged(config: dict[str, str]) -> dict[str, str]:
    """What a graph's wishes remain in a model compiled together with other graphs
    (shared_weights.py): that model is not tiny."""
    return {k: v for k, v in config.items() if k not in TINY}


def run_time(config: dict[str, str]) -> dict[str, str]:
    """The properties of ``config`` a compiled blob does not keep: an import must pass them again."""
    return {k: v for k, v in config.items() if k in RUN_TIME}


def round_truncated_casts(model: ov.Model, config: Mapping[str, Any], device: str) -> int:
    """Round ``model``'s casts to bf16 that the CPU plugin, compiling it with ``config``, would
    truncate: every cast without snippets, else those of dynamic shape
    (``rounding.round_bf16_casts``). A device computing bf16 in f32 has them rounded already
    (``rounding.round_like_torch``). Under a 16-bit inference precision the plugin computes the
    rounding's f32 arithmetic in that type too, and eager's results are not the contract: left
    alone. Returns how many casts it rounded."""
    if not may_run_on_cpu(device) or torch.bfloat16 in widened_types(device):
        return 0
    hint = config.get("INFERENCE_PRECISION_HINT", "f32")
    if (hint.get_type_name() if isinstance(hint, ov.Type) else str(hint).lower()) not in ("f32", "float32"):
        return 0
    snippets = str(config.get("SNIPPETS_MODE", "")).upper() != "DISABLE"
    return round_bf16_casts(model, dynamic_only=snippets)
