"""Graphs whose shapes depend on the value of a 0-d tensor input, compiled for that value.

``torch.arange(n)`` (or ``tensor_split(x, n)``, ``x.view(b, n, -1)``) with ``n`` a 0-d tensor is
captured by Dynamo, but its output size (or count) is the tensor's *value*, which AOTAutograd cannot trace
(``DataDependentOutputException``, ``GuardOnDataDependentSymNode``). Rather
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
        torch.tensor_split,  # a 0-d tensor there is a number of sections: the output count
        torch.narrow,
        torch.reshape,
    }
)
# Size-taking methods too: Longformer's global attention makes a buffer with ``new_zeros`` and
# views its scores with ``.view(b, heads, n, seq)``, ``n`` the 0-d maximum count of global tokens.
_METHODS = frozenset(
    {"tensor_split", "narrow", "new_zeros", "new_ones", "new_full", "new_empty", "view", "reshape", "expand", "repeat"}
)


# Of these calls, the first argument is the tensor worked on (as for every method), not a number.
_TENSOR_FIRST = frozenset({torch.tensor_split, torch.narrow, torch.reshape})


def _numbers_start(user: torch.fx.Node) -> int | None:
    """Where ``user``'s number arguments begin, or None if it reads no numbers."""
    if user.op == "call_method" and user.target in _METHODS:
        return 1
    if user.op == "call_function" and user.target in _FACTORIES:
        return 1 if user.target in _TENSOR_FIRST else 0
    return None


def _reads_as_number(user: torch.fx.Node, ph: torch.fx.Node) -> bool:
    start = _numbers_start(user)
    if start is None:
        return False
    seen: list[bool] = []
    torch.fx.node.map_arg((user.args[start:], user.kwargs), lambda a: seen.append(a is ph))
    return any(seen)


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
        if not any(_reads_as_number(u, ph) for u in ph.users):
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
            if _reads_as_number(user, ph):
                start = _numbers_start(user)
                swap = lambda a, ph=ph, v=value: v if a is ph else a  # noqa: E731
                user.args = (*user.args[:start], *torch.fx.node.map_arg(user.args[start:], swap))
                user.kwargs = torch.fx.node.map_arg(user.kwargs, swap)
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
