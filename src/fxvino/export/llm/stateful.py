"""The KV cache of a lowered decoder as OpenVINO state, in the form OpenVINO GenAI runs.

GenAI's stateful ``LLMPipeline`` (``pipeline_stateful.cpp``, ``lm_encoding.cpp``) feeds exactly
``input_ids``, ``attention_mask``, ``position_ids`` (i64) and ``beam_idx`` (i32, one entry per
row) by tensor name and reads ``logits``; the keys and values never cross the model's boundary.
What it relies on besides the names:

- ``beam_idx`` reorders the cache rows before each step (beam search keeps the rows of the beams
  that survive; greedy passes ``0..batch-1``): a Gather of every past tensor on the batch axis,
  inside the model, because a state cannot be rewritten from outside between steps.
- Each state's ReadValue has an initializer of shape ``[batch, kv_heads, 0, head_dim]``: GenAI finds
  the sequence axis of the cache as the initializer's axis of static size 0 and the batch as its
  dynamic axis (``utils::get_kv_axes_pos``), to trim the cache between chat turns; a ReadValue
  without one would also start from an undefined shape instead of an empty cache of the right batch.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops
from openvino import passes

from .decoder import KVLayout

INPUTS = ("input_ids", "attention_mask", "position_ids")
BEAM_IDX = "beam_idx"
LOGITS = "logits"


def name_ports(model: ov.Model, layout: KVLayout) -> None:
    """Give the lowered model's inputs and outputs GenAI's names (the lowering names them after
    the graph's placeholders, and its results not at all).

    The lowered model's parameters follow the wrapper's flattened arguments (``input_ids``,
    ``attention_mask``, ``position_ids``, then keys and values per layer), its results the flattened
    outputs (``logits``, then the present keys and values).
    """
    past, present = layout.names()
    names_in, names_out = [*INPUTS, *past], [LOGITS, *present]
    if len(model.inputs) != len(names_in) or len(model.outputs) != len(names_out):
        raise ValueError(
            f"the lowered decoder has {len(model.inputs)} inputs and {len(model.outputs)} outputs; "
            f"expected {len(names_in)} and {len(names_out)} for {layout.layers} cached layers"
        )
    for i, (port, name) in enumerate(zip(model.inputs, names_in, strict=True)):
        port.get_tensor().set_names({name})
        node = port.get_node()
        node.set_friendly_name(name)
        # Every size is left open: torch.export's ranges start at 2 (it traces sizes 0 and 1 as
        # constants), and the mask's length, past + new, would get a lower bound of 4, where GenAI
        # calls with one new token and, on a prompt's first step, an empty past.
        shape = [-1, -1] if i < len(INPUTS) else [-1, layout.kv_heads, -1, layout.head_dim]
        node.set_partial_shape(ov.PartialShape(shape))
    model.validate_nodes_and_infer_types()
    for port, name in zip(model.outputs, names_out, strict=True):
        port.get_tensor().set_names({name})
        port.get_node().set_friendly_name(name)


def make_stateful(model: ov.Model, layout: KVLayout) -> None:
    """Turn the named past inputs and present outputs into state, with ``beam_idx`` reordering it."""
    past, present = layout.names()
    batch_dim = model.input("input_ids").get_partial_shape()[0]
    beam_idx = ops.parameter(ov.PartialShape([batch_dim]), ov.Type.i32, name=BEAM_IDX)
    beam_idx.output(0).get_tensor().set_names({BEAM_IDX})
    model.add_parameters([beam_idx])
    axis = ops.constant(np.int64(0))
    pairs = []
    for past_name, present_name in zip(past, present, strict=True):
        port = model.input(past_name)
        consumers = list(port.get_target_inputs())
        reordered = ops.gather(port, beam_idx, axis)
        for consumer in consumers:
            consumer.replace_source_output(reordered.output(0))
        pairs.append((port.get_node(), model.output(present_name).get_node()))
    model.validate_nodes_and_infer_types()
    manager = passes.Manager()
    manager.register_pass(passes.MakeStateful(pairs))
    manager.run_passes(model)
    _start_empty(model, layout)
    attention_fusable(model)


def attention_fusable(model: ov.Model) -> None:
    """Put the cache's path to attention in the form the CPU plugin fuses (in place).

    The plugin runs attention as one node that appends to the cache itself only when it finds
    ``ReadValue -> Gather(beam_idx) -> Concat -> [Unsqueeze -> Broadcast(bidirectional) -> Reshape]
    -> ScaledDotProductAttention`` with the Concat also feeding the Assign (its
    ``StatefulSDPAFusion``); otherwise it decomposes attention into MatMul and Softmax and copies
    the whole cache on every step. The lowering writes ``x[:, :, None]`` and reads to the cache's
    end as full-range Slices, and ``expand`` as a numpy-mode Broadcast: both mean the same as what
    the pattern wants (an ``expand`` never shrinks a dim, so the two broadcast modes agree); a Convert in
    front of the Assign (from naming the outputs) the pattern allows. On a ~100M
    Llama this took the plugin's executed graph from 8 decomposed attentions to 8 fused ones.
    Rotary embeddings fuse into the plugin's RoPE node only when ``rotate_half``'s Concat names its
    axis -1, as torch's source does (the lowering normalizes it to 3): the same axis either way.
    """
    for node in model.get_ordered_ops():
        if node.get_type_name() == "Slice" and _whole_range(node):
            for target in list(node.output(0).get_target_inputs()):
                target.replace_source_output(node.input_value(0))
    for node in model.get_ordered_ops():
        if node.get_type_name() == "Concat" and _concat_on_last_axis(node):
            node.set_axis(-1)  # rotate_half's concat: the plugin's RoPE patterns name the last axis -1
    for node in model.get_ordered_ops():
        if node.get_type_name() == "Broadcast" and _expands_cache(node):
            wide = ops.broadcast(node.input_value(0), node.input_value(1), broadcast_spec="BIDIRECTIONAL")
            for target in list(node.output(0).get_target_inputs()):
                target.replace_source_output(wide.output(0))
    model.validate_nodes_and_infer_types()


def _concat_on_last_axis(node: ov.Node) -> bool:
    rank = node.get_output_partial_shape(0).rank
    return rank.is_static and rank.get_length() >= 3 and node.get_axis() == rank.get_length() - 1


def _whole_range(node: ov.Node) -> bool:
    """A Slice from 0 to the end with step 1 on one axis: its output is its input."""
    bounds = [node.input_value(i).get_node() for i in (1, 2, 3)]
    if any(b.get_type_name() != "Constant" for b in bounds):
        return False
    start, stop, step = (b.get_data().reshape(-1) for b in bounds)
    return len(start) == 1 and start[0] == 0 and step[0] == 1 and stop[0] >= np.iinfo(np.int32).max


def _expands_cache(node: ov.Node) -> bool:
    """A numpy-mode Broadcast of an Unsqueeze of the cache's Concat (grouped-query heads repeated)."""
    if node.get_attributes().get("mode") != "numpy":
        return False
    unsqueeze = node.input_value(0).get_node()
    if unsqueeze.get_type_name() != "Unsqueeze":
        return False
    concat = unsqueeze.input_value(0).get_node()
    if concat.get_type_name() != "Concat":
        return False
    gather = concat.input_value(0).get_node()
    return gather.get_type_name() == "Gather" and gather.input_value(0).get_node().get_type_name() == "ReadValue"


def _start_empty(model: ov.Model, layout: KVLayout) -> None:
    """Each ReadValue starts from ``[batch, kv_heads, 0, head_dim]`` zeros, batch read off ``input_ids``."""
    shape = ops.shape_of(model.input("input_ids"), output_type="i64")
    batch = ops.gather(shape, ops.constant(np.array([0], dtype=np.int64)), ops.constant(np.int64(0)))
    rest = [ops.constant(np.array([n], dtype=np.int64)) for n in (layout.kv_heads, 0, layout.head_dim)]
    empty_shape = ops.concat([batch, *rest], axis=0)
    for op in model.get_ops():
        if op.get_type_name() == "ReadValue":
            zero = ops.constant(np.zeros((), dtype=op.get_output_element_type(0).to_dtype()))
            op.set_arguments([ops.broadcast(zero, empty_shape).output(0)])
    model.validate_nodes_and_infer_types()


def state_count(model: ov.Model) -> int:
    """How many ReadValue ops the model has (two per cached layer once stateful)."""
    return sum(1 for op in model.get_ops() if op.get_type_name() == "ReadValue")
