"""Graphs whose shapes depend on the value of a 0-d tensor input, compiled for that value.

``torch.arange(n)`` with ``n`` a 0-d tensor is captured by Dynamo, but its output size is the
tensor's *value*, which AOTAutograd cannot trace (``DataDependentOutputException``). Rather
than run the whole frame eagerly, fxvino compiles the graph with that input's value baked in
(as Dynamo itself does for Python ints) and checks the value on every call: a call with
another value runs the original graph eagerly (correct, and reported once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from fxvino.report import Fallback, GraphReport, publish

logger = logging.getLogger("fxvino")

# Calls whose number arguments (sizes, bounds, fill values) Dynamo may hand a 0-d tensor.
_FACTORIES = frozenset(
    {
        torch.arange,
        torch.linspace,
        torch.logspace,
        torch.full,
        torch.zeros,
        torch.ones,
        torch.empty,
        torch.rand,
        torch.randn,
        torch.randint,
        torch.eye,
    }
)


def is_data_dependent(error: BaseException) -> bool:
    from torch._subclasses.fake_tensor import DataDependentOutputException
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        if isinstance(e, (DataDependentOutputException, GuardOnDataDependentSymNode)):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def specialize(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[torch.fx.GraphModule, dict] | None:
    """A copy of ``gm`` with 0-d tensor inputs that feed factory calls replaced by their values.

    Returns (graph, {input position: value}), or None when no such input exists.
    """
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    values: dict[int, Any] = {}
    for pos, (ph, real) in enumerate(zip(placeholders, example_inputs, strict=False)):
        if not (isinstance(real, torch.Tensor) and real.dim() == 0 and not real.requires_grad):
            continue
        if not any(u.op == "call_function" and u.target in _FACTORIES for u in ph.users):
            continue
        values[pos] = real.item()
    if not values:
        return None
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, Any] = {}
    for node in gm.graph.nodes:
        env[node] = graph.node_copy(node, env.__getitem__)
    for pos, value in values.items():
        ph = env[placeholders[pos]]
        for user in list(ph.users):
            if user.op == "call_function" and user.target in _FACTORIES:
                user.args = torch.fx.node.map_arg(user.args, lambda a, ph=ph, v=value: v if a is ph else a)
                user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda a, ph=ph, v=value: v if a is ph else a)
    return torch.fx.GraphModule(gm, graph), values


def guarded(compiled: Callable, eager: Callable, values: dict[int, Any], report: GraphReport) -> Callable[..., Any]:
    """Run ``compiled`` while the specialized inputs hold their values, else ``eager`` (reported once)."""
    checks = tuple(values.items())
    warned = []

    def run(*args: Any) -> Any:
        if all(args[i].item() == v for i, v in checks):
            return compiled(*args)
        if not warned:
            warned.append(True)
            report.fallback(
                Fallback(
                    "graph",
                    "value-specialized graph",
                    "a 0-d tensor that sets a size changed value since compiling; this call ran eagerly",
                    "eager",
                )
            )
            publish(report)  # to whoever collects reports around this call
        return eager(*args)

    return run
