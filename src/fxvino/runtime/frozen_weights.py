"""The per-call guard of a graph's frozen weights: a stale result never comes back.

Freezing weights into OpenVINO's constants is what makes inference fast, and Dynamo does not
guard on which tensors or values the weights are; this guard does, in one native call per call.
Compiling again is the caller's (capture/aot.py passes the two compilers in).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from fxvino.report import GraphReport
from fxvino.runtime import superseded
from fxvino.runtime.weight_check import weight_check
from fxvino.utils.fx import graph_forward

logger = logging.getLogger("fxvino")

REFREEZE_LIMIT = 8


class FrozenWeights:
    """Checks on every call that the frozen weights are still what OpenVINO's constants hold.

    Identity: Dynamo passes parameters as graph inputs without guarding which tensors they are, so
    one graph can serve several module instances (a graph break inside a repeated block calls the
    code after it with each block's own weights). A call with other tensors runs a second compile
    of the graph that takes every weight as an input instead.

    Contents: a frozen tensor changed in place since the compile (a LoRA fused into it, a new
    checkpoint loaded with ``load_state_dict``, ``.data`` replaced) has another version counter or
    data pointer; the graph is then compiled again with the current values (a model-cache hit when
    those weights were seen before), so a stale result never comes back. Weights that keep changing (eval
    calls between training steps) stop being refrozen after ``REFREEZE_LIMIT`` compiles: the graph
    then takes them as inputs, one compile that is current whatever they become. Both checks are
    one call of a :mod:`fxvino.runtime.weight_check` (native: ~7 ns per tensor).

    Released (a dynamic recompile of the same code superseded it: superseded.py), the graph
    frees its compiled models and compiles again only if it is called again.
    """

    def __init__(
        self,
        frozen: dict[int, torch.Tensor],
        runner: torch.fx.GraphModule,
        report: GraphReport,
        live: list[int],
        compile_unfrozen: Callable[[], Callable],
        refreeze: Callable[..., torch.fx.GraphModule | None],
    ) -> None:
        self.positions = tuple(frozen)
        self.tensors = tuple(frozen.values())
        self.runner: torch.fx.GraphModule | None = runner
        self.forward = graph_forward(runner)
        self.report = report
        self.live = live
        self._lock = threading.Lock()
        self.check = weight_check(self.tensors, self.positions)
        self._compile_unfrozen = compile_unfrozen
        self._refreeze = refreeze
        self._unfrozen: Callable | None = None
        self.refreezes = 0

    def unfrozen(self) -> Callable:
        if self._unfrozen is None:
            self._unfrozen = self._compile_unfrozen()
        return self._unfrozen

    def _call(self, args: Sequence[Any]) -> Any:
        """The slow path: other tensors than the frozen ones, or changed contents."""
        if not self.check.identical(args):
            return self.unfrozen()(*args)
        self.check.take()  # what is compiled next, or taken as inputs from now on
        if self.forward == self._weights_as_inputs:  # already current whatever the weights become
            return self.forward(*[args[i] for i in self.live])
        if self.refreezes >= REFREEZE_LIMIT:  # weights that keep changing: take them as inputs
            logger.warning(
                "fxvino: frozen weights changed %d times; this graph now takes them as inputs", self.refreezes
            )
            self.forward = self._weights_as_inputs
        else:
            runner = self._refreeze()
            if runner is None:  # could not compile again: weights as inputs are always current
                self.forward = self._weights_as_inputs
            else:
                self.runner, self.forward = runner, graph_forward(runner)
                self.refreezes += 1
        return self.forward(*[args[i] for i in self.live])

    def release(self, why: str) -> None:
        """Free the compiled models now; the next call, if any, compiles the graph again."""
        with self._lock:
            runner, self.runner = self.runner, None
            self.forward = self._compile_again
            self.report.released = why
        superseded.close(runner)

    def _compile_again(self, *live_args: Any) -> Any:
        with self._lock:
            if self.runner is None:
                runner = self._refreeze(why="it was released after a dynamic recompile, and is called again")
                if runner is None:
                    self.forward = self._weights_as_inputs
                else:
                    self.runner, self.forward = runner, graph_forward(runner)
        return self.forward(*live_args)

    def _weights_as_inputs(self, *live_args: Any) -> Any:
        args: list[Any] = [None] * (len(self.positions) + len(self.live))
        for i, t in zip(self.positions, self.tensors, strict=True):
            args[i] = t
        for i, a in zip(self.live, live_args, strict=True):
            args[i] = a
        return self.unfrozen()(*args)

    def boxed(self) -> Callable:
        same = self.check.same

        def run(args: list[Any]) -> Any:
            if same(args):
                return self.forward(*[args[i] for i in self.live])
            return self._call(args)

        run._boxed_call = True  # type: ignore[attr-defined]  # what make_boxed_func marks
        return run

    def unboxed(self) -> Callable:
        same = self.check.same

        def run(*args: Any) -> Any:
            if same(args):
                return self.forward(*[args[i] for i in self.live])
            return self._call(args)

        return run
