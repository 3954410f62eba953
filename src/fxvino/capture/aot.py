"""From a Dynamo graph to compiled functional ATen graphs, through AOTAutograd.

AOTAutograd gives functional ATen IR with SymInt placeholders under dynamic shapes, and
splits training graphs into forward and backward. The compilers get the options by closure
(``functools.partial``), so two compiled models never share state.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch._dynamo.exc
import torch.fx
from torch._functorch.aot_autograd import make_boxed_func
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx._lazy_graph_module import _LazyGraphModule

from fxvino.capture import decompositions, recurrent, resample, specialize
from fxvino.options import Options
from fxvino.partitioning import isolation, placed_writes
from fxvino.partitioning.partition import partition_and_compile
from fxvino.passes import freezing, input_writes
from fxvino.report import Fallback, GraphReport, publish
from fxvino.runtime import superseded
from fxvino.runtime.frozen_weights import FrozenWeights, Instances
from fxvino.training import aot as training
from fxvino.utils.collector import gc_paused
from fxvino.utils.fx import aot_metadata, contiguous_group_norm_inputs, graph_forward

logger = logging.getLogger("fxvino")
aten = torch.ops.aten

# Exceptions Dynamo uses to restart analysis or skip a frame: they must reach Dynamo.
_DYNAMO_CONTROL_FLOW = (torch._dynamo.exc.RestartAnalysis, torch._dynamo.exc.SkipFrame)


@contextlib.contextmanager
def _outside_callers_modes() -> Iterator[None]:
    """Compiling again happens inside a model call, under whatever ``__torch_function__`` modes
    the caller runs (NNCF's hooks decompress weights through one): folding constants under them
    ran NNCF's hooks on our own ops (a float right shift). Dynamo's first compile never sees
    them; a recompile must not either."""
    with torch._C.DisableTorchFunction():
        yield


def _graph_names() -> Callable[[], str]:
    """Names for the AOT graphs of one Dynamo graph: Dynamo's compile id ("frame/recompile")
    plus a suffix per graph (forward, backward), deterministic across processes."""
    from torch._guards import CompileContext

    compile_id = CompileContext.current_compile_id()
    prefix = f"g{compile_id}" if compile_id is not None else "g"
    c = itertools.count()
    return lambda: f"{prefix}.{next(c)}"


def compile_dynamo_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: Options) -> Callable:
    """The body of the ``fxvino`` backend for one Dynamo graph."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.utils import get_static_address_type

    # Real values of parameters/buffers (only those: user inputs are not kept alive).
    static = {
        i: t
        for i, t in enumerate(example_inputs)
        if isinstance(t, torch.Tensor) and get_static_address_type(t) is not None
    }
    static = freezing.flattened_static(example_inputs, static)
    # Decided here, in the caller's state: AOTAutograd compiles with autocast (and grad) off.
    plain_call = not (torch.is_grad_enabled() or torch._C._is_any_autocast_enabled())
    plain_call = plain_call and not any(isinstance(a, (list, tuple, dict)) for a in example_inputs)
    if not torch.is_grad_enabled() or not any(isinstance(a, torch.Tensor) and a.requires_grad for a in example_inputs):
        recurrent.keep_grus_whole(gm)  # an inference graph: nn.GRU stays one op for OpenVINO
        resample.keep_resizes_whole(gm)  # and F.interpolate one Interpolate
    graph_id = _graph_names()
    direct: list[tuple[Callable, int]] = []  # (inference graph, its arity) if AOTAutograd's wrappers are idle
    compile_fn = functools.partial(_compile_aten, options=options, static=static, next_id=graph_id, direct=direct)
    if options.aot_autograd:
        bw = functools.partial(compile_fn, kind="backward")
    else:
        bw = functools.partial(_backward_in_pytorch, next_id=graph_id)
    backend = aot_autograd(
        fw_compiler=functools.partial(compile_fn, kind="forward"),
        bw_compiler=bw,
        inference_compiler=functools.partial(compile_fn, kind="inference"),
        decompositions=decompositions.decomposition_table(options),
        **(training.aot_partitioning() if options.aot_autograd else {}),
    )
    try:
        with gc_paused(), training.backward_compiled_early() if options.aot_autograd else contextlib.nullcontext():
            compiled = backend(gm, example_inputs)
        # Only when the graph takes Dynamo's own arguments: no lifted parameters, no deduplication.
        if direct and direct[0][1] == len(example_inputs) and plain_call:
            return direct[0][0]
        return compiled
    except _DYNAMO_CONTROL_FLOW:
        raise  # Dynamo restarts or skips the frame itself; these are not failures
    except Exception as e:  # noqa: BLE001 - a model that runs eagerly must not crash
        runner = (
            _compile_specialized(gm, example_inputs, backend, graph_id) if specialize.is_data_dependent(e) else None
        )
        if runner is not None:
            return runner
        report = GraphReport(graph_id(), "dynamo")
        report.fallback(Fallback("graph", "AOTAutograd capture", f"{type(e).__name__}: {e}", "eager"))
        publish(report)
        return gm.forward


def _compile_specialized(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], backend: Callable, graph_id: Callable[[], str]
) -> Callable | None:
    """Compile ``gm`` for the values of the 0-d tensors its sizes depend on (specialize.py), or None."""
    made = specialize.specialize(gm, example_inputs)
    if made is None:
        return None
    special, values = made
    try:
        with gc_paused():
            compiled = backend(special, example_inputs)
    except _DYNAMO_CONTROL_FLOW:
        raise
    except Exception:  # noqa: BLE001 - the caller reports the original failure
        logger.debug("fxvino: the value-specialized graph failed as well", exc_info=True)
        return None
    return specialize.guarded(compiled, gm.forward, values, GraphReport(graph_id(), "dynamo"))


def _compile_aten(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    options: Options,
    static: dict[int, torch.Tensor],
    next_id: Callable[[], str],
    kind: str,
    direct: list[tuple[Callable, int]] | None = None,
) -> Callable:
    report = GraphReport(next_id(), kind)
    contiguous_group_norm_inputs(gm)  # before anything may run it in PyTorch
    frozen = freezing.frozen_inputs(gm, static) if kind == "inference" else {}
    mutated = input_writes.updated_inputs(gm) if kind == "inference" else []
    report.frozen_inputs = len(frozen)
    live = [i for i in range(len(example_inputs)) if i not in frozen]
    family = superseded.family(gm, frozen, report.name) if kind == "inference" else None
    if family is not None:  # before compiling: what older graphs free is then there for this one
        superseded.release_superseded(family, tuple(frozen.values()))
    try:
        # Work on a copy of the graph: if anything fails half-way, ``gm`` is still intact.
        work = _LazyGraphModule(gm, copy.deepcopy(gm.graph))  # code is generated only if run
        with unset_fake_temporarily():  # AOTAutograd calls us in fake mode; weights are real
            report.folded_nodes = freezing.freeze_and_fold(work, frozen)
        runner = _partition(work, options, report, mutated)
    except Exception as e:  # noqa: BLE001 - a bug of ours must degrade, not crash the model
        runner = _graph_fallback(gm, report, e)
        return make_boxed_func(gm) if runner is None else _boxed_call_of(runner)
    publish(report)
    if not frozen:
        boxed, unboxed = _boxed_call(runner, None), _unboxed_call(runner, None)
    else:
        weights = FrozenWeights(
            frozen,
            runner,
            report,
            live,
            Instances(
                functools.partial(_compile_unfrozen, gm, options, next_id, report.name, mutated),
                functools.partial(_refreeze, gm, options, next_id, name=report.name, mutated=mutated),
            ),
            family=family,
        )
        boxed, unboxed = weights.boxed(), weights.unboxed()
    if direct is not None and kind == "inference" and _runtime_wrappers_idle(example_inputs):
        direct.append((unboxed, len(example_inputs)))
    return boxed


def _partition(
    work: torch.fx.GraphModule, options: Options, report: GraphReport, mutated: Sequence[str | None]
) -> torch.fx.GraphModule:
    """``partition_and_compile``, with the updated inputs that are writes of a few positions
    written in place (input_writes.py) rather than returned whole."""
    writes = input_writes.take_writes(work, mutated)
    runner = partition_and_compile(work, options, report)
    placed_writes.put_writes(runner, writes)
    return runner


def _refreeze(
    gm: torch.fx.GraphModule,
    options: Options,
    next_id: Callable[[], str],
    frozen: dict[int, torch.Tensor],
    name: str,
    mutated: Sequence[str | None] = (),
    why: str = "its frozen weights changed in place",
) -> torch.fx.GraphModule | None:
    """``gm`` compiled again with ``frozen`` as constants: the current values of its own frozen
    weights, or another module instance's weights (see ``FrozenWeights``)."""
    report = GraphReport(next_id(), "inference")
    report.frozen_inputs = len(frozen)
    logger.info("fxvino: graph %s: %s; compiling it again as %s", name, why, report.name)
    try:
        work = _LazyGraphModule(gm, copy.deepcopy(gm.graph))
        with gc_paused(), torch.no_grad(), _outside_callers_modes():
            report.folded_nodes = freezing.freeze_and_fold(work, frozen)
            runner = _partition(work, options, report, mutated)
    except Exception as e:  # noqa: BLE001 - the caller runs the weights-as-inputs graph instead
        logger.warning("fxvino: compiling graph %s again failed (%s); running it with weights as inputs", name, e)
        return None
    publish(report)
    return runner


def _compile_unfrozen(
    gm: torch.fx.GraphModule,
    options: Options,
    next_id: Callable[[], str],
    name: str,
    mutated: Sequence[str | None] = (),
) -> Callable:
    """``gm`` compiled with its parameters as inputs (see ``FrozenWeights``), on first need."""
    report = GraphReport(next_id(), "inference")
    logger.warning("fxvino: graph %s: compiling it as %s with the weights as inputs", name, report.name)
    try:
        work = _LazyGraphModule(gm, copy.deepcopy(gm.graph))
        with gc_paused(), _outside_callers_modes():
            runner = _partition(work, options, report, mutated)
    except Exception as e:  # noqa: BLE001 - degrade, never crash the model
        runner = _graph_fallback(gm, report, e)
        return gm.forward if runner is None else runner
    publish(report)
    return graph_forward(runner)


def _graph_fallback(gm: torch.fx.GraphModule, report: GraphReport, error: Exception) -> Callable | None:
    """After fxvino failed on ``gm``: Inductor's compile of it, or None to run it eagerly; reported."""
    logger.exception("fxvino: compiling graph %s failed", report.name)
    why = f"{type(error).__name__}: {error}"
    runner, ran_on, inductor_why = isolation.inductor_fallback(gm)
    report.fallback(
        Fallback("graph", f"{report.num_nodes} nodes", f"{why}; {inductor_why}" if inductor_why else why, ran_on)
    )
    publish(report)
    return None if ran_on == "eager" else runner


def _boxed_call(runner: torch.fx.GraphModule, live: list[int] | None) -> Callable:
    """The compiled graph as AOTAutograd calls it (one list of arguments), in as few Python
    frames as possible: each costs on every call of the model."""
    forward = graph_forward(runner)

    if live is None:

        def run(args: list[Any]) -> Any:
            return forward(*args)
    else:

        def run(args: list[Any]) -> Any:
            return forward(*[args[i] for i in live])

    run._boxed_call = True  # type: ignore[attr-defined]  # what make_boxed_func marks
    return run


def _boxed_call_of(fn: Callable) -> Callable:
    def run(args: list[Any]) -> Any:
        return fn(*args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _unboxed_call(runner: torch.fx.GraphModule, live: list[int] | None) -> Callable:
    """The compiled graph as Dynamo calls its backend's result (positional arguments)."""
    forward = graph_forward(runner)
    if live is None:
        return forward

    def run(*args: Any) -> Any:
        return forward(*[args[i] for i in live])

    return run


def _runtime_wrappers_idle(example_inputs: Sequence[Any]) -> bool:
    """Whether AOTAutograd's runtime wrappers would only pass arguments and results through.

    They restore input mutations, regenerate outputs that alias inputs, disable grad and
    autocast around the graph, and mark dynamic output dims. Under ``no_grad`` (which Dynamo
    guards on), without autocast, mutations, aliases and tensor subclasses, none of that has
    work to do, and skipping them saves ~10 us per call. The caller checks grad mode and autocast
    (in its own state), and that Dynamo's graph and this one take the same arguments (no lifted
    parameters, no deduplication).
    """
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    meta = aot_metadata()
    if meta is None or any(is_traceable_wrapper_subclass(a) for a in example_inputs):
        return False
    return (
        meta.num_mutated_inp_runtime_indices == 0
        and not any(i.mutates_data or i.mutates_metadata for i in meta.input_info)
        and meta.num_outputs_aliased == 0
        and meta.num_intermediate_bases == 0
        and meta.num_unsafe_view_outputs == 0
        and not meta.dynamic_outputs
        and meta.grad_enabled_mutation is None
        and not meta.tokens
        and not meta.is_rng_op_functionalized
    )


def _backward_in_pytorch(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, next_id) -> Callable:
    report = GraphReport(next_id(), "backward")
    report.num_nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    report.fallback(
        Fallback(
            "backward graph", f"{report.num_nodes} nodes", "aot_autograd is False: backward runs in PyTorch", "eager"
        )
    )
    publish(report)
    return make_boxed_func(gm)
