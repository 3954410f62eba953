"""Is a graph called with the very weights OpenVINO's constants were made from, unchanged?

Asked on every call of a graph with frozen weights (``runtime/frozen_weights.py``), so it has to
cost next to nothing: the native helper (``native/weight_stamp.cpp``) reads version counters and
storage pointers straight from each tensor, ~7 ns per tensor; the Python path here gives the same
answers at ~0.2 ms per 1,000 tensors, for machines where the helper cannot be built.

What counts as a change is what PyTorch's tracked paths leave behind: a new version counter (an
in-place op, ``copy_``, ``load_state_dict``), another storage, data pointer or storage offset
(``param.data = t``). In-place ops on ``param.data`` touch neither; ``fxvino.weights_changed``
covers them. Inference tensors (made under ``torch.inference_mode``) have no version counter:
only replacing their data is seen.
"""

from __future__ import annotations

import functools
import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from fxvino import native

logger = logging.getLogger("fxvino")

_VERSION = operator.attrgetter("_version")


class WeightCheck(Protocol):
    same: Callable[[Sequence[Any]], bool]
    """``args[positions[k]] is tensors[k]`` for every k, and no tensor changed since :meth:`take`."""

    def identical(self, args: Sequence[Any]) -> bool:
        """The identity half of :attr:`same`."""

    def take(self) -> None:
        """Stamp the tensors' current state: what the next :attr:`same` compares with."""


def weight_check(tensors: tuple[torch.Tensor, ...], positions: tuple[int, ...]) -> WeightCheck:
    """The native check when the helper is available and every tensor is a plain one, else Python's."""
    helper = native.load("weight_stamp")
    if helper is not None:
        try:
            return NativeCheck(helper, tensors, positions)
        except ValueError as e:  # a subclass that dispatches, a tensor without storage
            logger.debug("fxvino: frozen weights checked in Python: %s", e)
    return PythonCheck(tensors, positions)


class NativeCheck:
    def __init__(self, helper: Any, tensors: tuple[torch.Tensor, ...], positions: tuple[int, ...]) -> None:
        self._helper = helper
        self._stamp = helper.make(tensors, positions)
        self.same = functools.partial(helper.same, self._stamp)  # one C call per check, no Python frame

    def identical(self, args: Sequence[Any]) -> bool:
        return self._helper.identical(self._stamp, args)

    def take(self) -> None:
        self._helper.take(self._stamp)


class PythonCheck:
    def __init__(self, tensors: tuple[torch.Tensor, ...], positions: tuple[int, ...]) -> None:
        self.tensors, self.positions = tensors, positions
        self._versioned = tuple(t for t in tensors if not t.is_inference())
        self._needed = max(positions, default=-1) + 1
        self.take()

    def _state(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return tuple(map(_VERSION, self._versioned)), tuple(map(torch.Tensor.data_ptr, self.tensors))

    def take(self) -> None:
        self._seen = self._state()

    def identical(self, args: Sequence[Any]) -> bool:
        return len(args) >= self._needed and all(map(operator.is_, map(args.__getitem__, self.positions), self.tensors))

    def same(self, args: Sequence[Any]) -> bool:
        return self.identical(args) and self._state() == self._seen
