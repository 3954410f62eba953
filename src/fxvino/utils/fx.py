"""Small in-place edits of FX graphs that more than one stage makes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx
from torch.fx._lazy_graph_module import _LazyGraphModule

# Node meta key: constant folding (``passes.freezing.fold_constants``) leaves a node carrying it alone.
KEEP_UNFOLDED = "fxvino_keep_unfolded"


def fetch_attr(gm: torch.fx.GraphModule, target: str) -> Any:
    """The object a ``get_attr`` node's dotted ``target`` names on ``gm``."""
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def placeholders_to_attrs(gm: torch.fx.GraphModule, values: Mapping[int, Any], prefix: str) -> None:
    """Replace the placeholders at ``values``' positions by attributes holding those values.

    Freezing weights into an inference graph, and handing a split partition its constants back,
    are both this: a value known at compile time stops being an argument, and the lowering sees a
    constant (for OpenVINO: a Constant it can pre-pack).
    """
    if not values:
        return
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    first = next((n for n in gm.graph.nodes if n.op != "placeholder"), None)
    for i, value in values.items():
        ph = placeholders[i]
        name = f"{prefix}{i}"
        if isinstance(value, torch.Tensor):
            gm.register_buffer(name, value.detach(), persistent=False)
        else:
            setattr(gm, name, value)
        with gm.graph.inserting_before(first):
            attr = gm.graph.get_attr(name)
        attr.meta = dict(ph.meta)
        ph.replace_all_uses_with(attr)
        gm.graph.erase_node(ph)
    gm.recompile()


def aot_metadata() -> object | None:
    """AOTAutograd's ``fw_metadata`` for the graph being compiled now (None outside its compile):
    which inputs are parameters, which the graph mutates, what its runtime wrappers will do."""
    from torch._guards import TracingContext

    return getattr(TracingContext.try_get(), "fw_metadata", None)


def contiguous_group_norm_inputs(gm: torch.fx.GraphModule) -> int:
    """Put ``aten.contiguous`` before each ``native_group_norm`` input; returns how many.

    ``native_group_norm`` requires a contiguous input, which eager's ``group_norm`` ensures
    with a ``contiguous()`` that tracing drops when the fake tensor claims contiguous strides
    the real one lacks (an ``add`` of a transposed view in diffusers' VAE attention). Any
    part of such a graph that runs in PyTorch (a declined op, a run-time fallback, the whole
    graph after a failure) then raises. ``contiguous`` costs nothing on OpenVINO (it lowers to
    nothing) and in PyTorch copies only what is not contiguous already.
    """
    count = 0
    for node in gm.graph.find_nodes(op="call_function", target=torch.ops.aten.native_group_norm.default):
        x = node.args[0]
        if isinstance(x, torch.fx.Node) and x.target is not torch.ops.aten.contiguous.default:
            with gm.graph.inserting_before(node):
                made = gm.graph.call_function(torch.ops.aten.contiguous.default, (x,))
            if "val" in x.meta:
                made.meta["val"] = x.meta["val"]
            node.replace_input_with(x, made)
            count += 1
    if count:
        gm.recompile()
    return count


# GraphModule meta key: a function that wraps the graph's forward for every call (what the
# partitioner decides around a graph as a whole, e.g. runtime/torch_threads.py).
FORWARD_WRAPPER = "fxvino_forward_wrapper"


def graph_forward(gm: torch.fx.GraphModule) -> Callable:
    """The generated code itself, without nn.Module's call machinery (a lazy module's code is
    generated now, once, rather than checked for on every call), in its ``FORWARD_WRAPPER``."""
    if isinstance(gm, _LazyGraphModule):
        gm.real_recompile()
    wrapper = gm.meta.get(FORWARD_WRAPPER)
    return gm.forward if wrapper is None else wrapper(gm.forward)
