"""The partition of a graph whose every op OpenVINO runs, built without the partitioner.

``CapabilityBasedPartitioner`` costs ~0.5 s on BERT-base for this foregone result, and it is the
common case.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch.fx._lazy_graph_module import _LazyGraphModule

from fxvino.utils.fx import fetch_attr


def whole_graph_partition(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """What ``fuse_partitions`` would make of a graph whose every op is supported, built directly.

    The partitioner costs ~0.5 s on BERT-base for a foregone result. ``gm`` itself (a private
    copy) becomes the ``fused_0`` submodule, its constants turned into inputs; a small parent
    passes it its placeholders and constants and rebuilds the output structure.
    """
    graph, parent_graph = gm.graph, torch.fx.Graph()
    placeholders = list(graph.find_nodes(op="placeholder"))
    attrs = list(graph.find_nodes(op="get_attr"))
    parent_env = {n: parent_graph.node_copy(n) for n in placeholders + attrs}
    root: dict[str, Any] = {n.target: fetch_attr(gm, n.target) for n in attrs}
    last = placeholders[-1] if placeholders else None
    for n in attrs:  # constants become inputs, after the real ones
        if last is None:
            with graph.inserting_before(next(iter(graph.nodes))):
                ph = graph.placeholder(f"const_{n.name}")
        else:
            with graph.inserting_after(last):
                ph = graph.placeholder(f"const_{n.name}")
        ph.meta = dict(n.meta)
        parent_env[ph] = parent_env[n]  # an output that is this constant reads the parent's
        n.replace_all_uses_with(ph)
        graph.erase_node(n)
        last = ph
    output = next(iter(graph.find_nodes(op="output")))
    flat, spec = torch.utils._pytree.tree_flatten(output.args[0])
    computed = list(dict.fromkeys(v for v in flat if isinstance(v, torch.fx.Node) and v.op == "call_function"))
    output.args = (tuple(computed),)
    call = parent_graph.call_module("fused_0", tuple(parent_env[n] for n in placeholders + attrs))
    # (placeholders + attrs is the order of fused_0's inputs: the constants' came last.)
    for i, v in enumerate(computed):
        parent_env[v] = parent_graph.call_function(operator.getitem, (call, i))
        parent_env[v].meta = dict(v.meta)
    result = [parent_env[v] if isinstance(v, torch.fx.Node) else v for v in flat]
    parent_graph.output(torch.utils._pytree.tree_unflatten(result, spec))
    graph.eliminate_dead_code()
    gm.recompile()
    # Lazy: Python code for a 500-node graph takes ~0.1 s to generate, and the partition's
    # is only needed if it ever runs eagerly.
    root["fused_0"] = gm if isinstance(gm, _LazyGraphModule) else _LazyGraphModule(gm, graph)
    return _LazyGraphModule(root, parent_graph)
