"""Input mutations of a few positions written in place, not copied back whole.

A StaticCache's decode step writes one position of each layer's key and value cache
(``cache[:, :, pos] = k``). AOTAutograd's functional graph returns the whole updated cache, and
its runtime wrapper copies that back into the input: per token, every layer's cache leaves
OpenVINO as a fresh tensor and is copied again, though one position changed (1.45x slower decode
than a DynamicCache). Here such an output becomes the write itself: OpenVINO returns only the new
values and positions, and ``index_put_`` / ``index_copy_`` stores them into the input after the
graph has run. The wrapper's ``copy_`` of the input onto itself is then a no-op.

Only outputs AOTAutograd names as updated inputs are rewritten (a user output must stay a fresh
tensor), and only ``index_put`` without accumulation and ``index_copy`` whose first argument is
that same input. The writes run after every other output (they take them as arguments), so no
part of the graph can read an input after it was written.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.fx

from fxvino.partitioning.guarded import GuardedPartition
from fxvino.runtime.position_writes import Absorbed, PositionWrites, Write
from fxvino.utils.fx import aot_metadata

aten = torch.ops.aten


@dataclasses.dataclass(frozen=True)
class _Ref:
    """An argument of a write that the partitioned graph returns: output ``extra[index]``."""

    index: int


@dataclasses.dataclass(frozen=True)
class _Write:
    position: int  # the graph output that returns the updated input
    target: str  # the input's placeholder name
    op: torch._ops.OpOverload  # the in-place op that does the write
    extra: tuple[int, ...]  # graph outputs appended for this write's tensor arguments
    template: tuple  # the op's arguments after ``target``, with a _Ref for each tensor


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
    """``rest`` with each node replaced by a :class:`_Ref` to a new output (appended)."""
    extra: list[int] = []

    def ref(a: object) -> object:
        if not isinstance(a, torch.fx.Node):
            return a
        extra.append(width + len(appended))
        appended.append(a)
        return _Ref(len(extra) - 1)

    return tuple([ref(x) for x in a] if isinstance(a, list) else ref(a) for a in rest), tuple(extra)


def take_writes(gm: torch.fx.GraphModule, mutated: Sequence[str | None]) -> list[_Write]:
    """Rewrite ``gm``'s outputs for the updated inputs ``mutated`` (placeholder names, in the
    order of the graph's first outputs; None for one to leave alone) that are writes of a few
    positions; returns what :func:`put_writes` needs once the graph is partitioned."""
    if not any(mutated):
        return []
    placeholders = {n.name: n for n in gm.graph.find_nodes(op="placeholder")}
    out = gm.graph.output_node()
    outputs = list(out.args[0])
    width = len(outputs)
    appended: list[torch.fx.Node] = []
    writes: list[_Write] = []
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
        writes.append(_Write(k, target.name, op, extra, template))
    if not writes:
        return []
    out.args = (tuple(outputs) + tuple(appended),)
    for node in reversed(list(gm.graph.nodes)):
        if node.op == "call_function" and not node.users and _args_of(node) is not None:
            gm.graph.erase_node(node)  # a functional update nothing reads any more
    gm.recompile()
    return writes


def _position_write(w: _Write) -> Write | None:
    """``w`` as a write of one index tensor's positions along one dimension (what
    runtime/position_writes.py does natively), or None."""
    if w.op is aten.index_put_.default:
        indices, values = w.template
        refs = [k for k, a in enumerate(indices) if a is not None]
        plain = len(refs) == 1 and isinstance(indices[refs[0]], _Ref) and isinstance(values, _Ref)
        return Write(w.op, refs[0]) if plain else None
    dim, index, source = w.template
    plain = isinstance(dim, int) and isinstance(index, _Ref) and isinstance(source, _Ref)
    return Write(w.op, dim) if plain else None


def put_writes(gm: torch.fx.GraphModule, writes: Sequence[_Write]) -> None:
    """After partitioning: the in-place writes as ``gm``'s outputs for the updated inputs.

    They go last in the partitioned graph, whose order is the order it runs in, so every read of
    an input (inside OpenVINO's partitions) has happened before the input is written. Writes of
    one index tensor's positions along one dimension (a StaticCache's) run as one call, or, when
    one OpenVINO partition computes them and alone reads the input, inside that partition's call
    (position_writes.Absorbed).
    """
    if not writes:
        return
    out = gm.graph.output_node()
    outputs = list(out.args[0])
    width = min(e for w in writes for e in w.extra)
    inputs = {n.name: n for n in gm.graph.find_nodes(op="placeholder")}

    def fill(t: object, w: _Write) -> object:
        return outputs[w.extra[t.index]] if isinstance(t, _Ref) else t

    plain: list[_Plain] = []
    with gm.graph.inserting_before(out):
        for w in writes:
            if (p := _position_write(w)) is not None:
                put = p.op is aten.index_put_.default
                index = fill(w.template[0][p.dim] if put else w.template[1], w)
                values = fill(w.template[1] if put else w.template[2], w)
                plain.append(_Plain(w, p, inputs[w.target], index, values))
                continue
            args = tuple([fill(t, w) for t in a] if isinstance(a, list) else fill(a, w) for a in w.template)
            write = gm.graph.call_function(w.op, (inputs[w.target], *args))
            write.meta["val"] = inputs[w.target].meta.get("val")
            outputs[w.position] = write
        rest, dropped = _absorb(plain, outputs[:width], out)
        for item in plain:
            if item not in rest:
                outputs[item.write.position] = item.target  # written by the partition's call
        if rest:
            targets = [item.target for item in rest]
            batch = gm.graph.call_function(
                PositionWrites([item.plain for item in rest]),
                (targets, [item.index for item in rest], [item.values for item in rest]),
            )
            batch.meta["val"] = tuple(t.meta.get("val") for t in targets)
            for k, item in enumerate(rest):
                written = gm.graph.call_function(operator.getitem, (batch, k))
                written.meta["val"] = item.target.meta.get("val")
                outputs[item.write.position] = written
    out.args = (tuple(outputs[:width]),)
    for node in dropped:
        if not node.users:
            gm.graph.erase_node(node)
    gm.graph.lint()
    gm.recompile()


class _Plain(NamedTuple):
    """A write of one index tensor's positions, with the graph's nodes it reads."""

    write: _Write
    plain: Write
    target: torch.fx.Node  # the written input's placeholder
    index: torch.fx.Node
    values: torch.fx.Node


def _result_of(node: object) -> tuple[torch.fx.Node, int] | None:
    """(the OpenVINO partition's call, the result position) when ``node`` is one of its results."""
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is operator.getitem):
        return None
    call, k = node.args
    if isinstance(call, torch.fx.Node) and isinstance(call.target, GuardedPartition) and isinstance(k, int):
        return call, k
    return None


def _absorb(plain: list[_Plain], own: Sequence[object], out: torch.fx.Node) -> tuple[list[_Plain], list[torch.fx.Node]]:
    """Hand each write to the partition computing its values when that partition is the only reader
    of the written input; returns the writes left to do after the graph and the result nodes no
    longer read (the partitions return None for them)."""
    groups: dict[torch.fx.Node, list[_Plain]] = {}
    rest: list[_Plain] = []
    for item in plain:
        found = _result_of(item.values)
        call = found[0] if found is not None else None
        index = _result_of(item.index)
        ok = (
            call is not None
            and set(item.target.users) == {call}
            and item.target in call.args
            and item.values not in own
            and (
                (index is not None and index[0] is call) or (item.index.op == "placeholder" and item.index in call.args)
            )
        )
        (groups.setdefault(call, []) if ok else rest).append(item)
    dropped: list[torch.fx.Node] = []
    for call, items in groups.items():
        elsewhere = {n for item in plain if item not in items for n in (item.index, item.values)}
        results = [u for u in call.users if _result_of(u) is not None]
        unread = [g for g in results if g not in own and g not in elsewhere and set(g.users) <= {out}]
        positions = tuple(call.args.index(item.target) for item in items)
        indices = tuple(
            (True, r[1]) if (r := _result_of(item.index)) is not None else (False, call.args.index(item.index))
            for item in items
        )
        absorbed = Absorbed(
            PositionWrites([item.plain for item in items]),
            positions,
            indices,
            tuple(_result_of(item.values)[1] for item in items),
            frozenset(g.args[1] for g in unread),
        )
        if call.target.absorb(absorbed):
            dropped.extend(unread)
        else:
            rest.extend(items)
    return rest, dropped


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
