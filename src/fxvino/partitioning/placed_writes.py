"""Where a graph's in-place input writes go once it is partitioned.

passes/input_writes.py cuts a StaticCache's cache writes out of the functional graph before
partitioning: OpenVINO returns only the new values and positions. Here, after partitioning, the
writes are put back: last in the graph, so every read of an input has happened before it is
written; as one native call when they write one index tensor's positions along one dimension
(runtime/position_writes.py); and inside the call of the OpenVINO partition that computes them
when that partition alone reads the written input (position_writes.Absorbed), so the values never
become tensors.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.fx

from fxvino.partitioning.guarded import GuardedPartition
from fxvino.passes.input_writes import ResultRef, TakenWrite
from fxvino.runtime.position_writes import Absorbed, PositionWrites, Write

aten = torch.ops.aten


def _position_write(w: TakenWrite) -> tuple[Write, ResultRef, ResultRef] | None:
    """``w`` as a write of one index tensor's positions along one dimension (what
    runtime/position_writes.py does natively), with its index and values; or None."""
    if w.op is aten.index_put_.default:
        indices, values = w.template
        refs = [k for k, a in enumerate(indices) if a is not None]
        if len(refs) == 1 and isinstance(indices[refs[0]], ResultRef) and isinstance(values, ResultRef):
            return Write(w.op, refs[0]), indices[refs[0]], values
        return None
    dim, index, source = w.template
    if isinstance(dim, int) and isinstance(index, ResultRef) and isinstance(source, ResultRef):
        return Write(w.op, dim), index, source
    return None


def put_writes(gm: torch.fx.GraphModule, writes: Sequence[TakenWrite]) -> None:
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

    def fill(t: object, w: TakenWrite) -> object:
        return outputs[w.extra[t.index]] if isinstance(t, ResultRef) else t

    plain: list[_Plain] = []
    with gm.graph.inserting_before(out):
        for w in writes:
            if (found := _position_write(w)) is not None:
                p, index, values = found
                plain.append(_Plain(w, p, inputs[w.target], fill(index, w), fill(values, w)))
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

    write: TakenWrite
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
        call = values[0] if (values := _result_of(item.values)) is not None else None
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
