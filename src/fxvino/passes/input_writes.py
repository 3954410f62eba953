"""Input mutations of a few positions written in place, not copied back whole.

A StaticCache's decode step writes one position of each layer's key and value cache
(``cache[:, :, pos] = k``). AOTAutograd's functional graph returns the whole updated cache, and
its runtime wrapper copies that back into the input: per token, every layer's cache leaves
OpenVINO as a fresh tensor and is copied again, though one position changed (1.45x slower decode
than a DynamicCache). Here such an output becomes the write itself: OpenVINO returns only the new
values and positions, and partitioning/placed_writes.py stores them into the input once the graph
is partitioned (after it, or inside the partition's call right after its inference). The
wrapper's ``copy_`` of the input onto itself is then a no-op.

Only outputs AOTAutograd names as updated inputs are rewritten (a user output must stay a fresh
tensor), and only ``index_put`` without accumulation and ``index_copy`` whose first argument is
that same input. The writes run after every other output (they take them as arguments), so no
part of the graph can read an input after it was written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
import torch.fx

from fxvino.utils.fx import aot_metadata

aten = torch.ops.aten


@dataclasses.dataclass(frozen=True)
class ResultRef:
    """An argument of a write that the partitioned graph returns: output ``extra[index]``."""

    index: int


@dataclasses.dataclass(frozen=True)
class TakenWrite:
    position: int  # the graph output that returns the updated input
    target: str  # the input's placeholder name
    op: torch._ops.OpOverload  # the in-place op that does the write
    extra: tuple[int, ...]  # graph outputs appended for this write's tensor arguments
    template: tuple  # the op's arguments after ``target``, with a ResultRef for each tensor


def _args_of(node: torch.fx.Node) -> tuple[torch._ops.OpOverload, list] | None:
    """(in-place op, its arguments after the input) when ``node`` writes a few positions."""
    if node.target is aten.index_put.default:
        indices, values = node.args[1], node.args[2]
        accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
        if accumulate is not False or not isinstance(values, torch.fx.Node):
            return None
        return aten.index_put_.default, [list(indices), values]
    if node.target is aten.index_copy.default and not node.kwargs:
        _, dim, index, source = node.args
        return aten.index_copy_.default, [dim, index, source]
    return None


def _plain(a: object) -> bool:
    return a is None or isinstance(a, torch.fx.Node) or (isinstance(a, int) and not isinstance(a, bool))


def _template(rest: list, width: int, appended: list[torch.fx.Node]) -> tuple[tuple, tuple[int, ...]]:
    """``rest`` with each node replaced by a :class:`ResultRef` to a new output (appended)."""
    extra: list[int] = []

    def ref(a: object) -> object:
        if not isinstance(a, torch.fx.Node):
            return a
        extra.append(width + len(appended))
        appended.append(a)
        return ResultRef(len(extra) - 1)

    return tuple([ref(x) for x in a] if isinstance(a, list) else ref(a) for a in rest), tuple(extra)


def take_writes(gm: torch.fx.GraphModule, mutated: Sequence[str | None]) -> list[TakenWrite]:
    """Rewrite ``gm``'s outputs for the updated inputs ``mutated`` (placeholder names, in the
    order of the graph's first outputs; None for one to leave alone) that are writes of a few
    positions; returns what partitioning/placed_writes.py's ``put_writes`` needs once the graph is partitioned."""
    if not any(mutated):
        return []
    placeholders = {n.name: n for n in gm.graph.find_nodes(op="placeholder")}
    out = gm.graph.output_node()
    outputs = list(out.args[0])
    width = len(outputs)
    appended: list[torch.fx.Node] = []
    writes: list[TakenWrite] = []
    for k, name in enumerate(mutated):
        node, target = outputs[k], placeholders.get(name) if name else None
        if not isinstance(node, torch.fx.Node) or node.op != "call_function" or target is None:
            continue
        found = _args_of(node)
        if found is None or node.args[0] is not target:
            continue
        op, rest = found
        if not all(_plain(x) for a in rest for x in (a if isinstance(a, list) else [a])):
            continue
        template, extra = _template(rest, width, appended)
        outputs[k] = None  # filled in by put_writes: OpenVINO no longer returns the whole input
        writes.append(TakenWrite(k, target.name, op, extra, template))
    if not writes:
        return []
    out.args = (tuple(outputs) + tuple(appended),)
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and not node.users and _args_of(node) is not None:
            gm.graph.erase_node(node)  # a functional update nothing reads any more
    gm.recompile()
    return writes


def updated_inputs(gm: torch.fx.GraphModule) -> list[str | None]:
    """The placeholders whose updated values AOTAutograd's inference graph returns first (None for
    those whose metadata changes too): the ones its runtime wrapper copies back."""
    meta = aot_metadata()
    if meta is None or not meta.num_mutated_inp_runtime_indices:
        return []
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    names: list[str | None] = []
    for i in meta.mutated_inp_runtime_indices:
        info = meta.input_info[i]
        plain = info.mutates_data and not info.mutates_metadata and not info.mutates_storage_metadata
        names.append(placeholders[i].name if plain and i < len(placeholders) else None)
    return names
