"""Make each call of a reused module its own source partition, so PT2E quantizers accept it.

PT2E quantizers (``X86InductorQuantizer``) find patterns through ``get_source_partitions``, which
groups an exported graph's nodes by the module they came from (the innermost entry of their
``nn_module_stack``). A module called several times, such as the one ``nn.ReLU`` a torchvision-style
ResNet block applies three times, becomes one partition with several outputs, and annotation
fails ("Input partition has more than one output node"). Here every separate call, a connected
group of that module's nodes, gets its own name (``relu@1``, ``relu@2``, ...). Only metadata
changes; the graph computes the same. (Calls feeding each other directly, like relu(relu(x)), form
one group: a partition with one output, which quantizers accept.)
"""

from __future__ import annotations

import collections

import torch


def _calls(nodes: list[torch.fx.Node]) -> list[list[torch.fx.Node]]:
    """Connected groups of ``nodes`` (edges between members only), in graph order."""
    members = set(nodes)
    parent = {n: n for n in nodes}

    def root(n: torch.fx.Node) -> torch.fx.Node:
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in nodes:
        for a in n.all_input_nodes:
            if a in members:
                parent[root(a)] = root(n)
    groups: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for n in nodes:
        groups.setdefault(root(n), []).append(n)
    return list(groups.values())


def separate_module_calls(gm: torch.fx.GraphModule) -> int:
    """Rename, in ``nn_module_stack`` metadata, the innermost module of each extra call of a module
    called more than once; returns how many calls were renamed. Use it on ``torch.export``'s
    ``.module()`` before ``prepare_pt2e``."""
    by_module: dict[str, list[torch.fx.Node]] = collections.defaultdict(list)
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if node.op == "call_function" and stack:
            by_module[list(stack.values())[-1][0]].append(node)
    renamed = 0
    for nodes in by_module.values():
        calls = _calls(nodes)
        for k, call in enumerate(calls[1:], start=1):
            for node in call:
                stack = dict(node.meta["nn_module_stack"])
                key = list(stack)[-1]
                path, cls = stack.pop(key)
                stack[f"{key}@{k}"] = (f"{path}@{k}", cls)
                node.meta["nn_module_stack"] = stack
            renamed += 1
    return renamed
