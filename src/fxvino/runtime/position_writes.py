"""A graph's writes of a few positions into its inputs, done in one call after its partitions ran.

passes/input_writes.py turns AOTAutograd's copy-back of an updated input into the write itself
(``index_put_`` / ``index_copy_`` of the new values at their positions). A StaticCache's decode
step has two per layer; as separate PyTorch ops, on the cold caches the inference leaves, they
were ~1 ms of a 30-layer Llama's ~26 ms step. :class:`PositionWrites` does them in one native call
(native/index_writes.cpp) and hands any write that is not the plain case (another dtype, an
int32 index, an index out of range, a tensor subclass) to PyTorch's own op, in order, so
semantics and errors stay PyTorch's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from fxvino import native

aten = torch.ops.aten


class Write(NamedTuple):
    """One write: ``target[..., index, ...] = values`` along ``dim``."""

    op: torch._ops.OpOverload  # aten.index_put_.default or aten.index_copy_.default
    dim: int  # for index_put_, the position of the one index tensor among the indices


class PositionWrites:
    """Callable from an FX graph: ``(targets, indices, values) -> targets``, each written in place."""

    __name__ = __qualname__ = "position_writes"  # how the FX code names it

    def __init__(self, writes: Sequence[Write]):
        self.writes = tuple(writes)
        self.dims = tuple(w.dim for w in self.writes)
        # index_put_'s rules (a negative position counts from the end, the values broadcast) or
        # index_copy_'s (neither)
        self.put = tuple(w.op is aten.index_put_.default for w in self.writes)
        self.native = native.load("index_writes")

    def __call__(
        self, targets: list[torch.Tensor], indices: list[torch.Tensor], values: list[torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        if torch.autograd.profiler._is_profiler_enabled:  # a profile shows the writes under this name
            with torch.profiler.record_function("fxvino::position_writes"):
                return self._write(targets, indices, values)
        return self._write(targets, indices, values)

    def _write(
        self, targets: list[torch.Tensor], indices: list[torch.Tensor], values: list[torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        n = len(targets)
        k = 0
        while k < n:
            if self.native is not None:
                k = self.native.write(targets, self.dims, indices, values, self.put, k)
                if k == n:
                    break
            self._torch(k, targets[k], indices[k], values[k])
            k += 1
        return tuple(targets)

    def _torch(self, k: int, target: torch.Tensor, index: torch.Tensor, values: torch.Tensor) -> None:
        """Write ``k`` by PyTorch's own op."""
        write = self.writes[k]
        if write.op is aten.index_put_.default:
            aten.index_put_.default(target, [None] * write.dim + [index], values)
        else:
            aten.index_copy_.default(target, write.dim, index, values)


class Absorbed(NamedTuple):
    """Writes a partition does itself, right after its inference, from its results' own memory.

    When a partition computes a write's values (and positions) and is the only reader of the
    written input, copying those results out only to store them again is wasted: a 30-layer
    Llama's decode step returned 120 of them (~0.5 ms). Positions are result positions (what the
    partition's call returns) or argument positions.
    """

    writes: PositionWrites
    targets: tuple[int, ...]  # argument positions of the written inputs
    indices: tuple[tuple[bool, int], ...]  # (a result?, its result or argument position) per write
    values: tuple[int, ...]  # result positions
    dropped: frozenset[int]  # results nothing else reads: the call returns None for them

    def apply(self, args: Sequence[Any], result: Callable[[int], torch.Tensor]) -> None:
        """Do the writes; ``result(k)`` is the partition's result ``k`` (a view of its memory)."""
        self.writes(
            [args[p] for p in self.targets],
            [result(i) if out else args[i] for out, i in self.indices],
            [result(k) for k in self.values],
        )

    def from_results(self, args: Sequence[Any], results: Sequence[Any]) -> tuple[Any, ...]:
        """Do the writes from results computed another way (the partition's eager fallback), and
        return what the partition's call would."""
        self.apply(args, results.__getitem__)
        return tuple(None if k in self.dropped else r for k, r in enumerate(results))
