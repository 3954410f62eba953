"""Which nodes OpenVINO runs: the registry's decline reasons, and the rules that decline more.

``decline_reason`` (lowering/registry.py) is the one statement of what an op supports; the rules
here decline nodes that would lower but must stay in PyTorch because of where they sit in the
graph (a getitem of a PyTorch node, views whose storage is read), and record every declined node
in the report.
"""

from __future__ import annotations

import collections
import operator
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx
from torch.fx.passes.operator_support import OperatorSupport

from fxvino.lowering.registry import decline_reason, op_name
from fxvino.lowering.views import view_chain
from fxvino.options import Options
from fxvino.report import Fallback, GraphReport

# Ops that compute nothing: a partition made only of these is not worth a model.
NON_COMPUTE = ["_operator.getitem", "torch.ops.aten.sym_size.int"]


def decline_reasons(graph: torch.fx.Graph, options: Options) -> dict[torch.fx.Node, str | None]:
    """Every call of ``graph`` with why it cannot run on OpenVINO (None: it can)."""
    return {n: decline_reason(n, options.disabled_ops) for n in graph.nodes if n.op == "call_function"}


class Support(OperatorSupport):
    """The partitioner's question (is this node supported?) answered from the decline reasons."""

    def __init__(self, reasons: dict[torch.fx.Node, str | None]):
        super().__init__()
        self.reasons = reasons

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        return node.op == "call_function" and self.reasons.get(node, "") is None


def decline_orphan_getitems(reasons: dict[torch.fx.Node, str | None]) -> None:
    """A getitem of a node that runs in PyTorch reads a Python tuple: it stays in PyTorch too."""
    for n, why in reasons.items():
        if why is None and n.target is operator.getitem:
            src = n.args[0]
            if isinstance(src, torch.fx.Node) and reasons.get(src) is not None:
                reasons[n] = reasons[src]


# Ops that read their input's storage rather than its values.
_STORAGE_READERS = frozenset({torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_copy.default})


def keep_views_real(reasons: dict[torch.fx.Node, str | None]) -> None:
    """Views whose *storage* matters run in PyTorch, where they are real views.

    An as_strided that runs in PyTorch reads its input's storage: given an OpenVINO partition's
    fresh contiguous copy of a view, it would read the wrong elements. And a graph output that
    views an input through a view with symbolic arguments (``tensor_split`` at ``.item()`` positions) is
    rebuilt by AOTAutograd from the returned tensor's own strides and storage offset, which a
    copy does not have.
    """
    for n, why in list(reasons.items()):
        if why is not None and n.target in _STORAGE_READERS:
            _decline_view_chain(n.args[0], reasons, "a view read through its storage by an as_strided in PyTorch")
    outputs = next((n for n in (list(reasons)[-1:] or []) for n in n.graph.find_nodes(op="output")), None)
    for out in torch.utils._pytree.tree_leaves(outputs.args[0] if outputs is not None else ()):
        if not (isinstance(out, torch.fx.Node) and _aliases_input_dynamically(out)):
            continue
        found = view_chain(out)
        if found is not None and all(isinstance(s, int) for s in out.meta["val"].stride()):
            # The runtime returns a real view of the input, at the offset the partition computes.
            out.meta["fxvino_view_of_input"] = found[0].name
            continue
        _decline_view_chain(
            out,
            reasons,
            "an output viewing an input through views with symbolic arguments is made in PyTorch "
            "(AOTAutograd rebuilds it from the real view's strides and offset)",
        )


def _decline_view_chain(x: Any, reasons: dict[torch.fx.Node, str | None], why: str) -> None:
    while isinstance(x, torch.fx.Node) and x in reasons and isinstance(x.target, torch._ops.OpOverload):
        if not x.target.is_view:
            break
        reasons[x] = reasons[x] or why
        x = x.args[0]


def _aliases_input_dynamically(node: torch.fx.Node) -> bool:
    """An output that views a graph input through a view with a symbolic argument (a size, start or
    stride computed from symbols, data-dependent or not): AOTAutograd replays only views whose
    arguments are all static (``ViewMeta.has_symbolic_inputs``) and rebuilds the others with
    ``as_strided`` from the returned tensor's own strides and offset, which a copy does not have
    (``x[1 : x.shape[0] - 1]`` under ``dynamic=True`` came back as ``x[0 : n - 2]``)."""
    if not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    x, symbolic = node, False
    while x.op == "call_function" and isinstance(x.target, torch._ops.OpOverload) and x.target.is_view:
        leaves = torch.utils._pytree.tree_leaves((x.args[1:], x.kwargs))
        symbolic = symbolic or any(isinstance(a, (torch.fx.Node, torch.SymInt)) for a in leaves)
        x = x.args[0]
    return symbolic and x is not node and x.op == "placeholder"


def record_torch_nodes(report: GraphReport, reasons: dict[torch.fx.Node, str | None]) -> None:
    groups: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for n, why in reasons.items():
        if why is not None:
            if n.target is operator.getitem:
                continue  # part of its source node's record
            groups[(op_name(n.target), why)].append(n.name)
            report.torch_ops[op_name(n.target)] += 1
    for (op, why), names in groups.items():
        shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
        report.fallback(Fallback(shown, op, why, "pytorch"))
