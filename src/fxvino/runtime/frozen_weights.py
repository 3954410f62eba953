"""The per-call guard of a graph's frozen weights: a stale result never comes back.

Freezing weights into OpenVINO's constants is what makes inference fast, and Dynamo does not
guard on which tensors or values the weights are; this guard does, in one native call per call.
Compiling again is the caller's (capture/aot.py passes the two compilers in).
"""

from __future__ import annotations

import logging
import sys
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
# Module instances whose weights one graph freezes, each into its own compiled model; past that,
# one more compile takes the weights as inputs for every further instance.
INSTANCE_LIMIT = 16


class WeightLayoutChanged(RuntimeError):
    """A frozen weight's dtype, sizes or device differ from those the graph was traced with.

    Dynamo compiles again for such a change unless its guards on module tensors were filtered
    away (``options={"guard_filter_fn": ...}``); then the traced graph no longer fits the weights,
    and compiling it with them would fail in OpenVINO or compute with the old sizes."""


# Strides are left out: the values are copied into OpenVINO's constants (or bound as inputs) the
# same whatever their strides.
Layout = tuple[torch.dtype, tuple[int, ...], torch.device]


def _layout(tensor: torch.Tensor) -> Layout:
    return tensor.dtype, tuple(tensor.shape), tensor.device


def _describe(layout: Layout) -> str:
    dtype, sizes, device = layout
    return f"{str(dtype).removeprefix('torch.')}{list(sizes)} on {device}"


class Instances:
    """What the instances of one graph share: its compilers, the instances frozen so far (found by
    the first frozen tensor's identity), and the weights-as-inputs compile, made on first need.

    ``compile_frozen(frozen, why=...)`` compiles the graph with ``frozen`` (input position ->
    tensor) as constants, or returns None; ``compile_unfrozen()`` with every weight as an input."""

    def __init__(self, compile_unfrozen: Callable[[], Callable], compile_frozen: Callable[..., Any]) -> None:
        self.compile_unfrozen = compile_unfrozen
        self.compile_frozen = compile_frozen
        self.unfrozen: Callable | None = None
        self.by_first: dict[int, list[FrozenWeights]] = {}
        # Instances (by their first frozen tensor's identity) that the weights-as-inputs compile
        # serves: their calls go straight to it, without the lock or a look for dropped instances.
        self.as_inputs: set[int] = set()
        self.count = 1  # the graph's own
        self.lock = threading.Lock()

    def drop_orphans(self) -> None:
        """Forget the instances whose tensors nothing but this graph references any more (a model
        of the same class compiled after another one was dropped: each new checkpoint evaluated in
        turn), and free their compiled models: their tensors can never be passed again."""
        for first, others in list(self.by_first.items()):
            kept = []
            for other in others:
                if other.orphaned():
                    other.release("its module instance is gone")
                    self.count -= 1
                    self.as_inputs.clear()  # a slot is free: those may be frozen when next seen
                else:
                    kept.append(other)
            if kept:
                self.by_first[first] = kept
            else:
                del self.by_first[first]

    def find(self, first: int, args: Sequence[Any]) -> FrozenWeights | None:
        for other in self.by_first.get(first, ()):
            if other.check.identical(args):
                return other
        return None

    def weights_as_inputs(self) -> Callable:
        if self.unfrozen is None:
            with self.lock:
                if self.unfrozen is None:
                    self.unfrozen = self.compile_unfrozen()
        return self.unfrozen


class FrozenWeights:
    """Checks on every call that the frozen weights are still what OpenVINO's constants hold.

    Identity: Dynamo passes parameters as graph inputs without guarding which tensors they are, so
    one graph can serve several module instances (a graph break inside a repeated block calls the
    code after it with each block's own weights). A call with other tensors compiles the graph
    again with those frozen, once per instance, as a graph without the break would have frozen
    each block's weights: with weights as inputs OpenVINO folds nothing of them and repacks them on
    every call, and an LSTM whose weights are not constants runs as a TensorIterator, not the CPU
    plugin's fused kernel (EnCodec's second LSTM: 1.8 ms against 0.22). Past ``INSTANCE_LIMIT``
    instances, and for every other instance when the frozen tensors are all 0-d, a compile that
    takes every weight as an input serves the others. Each instance keeps
    its tensors referenced, as the graph's own do.

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
        instances: Instances,
        family: superseded.Family | None = None,
        own: bool = True,
    ) -> None:
        self.positions = tuple(frozen)
        self.tensors = tuple(frozen.values())
        self.layouts = tuple(_layout(t) for t in self.tensors)  # what the traced graph was made for
        self.runner: torch.fx.GraphModule | None = runner
        self.forward = graph_forward(runner)
        self.report = report
        self.live = live
        self._lock = threading.Lock()
        self.check = weight_check(self.tensors, self.positions)
        self.own = own  # the graph's own weights, whose report this is; else another instance's
        self.instances = instances
        self.refreezes = 0
        self.family = family  # what a dynamic recompile of this graph supersedes (superseded.py)
        if family is not None:
            superseded.register(family, self)

    def unfrozen(self) -> Callable:
        return self.instances.weights_as_inputs()

    def orphaned(self) -> bool:
        """Whether only this graph references the frozen tensors: the tuple, the loop's name and
        ``getrefcount``'s own argument make 3; a module holding one makes 4."""
        return all(sys.getrefcount(t) <= 3 for t in self.tensors)

    def check_layouts(self, args: Sequence[Any]) -> None:
        """Raise :class:`WeightLayoutChanged` if a weight passed at a frozen position has another
        dtype, sizes or device than the traced graph's: only a guard filter lets such a call reach
        the graph, and no compile of it would be right. Run on the slow path only."""
        for position, was in zip(self.positions, self.layouts, strict=True):
            now = _layout(args[position])
            if now != was:
                raise WeightLayoutChanged(
                    f"fxvino: graph {self.report.name} was traced for a weight of {_describe(was)}, "
                    f"and is now called with {_describe(now)} (argument {position}). Dynamo compiles "
                    "again for a changed weight unless its guards on module tensors are filtered "
                    "(options={'guard_filter_fn': ...}); with such a filter, keep weights' dtypes and "
                    "sizes, or call torch._dynamo.reset() after changing them"
                )

    def _refreeze(self, why: str = "its frozen weights changed in place") -> torch.fx.GraphModule | None:
        return self.instances.compile_frozen(dict(zip(self.positions, self.tensors, strict=True)), why=why)

    def _run(self, args: Sequence[Any]) -> Any:
        if self.check.same(args):
            return self.forward(*[args[i] for i in self.live])
        return self._call(args)

    def _other_instance(self, args: Sequence[Any]) -> Any:
        """A call with another module instance's weights: that instance's own frozen compile."""
        shared = self.instances
        first = id(args[self.positions[0]])
        other = shared.find(first, args)
        if other is None and first in shared.as_inputs:
            return self.unfrozen()(*args)
        if other is None:
            self.check_layouts(args)  # a new instance's weights: the traced graph must fit them
            with shared.lock:  # one compile per instance, whichever threads call it first
                other = shared.find(first, args) or self._freeze_instance(first, args)
        return self.unfrozen()(*args) if other is None else other._run(args)

    def _freeze_instance(self, first: int, args: Sequence[Any]) -> FrozenWeights | None:
        """The graph compiled with this instance's weights frozen, or None past ``INSTANCE_LIMIT``,
        for 0-d weights only, or if that compile failed: the weights-as-inputs graph then serves it
        (and every later call of it). Under the lock.

        0-d weights (the sizes and strides a module keeps as buffers) give OpenVINO nothing to fold
        that matters, while each frozen compile is one more model whose inference runs cold between
        the others: EnCodec's padding arithmetic, a graph of its own for each of 32 convolutions."""
        shared = self.instances
        shared.drop_orphans()
        scalars = all(args[i].dim() == 0 for i in self.positions)
        if scalars or shared.count >= INSTANCE_LIMIT:
            if shared.unfrozen is None and not scalars:
                logger.warning(
                    "fxvino: graph %s was called with the weights of more than %d module instances; "
                    "the others run a compile that takes them as inputs",
                    self.report.name,
                    INSTANCE_LIMIT,
                )
            shared.as_inputs.add(first)
            return None
        shared.count += 1
        frozen = {i: args[i] for i in self.positions}
        # This instance's graphs of the same code that this one supersedes (a first decode step
        # beside the dynamic one) are released, as for the graph's own weights.
        tensors = tuple(frozen.values())
        family = None if self.family is None else self.family.with_tensors(tensors)
        if family is not None:
            superseded.release_superseded(family, tensors)
        runner = shared.compile_frozen(frozen, why="called with another module instance's weights")
        if runner is None:  # the weights-as-inputs graph serves this instance and every later one
            shared.count = INSTANCE_LIMIT
            shared.as_inputs.add(first)
            return None
        other = FrozenWeights(frozen, runner, self.report, self.live, shared, family, own=False)
        shared.by_first.setdefault(first, []).append(other)
        return other

    def _call(self, args: Sequence[Any]) -> Any:
        """The slow path: other tensors than the frozen ones, or changed contents."""
        if not self.check.identical(args):
            return self._other_instance(args)
        self.check_layouts(args)  # the same tensors, changed in place: resized, or ``.data`` replaced
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
        """Free this instance's compiled models now; its next call, if any, compiles the graph again."""
        if self.own:
            self.report.released = why
        with self._lock:
            runner, self.runner = self.runner, None
            self.forward = self._compile_again
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
