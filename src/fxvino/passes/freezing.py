"""Freezing an inference graph's weights into constants, and folding what they make constant.

Parameters become OpenVINO constants (the runtime can then pre-pack weights: worth 1.3-3x on
CPU), compressed weights stay compressed, and small ops whose inputs are all constants are
evaluated once here instead of on every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from fxvino.passes.batch_norm_folding import fold_batch_norms
from fxvino.quantization.compressed import keep_compressed_weights
from fxvino.quantization.weight_only import scale_weights_not_products
from fxvino.utils.fx import KEEP_UNFOLDED, aot_metadata, fetch_attr, placeholders_to_attrs

aten = torch.ops.aten


def freeze_and_fold(work: torch.fx.GraphModule, frozen: dict[int, torch.Tensor]) -> int:
    """Weights into constants, compressed ones kept compressed, then constant folding; returns the
    number of folded nodes. Every path that freezes a graph goes through here."""
    _freeze(work, frozen)
    scale_weights_not_products(work)
    keep_compressed_weights(work)
    fold_batch_norms(work)
    return fold_constants(work)


class _FlatStatic(dict):
    """Static inputs keyed by their position among the tensors AOTAutograd's graph takes once it
    has unwrapped tensor subclasses (torchao's quantized weights): its graph sees the inner
    tensors (int8 data, scales), and those are what can be frozen."""


def flattened_static(example_inputs: Sequence[Any], static: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if not any(is_traceable_wrapper_subclass(t) for t in example_inputs):
        return static
    flat: _FlatStatic = _FlatStatic()
    position = 0

    def walk(t: Any, is_static: bool) -> None:
        nonlocal position
        if is_traceable_wrapper_subclass(t):
            attrs, _ = t.__tensor_flatten__()
            for a in attrs:
                walk(getattr(t, a), is_static)
            return
        if is_static:
            flat[position] = t
        position += 1

    for i, t in enumerate(example_inputs):
        walk(t, i in static)
    return flat


def _mutated(placeholder: torch.fx.Node) -> bool:
    return any(
        u.op == "call_function" and u.target is torch.ops.aten.copy_.default and u.args[0] is placeholder
        for u in placeholder.users
    )


def frozen_inputs(gm: torch.fx.GraphModule, static: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """Parameters and buffers of an inference graph that can become OpenVINO constants.

    AOTAutograd's ``static_input_indices`` name them; they line up with Dynamo's inputs when
    the counts agree. Inputs the graph mutates are never frozen.
    """
    meta = aot_metadata()
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if meta is None or not static:
        return {}
    frozen = {}
    if isinstance(static, _FlatStatic):  # positions of unwrapped subclass tensors: checked on the graph
        candidates = [i for i in static if i < len(placeholders) and not _mutated(placeholders[i])]
    else:
        candidates = [
            i for i in meta.static_input_indices if i < len(placeholders) and not meta.input_info[i].mutates_data
        ]
    for i in candidates:
        if i not in static:
            continue
        val = placeholders[i].meta.get("val")
        real = static[i]
        if not isinstance(val, torch.Tensor) or tuple(val.shape) != tuple(real.shape) or val.dtype != real.dtype:
            continue
        frozen[i] = real
    return frozen


def _freeze(gm: torch.fx.GraphModule, frozen: dict[int, torch.Tensor]) -> None:
    """Replace frozen placeholders by get_attr nodes holding the real tensors."""
    placeholders_to_attrs(gm, frozen, "_fxvino_frozen_")


# Folded results are copies we keep: only small ones are worth it (masks, position ids).
# Large constant ops (weight transposes, casts) are left to OpenVINO, which folds those itself.
FOLD_MAX_BYTES = 1 << 20


def fold_constants(gm: torch.fx.GraphModule) -> int:
    """Evaluate, once, the small ops whose inputs are all frozen constants; returns how many.

    Frozen weights make parts of a graph constant (position ids sliced from a buffer, masks
    built from ``arange``). OpenVINO's CPU plugin does not fold every such op (GatherND,
    GatherElements), so they would be recomputed on every call. Views of constants are not
    replaced (they cost nothing in OpenVINO, and a folded view would be a copy) but the ops
    reading them fold; random and mutating ops never do.
    """
    values: dict[torch.fx.Node, torch.Tensor] = {}
    for n in gm.graph.find_nodes(op="get_attr"):
        v = fetch_attr(gm, n.target)
        if isinstance(v, torch.Tensor):
            values[n] = v
    folded = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not _foldable(node, values):
            continue
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda a: values.get(a, _shape_only(a)))
        try:
            result = node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - leave it to the lowering, which reports properly
            continue
        if not isinstance(result, torch.Tensor):
            continue
        if node.target in UNINITIALIZED:
            result = torch.zeros_like(result)
        if node.target.is_view:  # known, but kept as an op: consumers may fold through it
            values[node] = result
            continue
        if result.nbytes > FOLD_MAX_BYTES:
            continue
        name = f"_fxvino_folded_{folded}"
        gm.register_buffer(name, result.detach().contiguous(), persistent=False)
        with gm.graph.inserting_before(node):
            attr = gm.graph.get_attr(name)
        attr.meta = dict(node.meta)
        node.replace_all_uses_with(attr)
        gm.graph.erase_node(node)
        values[attr] = getattr(gm, name)
        folded += 1
    if folded:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return folded


def _foldable(node: torch.fx.Node, values: dict[torch.fx.Node, torch.Tensor]) -> bool:
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    if str(target) in KEEP_UNFOLDED_OPS or node.meta.get(KEEP_UNFOLDED):
        return False
    if not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    if any(u.op == "output" for u in node.users):  # a graph output must be a fresh tensor per call
        return False
    inputs = node.all_input_nodes
    if target in SHAPE_ONLY_OPS and inputs and _shape_only(node.args[0]) is not None:
        inputs = inputs[1:]  # reads only the (static) shape and dtype of its first argument
    return all(a in values for a in inputs)


# Ops whose results torch leaves uninitialised fold to zeros, as they lower (creation.py): folded
# as they came, an int64 buffer held whatever the allocator returned (pointer-sized values, which
# fail the int32 check on int64 constants, and a constant that differs from one compile to the next).
_aten = torch.ops.aten
UNINITIALIZED = frozenset(
    {
        _aten.empty.memory_format,
        _aten.empty_strided.default,
        _aten.empty_permuted.default,
        _aten.empty_like.default,
        _aten.new_empty.default,
        _aten.new_empty_strided.default,
    }
)

# A dequantize of a constant int8 weight stays an op: OpenVINO keeps Convert(int8 constant) ->
# Subtract -> Multiply in int8 (a quarter of the memory, int8 kernels); folded, it is a float weight.
KEEP_UNFOLDED_OPS = frozenset(
    {"quantized_decomposed.dequantize_per_channel.default", "quantized_decomposed.dequantize_per_tensor.default"}
)


# Ops whose result depends on their first argument's shape and dtype, not on its values: with
# a static shape, ``ones_like(input_ids)`` (transformers' default attention mask) is a constant.
SHAPE_ONLY_OPS = frozenset({aten.full_like.default, aten.ones_like.default, aten.zeros_like.default})


def _shape_only(a: torch.fx.Node) -> torch.Tensor | None:
    """A stand-in with ``a``'s static shape and dtype, for :data:`SHAPE_ONLY_OPS`."""
    val = a.meta.get("val")
    if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
        return None
    return torch.empty(tuple(val.shape), dtype=val.dtype)
