"""Compile one partition: model cache, lowering, compile properties, shared weights, compile, store.

Partitioning decides what a partition holds and what happens when it fails; this module only
turns one FX partition into something that runs on the device. Failures are raised, typed so
that the caller can split the partition around a node (``Blamed``) or bisect a compile failure
(``CompileFailed``); anything else degrades the whole partition to Inductor.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from fxvino.cache import lookup as cache
from fxvino.compilation import plugin_config, shared_weights
from fxvino.devices import core, widened_types
from fxvino.lowering import eager_checks
from fxvino.lowering.convert import LoweringError, lower_graph
from fxvino.options import Options
from fxvino.quantization.compressed import dynamic_quantization_note
from fxvino.quantization.saturation import saturation_note
from fxvino.report import Note
from fxvino.runtime.compiled_partition import CompiledPartition
from fxvino.training import aot as training


class Blamed(Exception):
    """OpenVINO rejected a partition because of one node; the partition is split around it."""

    def __init__(self, node: torch.fx.Node, reason: str):
        super().__init__(reason)
        self.node = node
        self.reason = reason


class CompileFailed(Exception):
    """OpenVINO's ``compile_model`` raised (the cause); the caller may bisect for the node to blame."""


@dataclasses.dataclass
class Compiled:
    """One partition ready to run, and what its report records."""

    partition: CompiledPartition
    runtime_positions: list[int]  # which of the partition's arguments it takes at run time
    lowering_seconds: float
    compile_seconds: float
    primed: bool = False
    notes: tuple[Note, ...] = ()  # what the user should know about the compiled model
    checked: bool = False  # its last result is the checks of its indices (lowering/eager_checks.py)


def compile_partition(
    sub: torch.fx.GraphModule,
    constants: Mapping[int, Any],
    args: Sequence[Any],
    options: Options,
    kind: str,
    name: str,
) -> Compiled:
    """``sub`` (called with ``args``, of which ``constants`` are the frozen ones) compiled for
    ``options.device``, from the model cache when it holds it. ``kind`` is the graph's kind
    ("inference", "forward", "backward"): training graphs are prepared and primed, and only
    inference partitions share weights."""
    with unset_fake_temporarily():  # constants are real tensors; AOTAutograd runs us in fake mode
        t0 = time.perf_counter()
        lends = kind in ("forward", "backward")  # training graphs lend their static inputs
        key, hit = cache.lookup(options, sub, constants) if options.model_caching else (None, None)
        if hit is not None:  # a hit skips lowering and compiling (cache/store.py)
            partition = CompiledPartition(hit.compiled, hit.inputs, hit.outputs, lend_static=lends)
            partition.mapping = hit.mapping  # the imported model reads the mapped file: keep it open
            notes = _notes(hit.compiled, options.device)
            checked = eager_checks.checked(hit.outputs)
            return Compiled(partition, hit.runtime_positions, 0.0, time.perf_counter() - t0, False, notes, checked)
        try:
            lowered = lower_graph(sub, dict(constants), name, widened_types(options.device), checks=True)
        except LoweringError as e:
            if e.node is None or e.node.op != "call_function":
                raise
            raise Blamed(e.node, f"lowering failed: {e.reason}") from e
        lowered.plugin_config = plugin_config.plugin_config(lowered.model)
        if kind in ("forward", "backward"):
            training.prepare(lowered, kind)
        t1 = time.perf_counter()
        config = options.compile_config(lowered.plugin_config)
        plugin_config.round_truncated_casts(lowered.model, config, options.device)
        together, member = None, None
        if options.share_weights is not False and kind == "inference" and shared_weights.eligible(config):
            weights = shared_weights.weights_of(dict(constants))
            if weights:  # one compiled model with live partitions over the same weights
                example = shared_weights.example_of(sub.graph, [args[i] for i in lowered.runtime_positions])
                merged_config = options.compile_config(plugin_config.merged(lowered.plugin_config))
                member = shared_weights.Member.of(lowered, weights, options.device, merged_config, name, example)
                together = shared_weights.compile_together(member, options.share_weights == "auto")
        primed = False
        if together is not None:
            partition = together
        else:
            try:
                compiled = core().compile_model(lowered.model, options.device, config)
            except Exception as e:
                raise CompileFailed(e) from e
            if key is not None:
                cache.store(options, key, compiled, lowered, name, plugin_config.run_time(lowered.plugin_config))
            if kind == "backward":  # compiled with its forward (training/aot.py)
                primed = training.prime(compiled, lowered.model)
            partition = CompiledPartition(compiled, lowered.inputs, lowered.outputs, lend_static=lends)
            if member is not None:
                shared_weights.remember(partition, member)
        partition.packed_constants = lowered.packed  # what later graphs over the same weights reuse
        t2 = time.perf_counter()
    notes = _notes(partition.compiled, options.device)
    checked = eager_checks.checked(lowered.outputs)
    return Compiled(partition, lowered.runtime_positions, t1 - t0, t2 - t1, primed, notes, checked)


def _notes(compiled: Any, device: str) -> tuple[Note, ...]:
    """What the user should know about ``compiled``'s arithmetic."""
    return tuple(n for n in (dynamic_quantization_note(compiled), saturation_note(compiled, device)) if n)
