"""CPU plugin properties a lowered graph compiles better with, read off the graph itself.

The plugin decides some optimizations per compiled model rather than per layer, so a graph
can only ask for them through ``compile_model``'s config. ``Options.compile_config`` applies
these on the CPU under the user's own ``config``, which always wins. They are a function of the
graph, which the model cache key already covers.
"""

from __future__ import annotations

import openvino as ov


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


def plugin_config(model: ov.Model) -> dict[str, str]:
    """CPU plugin properties ``model`` runs faster with."""
    ops = list(model.get_ordered_ops())
    config: dict[str, str] = {}
    if any(map(_quantized_residual_add, ops)):
        config["SNIPPETS_MODE"] = "DISABLE"
    if _bf16_gated_mlp(ops):
        config["INFERENCE_PRECISION_HINT"] = "bf16"
    return config
