"""Static graphs that a dynamic recompile of the same code supersedes, and releasing them.

Dynamo compiles a frame with static sizes first. When a size changes it compiles the same
code again with those sizes dynamic, and from then on checks the newer graph first, so the
static graph is not called again for any size the dynamic one admits. In ``generate()`` the
first decode step (cache length = prompt length) is such a graph, and so is the first prompt's
prefill once a second prompt length has been seen. Each compiled OpenVINO model holds its own
packed copy of the weights (the CPU plugin shares packed weights only within one compiled
model): a 1.1B Llama in bf16 kept ~3.5 GB alive in a first-decode graph that never ran again.

So when a graph compiles with dynamic sizes, the live graphs it supersedes release their
compiled models before it compiles. A released graph that Dynamo does call again (a size the
dynamic graph's guards exclude) compiles again on that call: slower once, never wrong.

A graph supersedes another when both come from the same Dynamo frame, freeze the same weight
tensors, run the same ATen ops in the same order over inputs of the same dtypes and ranks, and
its dynamic input dims strictly include the other's. The index of live graphs is weak: it keeps
nothing alive and forgets a graph when its model does. It is the one registry shared between
compiled graphs, and it holds no options and changes no result.
"""

from __future__ import annotations

import logging
import operator
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.fx

logger = logging.getLogger("fxvino")


class Releasable(Protocol):
    tensors: tuple[torch.Tensor, ...]

    def release(self, why: str) -> None: ...


class Family:
    """Where a graph came from and what it computes, up to its sizes."""

    __slots__ = ("key", "sizes", "name")

    def __init__(self, key: tuple, sizes: tuple[tuple[int | None, ...], ...], name: str):
        self.key = key
        self.sizes = sizes  # of each tensor input; None where the size is dynamic
        self.name = name

    def with_tensors(self, frozen: tuple[torch.Tensor, ...]) -> Family:
        """The same graph frozen with other tensors (another module instance's weights)."""
        frame, ops, _ = self.key
        return Family((frame, ops, tuple(map(id, frozen))), self.sizes, self.name)

    @property
    def dynamic_dims(self) -> frozenset[tuple[int, int]]:
        return frozenset((i, d) for i, shape in enumerate(self.sizes) for d, n in enumerate(shape) if n is None)

    def supersedes(self, other: Family) -> bool:
        """Whether this graph serves every call ``other`` serves. Dynamo specializes sizes 0 and
        1 even in a dynamic graph (its guards ask for >= 2), so a graph compiled for size 1
        where this one is dynamic is still called for that size."""
        if self.key != other.key or not other.dynamic_dims < self.dynamic_dims:
            return False
        return all(other.sizes[i][d] >= 2 for i, d in self.dynamic_dims - other.dynamic_dims)


_lock = threading.RLock()  # a weakref callback may run while it is held
_live: dict[tuple, dict[int, tuple[weakref.ref, Family]]] = {}


def family(gm: torch.fx.GraphModule, frozen: dict[int, torch.Tensor], name: str) -> Family | None:
    """The family of an inference graph with frozen weights, or None outside a Dynamo compile."""
    from torch._guards import CompileContext

    compile_id = CompileContext.current_compile_id()
    if compile_id is None or not frozen:
        return None
    ops: list[Any] = []
    sizes: list[tuple[int | None, ...]] = []
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "placeholder" and isinstance(val, torch.Tensor):
            ops.append((val.dtype, val.dim()))
            sizes.append(tuple(None if isinstance(n, torch.SymInt) else int(n) for n in val.shape))
        elif node.op == "call_function" and _has_tensor(val):
            ops.append(node.target)
    key = (compile_id.frame_id, tuple(ops), tuple(map(id, frozen.values())))
    return Family(key, tuple(sizes), name)


def _has_tensor(val: Any) -> bool:
    if isinstance(val, (list, tuple)):
        return any(map(_has_tensor, val))
    return isinstance(val, torch.Tensor)


def release_superseded(new: Family, frozen: tuple[torch.Tensor, ...]) -> None:
    """Release the live graphs ``new`` supersedes (call before compiling it: the memory they
    free is then available to its compile)."""
    if not new.dynamic_dims:
        return
    with _lock:
        entries = _live.get(new.key, {})
        victims = [
            (graph, fam)
            for ref, fam in list(entries.values())
            if (graph := ref()) is not None and new.supersedes(fam) and _same_tensors(graph.tensors, frozen)
        ]
        for graph, _ in victims:
            del entries[id(graph)]
    for graph, fam in victims:
        logger.info("fxvino: graph %s supersedes graph %s; releasing its compiled models", new.name, fam.name)
        graph.release(f"superseded by graph {new.name}")


def _same_tensors(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def register(fam: Family, graph: Releasable) -> None:
    """Index ``graph`` (weakly) so that a later dynamic graph of its family can release it."""
    with _lock:
        for key in [k for k, v in _live.items() if not any(ref() is not None for ref, _ in v.values())]:
            del _live[key]
        entries = _live.setdefault(fam.key, {})
        gid = id(graph)
        entries[gid] = (weakref.ref(graph, _forget(fam.key, gid)), fam)


def _forget(key: tuple, gid: int) -> Callable[[weakref.ref], None]:
    def forget(_ref: weakref.ref) -> None:
        with _lock:
            entries = _live.get(key)
            if entries is not None and entries.get(gid, (None,))[0] is _ref:
                del entries[gid]
                if not entries:
                    del _live[key]

    return forget


def close(runner: torch.fx.GraphModule | None) -> None:
    """Free the compiled models of ``runner``'s partitions now, rather than when the garbage
    collector reaches the graph's reference cycles (it is paused while a graph compiles)."""
    if runner is None:
        return
    for partition in runner.meta.get("fxvino_partitions", ()):
        partition.close()
