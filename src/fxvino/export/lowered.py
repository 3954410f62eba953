"""The frozen graph as one ``ov.Model``, through the same registry as ``torch.compile``.

Support is asked of the registry first (``decline_reason``, the one statement of whether an op
lowers), for every node, so that one error lists every op that would keep the graph from
lowering; only then is the graph lowered whole, by ``lower_graph``.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from fxvino.devices import widened_types
from fxvino.lowering import ensure_registered
from fxvino.lowering.convert import LoweredGraph, LoweringError, lower_graph
from fxvino.lowering.registry import decline_reason, op_name
from fxvino.options import Options

from .errors import ExportError, UnsupportedOp, source_line, unsupported_error

# What the exporter's IR can take and give: inputs are tensors (torch.export has no symbolic-int
# inputs), outputs tensors or shape scalars. A random op's seed input, complex tensors and
# outputs viewing inputs need fxvino's runtime around the model.
_INPUT_KINDS = frozenset({"tensor"})
_OUTPUT_KINDS = frozenset({"tensor", "symint", "symfloat", "symbool", "python"})


def unsupported_ops(gm: torch.fx.GraphModule, options: Options) -> list[UnsupportedOp]:
    """Every op node of ``gm`` that cannot run on OpenVINO, in graph order."""
    ensure_registered()
    found = []
    declined: set[torch.fx.Node] = set()
    for node in _calls(gm):
        source = node.args[0] if node.target is operator.getitem and node.args else None
        if source in declined:
            continue  # a getitem of a declined op's tuple: its source is listed
        why = decline_reason(node, options.disabled_ops)
        if why is not None:
            declined.add(node)
            found.append(_unsupported(node, why))
    return found


def _calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def _unsupported(node: torch.fx.Node, why: str) -> UnsupportedOp:
    return UnsupportedOp(node.name, op_name(node.target), why, source_line(node.meta.get("stack_trace")))


def lower(gm: torch.fx.GraphModule, options: Options, name: str) -> LoweredGraph:
    """``gm`` as one OpenVINO model, or an :class:`ExportError` naming everything in the way."""
    unsupported = unsupported_ops(gm, options)
    if unsupported:
        raise unsupported_error(unsupported, len(_calls(gm)))
    try:
        lowered = lower_graph(gm, {}, name, widened_types(options.device))
    except LoweringError as e:
        if e.node is None or e.node.op != "call_function":
            raise ExportError(f"fxvino.export: lowering failed: {e}") from e
        raise unsupported_error([_unsupported(e.node, f"lowering failed: {e.reason}")], len(_calls(gm))) from e
    kinds = {s.kind for s in lowered.inputs} - _INPUT_KINDS
    if "seed" in kinds:
        raise ExportError(
            "fxvino.export: the graph draws random numbers (dropout in training mode, torch.rand...); "
            "an exported IR takes no seed: export the model for inference"
        )
    if kinds:
        raise ExportError(f"fxvino.export: graph inputs of kind {', '.join(sorted(kinds))} are not exported")
    kinds = {s.kind for s in lowered.outputs} - _OUTPUT_KINDS
    if kinds:
        raise ExportError(
            f"fxvino.export: outputs of kind {', '.join(sorted(kinds))} (complex tensors, views of inputs) "
            "are not exported; return real tensors (e.g. torch.view_as_real, .clone())"
        )
    return lowered
