"""Split an ATen graph into OpenVINO partitions and PyTorch leftovers, then compile each.

The support predicate is the lowering registry (``decline_reason``). Each fused partition is
lowered and compiled; one that fails runs through Inductor, or eagerly if Inductor fails too.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import operator
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from fxvino.cache import lookup as cache
from fxvino.compilation import plugin_config, shared_weights
from fxvino.devices import core, widened_types
from fxvino.lowering import ensure_registered
from fxvino.lowering.convert import LoweringError, lower_graph
from fxvino.lowering.registry import decline_reason, op_name
from fxvino.lowering.views import view_chain
from fxvino.options import Options
from fxvino.partitioning import isolation
from fxvino.quantization.compressed import dynamic_quantization_note
from fxvino.report import Fallback, GraphReport, PartitionReport
from fxvino.runtime import weight_pages
from fxvino.runtime.compiled_partition import CompiledPartition
from fxvino.training import aot as training
from fxvino.utils.fx import fetch_attr, graph_forward, placeholders_to_attrs

logger = logging.getLogger("fxvino")

# Ops that compute nothing: a partition made only of these is not worth a model.
NON_COMPUTE = ["_operator.getitem", "torch.ops.aten.sym_size.int"]


class _Support(OperatorSupport):
    def __init__(self, reasons: dict[torch.fx.Node, str | None]):
        super().__init__()
        self.reasons = reasons

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        return node.op == "call_function" and self.reasons.get(node, "") is None


def partition_and_compile(gm: torch.fx.GraphModule, options: Options, report: GraphReport) -> torch.fx.GraphModule:
    """Rewrite ``gm`` in place so OpenVINO runs every partition it can; returns the graph to run."""
    ensure_registered()
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    reasons = {n: decline_reason(n, options.disabled_ops) for n in calls}
    report.num_nodes = len(calls)
    job = _Job(options, report)
    runner = _split_and_compile(gm, reasons, job, report.name)
    runner.meta["fxvino_partitions"] = job.partitions  # what releasing the graph frees (superseded.py)
    return runner


@dataclasses.dataclass
class _Job:
    """What every partition of one graph shares: options, the report, and the isolation budget."""

    options: Options
    report: GraphReport
    isolations: int = 0
    device_ok: bool | None = None  # whether the device compiles anything (asked once, lazily)
    partitions: list[CompiledPartition] = dataclasses.field(default_factory=list)

    def device_compiles(self) -> bool:
        if self.device_ok is None:
            self.device_ok = isolation.device_compiles(self.options)
        return self.device_ok


def _split_and_compile(
    gm: torch.fx.GraphModule, reasons: dict[torch.fx.Node, str | None], job: _Job, prefix: str
) -> torch.fx.GraphModule:
    """Partition ``gm`` by ``reasons`` (None: supported) and compile each partition.

    Partition names start with ``prefix`` ("g0/0.0.fused_0"; a partition split around an
    isolated node names its parts after itself: "g0/0.0.fused_0.fused_1").
    """
    _decline_orphan_getitems(reasons)
    _keep_views_real(reasons)
    _record_torch_nodes(job.report, reasons)
    calls = list(reasons)
    if calls and all(why is None for why in reasons.values()):
        fused = _whole_graph_partition(gm)  # the common case, without the partitioner's cost
    else:
        partitioner = CapabilityBasedPartitioner(
            gm, _Support(reasons), allows_single_node_partition=True, non_compute_ops=NON_COMPUTE
        )
        partitions = partitioner.propose_partitions()
        if not partitions:
            return gm
        # Nodes the partitioner left out although supported (e.g. lone getitems) run in PyTorch too.
        in_partition = {n for p in partitions for n in p.nodes}
        for n in calls:
            if reasons[n] is None and n not in in_partition and n.target is not operator.getitem:
                job.report.torch_ops[op_name(n.target)] += 1
        fused = partitioner.fuse_partitions(partitions)
    with weight_pages.compiling():  # the weights' mapped pages leave memory as the compiles read them
        for node in list(fused.graph.find_nodes(op="call_module")):
            if not node.target.startswith("fused_"):
                continue
            sub = getattr(fused, node.target)
            _compile_partition(fused, node, sub, job, prefix)
    # Constants a compiled partition holds are no longer read here: left in, the generated code
    # would still fetch each one from the module on every call (BERT: 391 lookups, 0.18 ms).
    for node in list(fused.graph.find_nodes(op="get_attr")):
        if not node.users:
            fused.graph.erase_node(node)
    fused.graph.lint()
    fused.recompile()
    return fused


def _decline_orphan_getitems(reasons: dict[torch.fx.Node, str | None]) -> None:
    """A getitem of a node that runs in PyTorch reads a Python tuple: it stays in PyTorch too."""
    for n, why in reasons.items():
        if why is None and n.target is operator.getitem:
            src = n.args[0]
            if isinstance(src, torch.fx.Node) and reasons.get(src) is not None:
                reasons[n] = reasons[src]


# Ops that read their input's storage rather than its values.
_STORAGE_READERS = frozenset({torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_copy.default})


def _keep_views_real(reasons: dict[torch.fx.Node, str | None]) -> None:
    """Views whose *storage* matters run in PyTorch, where they are real views.

    An as_strided that runs in PyTorch reads its input's storage: given an OpenVINO partition's
    fresh contiguous copy of a view, it would read the wrong elements. And a graph output that
    views an input through a view with symbolic arguments (``tensor_split`` at ``.item()`` positions) is
    rebuilt by AOTAutograd from the returned tensor's own strides and storage offset, which a
    copy does not have.
    """
    for n, why in list(reasons.items()):
        if why is not None and n.target in _STORAGE_READERS:
            _decline_view_chain(n.args[0], reasons, "a view read through its storage by an as_strided in PyTorch")
    outputs = next((n for n in (list(reasons)[-1:] or []) for n in n.graph.find_nodes(op="output")), None)
    for out in torch.utils._pytree.tree_leaves(outputs.args[0] if outputs is not None else ()):
        if not (isinstance(out, torch.fx.Node) and _aliases_input_dynamically(out)):
            continue
        found = view_chain(out)
        if found is not None and all(isinstance(s, int) for s in out.meta["val"].stride()):
            # The runtime returns a real view of the input, at the offset the partition computes.
            out.meta["fxvino_view_of_input"] = found[0].name
            continue
        _decline_view_chain(
            out,
            reasons,
            "an output viewing an input through views with symbolic arguments is made in PyTorch "
            "(AOTAutograd rebuilds it from the real view's strides and offset)",
        )


def _decline_view_chain(x: Any, reasons: dict[torch.fx.Node, str | None], why: str) -> None:
    while isinstance(x, torch.fx.Node) and x in reasons and isinstance(x.target, torch._ops.OpOverload):
        if not x.target.is_view:
            break
        reasons[x] = reasons[x] or why
        x = x.args[0]


def _aliases_input_dynamically(node: torch.fx.Node) -> bool:
    """An output that views a graph input through a view with a symbolic argument (a size, start or
    stride computed from symbols, data-dependent or not): AOTAutograd replays only views whose
    arguments are all static (``ViewMeta.has_symbolic_inputs``) and rebuilds the others with
    ``as_strided`` from the returned tensor's own strides and offset, which a copy does not have
    (``x[1 : x.shape[0] - 1]`` under ``dynamic=True`` came back as ``x[0 : n - 2]``)."""
    if not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    x, symbolic = node, False
    while x.op == "call_function" and isinstance(x.target, torch._ops.OpOverload) and x.target.is_view:
        leaves = torch.utils._pytree.tree_leaves((x.args[1:], x.kwargs))
        symbolic = symbolic or any(isinstance(a, (torch.fx.Node, torch.SymInt)) for a in leaves)
        x = x.args[0]
    return symbolic and x is not node and x.op == "placeholder"


def _record_torch_nodes(report: GraphReport, reasons: dict[torch.fx.Node, str | None]) -> None:
    groups: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for n, why in reasons.items():
        if why is not None:
            if n.target is operator.getitem:
                continue  # part of its source node's record
            groups[(op_name(n.target), why)].append(n.name)
            report.torch_ops[op_name(n.target)] += 1
    for (op, why), names in groups.items():
        shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
        report.fallback(Fallback(shown, op, why, "pytorch"))


class _Blamed(Exception):
    """OpenVINO rejected a partition because of one node; the partition is split around it."""

    def __init__(self, node: torch.fx.Node, reason: str):
        super().__init__(reason)
        self.node = node
        self.reason = reason


def _compile_partition(
    parent: torch.fx.GraphModule,
    node: torch.fx.Node,
    sub: torch.fx.GraphModule,
    job: _Job,
    prefix: str,
) -> None:
    options, report = job.options, job.report
    single = _normalize_tuple_output(sub)
    ops_here = collections.Counter(op_name(n.target) for n in sub.graph.nodes if n.op == "call_function")
    name = f"{prefix}.{node.target}"
    preport = PartitionReport(name, sum(ops_here.values()), ops_here)
    constants = {
        i: fetch_attr(parent, a.target)
        for i, a in enumerate(node.args)
        if isinstance(a, torch.fx.Node) and a.op == "get_attr"
    }
    if options.page_out_weights and report.kind == "inference":  # training weights are inputs
        weight_pages.watch(constants.values(), preport)  # read by hashing and compiling below
    key, hit, together, weights, member = None, None, None, {}, None
    try:
        with unset_fake_temporarily():  # constants are real tensors; AOTAutograd runs us in fake mode
            t0 = time.perf_counter()
            if options.model_caching:  # a hit skips lowering and compiling (cache/store.py)
                key, hit = cache.lookup(options, sub, constants)
            if hit is not None:
                lowered, compiled = hit, hit.compiled
                t1 = t0
            else:
                try:
                    lowered = lower_graph(sub, constants, name, widened_types(options.device))
                except LoweringError as e:
                    if e.node is None or e.node.op != "call_function":
                        raise
                    raise _Blamed(e.node, f"lowering failed: {e.reason}") from e
                lowered.plugin_config = plugin_config.plugin_config(lowered.model)
                if report.kind in ("forward", "backward"):
                    training.prepare(lowered, report.kind)
                t1 = time.perf_counter()
                config = options.compile_config(lowered.plugin_config)
                share = options.share_weights is not False  # True or "auto"
                share = share and report.kind == "inference" and shared_weights.eligible(config)
                weights = shared_weights.weights_of(constants) if share else {}
                if weights:  # one compiled model with live partitions over the same weights
                    runtime_args = [node.args[i] for i in lowered.runtime_positions]
                    example = shared_weights.example_of(sub.graph, runtime_args)
                    merged_config = options.compile_config(plugin_config.merged(lowered.plugin_config))
                    member = shared_weights.Member.of(lowered, weights, options.device, merged_config, name, example)
                    together = shared_weights.compile_together(member, options.share_weights == "auto")
                if together is not None:
                    compiled = together.compiled
                else:
                    try:
                        compiled = core().compile_model(lowered.model, options.device, config)
                    except Exception as e:
                        blamed = _blame_compile_failure(sub, constants, job, e)
                        if blamed is None:
                            raise
                        raise blamed from e
                    if key is not None:
                        cache.store(options, key, compiled, lowered, name)
                    if report.kind == "backward":  # compiled with its forward (training/aot.py)
                        preport.primed = training.prime(compiled, lowered.model)
            t2 = time.perf_counter()
    except _Blamed as b:
        if job.isolations < isolation.MAX_ISOLATIONS:
            job.isolations += 1
            _isolate(parent, node, sub, constants, single, b, job, name)
            return
        _to_fallback(parent, node, sub, single, job, preport, f"{b.node.name} ({op_name(b.node.target)}): {b.reason}")
        return
    except Exception as e:  # noqa: BLE001 - any failure degrades to Inductor, and is reported
        why = e.reason if isinstance(e, LoweringError) else f"OpenVINO compile failed: {type(e).__name__}: {e}"
        _to_fallback(parent, node, sub, single, job, preport, why)
        return
    preport.lowering_seconds, preport.compile_seconds = t1 - t0, t2 - t1
    note = dynamic_quantization_note(compiled)
    if note is not None and note not in report.notes:
        report.notes.append(note)
    report.partitions.append(preport)
    report.ov_ops.update(ops_here)
    if together is not None:
        partition = together
    else:
        partition = CompiledPartition(
            compiled, lowered.inputs, lowered.outputs, lend_static=report.kind in ("forward", "backward")
        )
        if member is not None:
            shared_weights.remember(partition, member)
    preport.partition_ref = weakref.ref(partition)
    if hit is not None:
        partition.mapping = hit.mapping  # the imported model reads the mapped file: keep it open
    job.partitions.append(partition)
    runtime_args = [node.args[i] for i in lowered.runtime_positions]
    guarded = _GuardedPartition(partition, sub, constants, lowered.runtime_positions, name, job)
    _install(parent, node, guarded, single, runtime_args)


def _blame_compile_failure(
    sub: torch.fx.GraphModule, constants: dict[int, Any], job: _Job, error: Exception
) -> _Blamed | None:
    """A ``_Blamed`` naming the node OpenVINO's compile failure comes from, if one can be found."""
    if not job.device_compiles():
        return None  # the device compiles nothing: no node is to blame
    culprit = isolation.blame_by_bisection(sub, isolation.compile_probe(job.options, constants))
    if culprit is None:
        return None
    return _Blamed(
        culprit, f"OpenVINO compile failed with it (found by bisection): {type(error).__name__}: {_ov_message(error)}"
    )


def _ov_message(error: BaseException) -> str:
    """The line of an OpenVINO exception that says what went wrong: its first lines name only the
    C++ source file that threw ("Exception from src/inference/src/cpp/infer_request.cpp:224:")."""
    lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Exception from", "Check '")) and not ln.endswith(":")]
    return (useful or lines or [""])[0]


def _isolate(
    parent: torch.fx.GraphModule,
    node: torch.fx.Node,
    sub: torch.fx.GraphModule,
    constants: dict[int, Any],
    single: bool,
    blamed: _Blamed,
    job: _Job,
    name: str,
) -> None:
    """Split ``sub`` around the blamed node: it runs in PyTorch, its neighbours on OpenVINO."""
    with unset_fake_temporarily():  # constants are real tensors; AOTAutograd runs us in fake mode
        placeholders_to_attrs(sub, constants, "_fxvino_const_")
    calls = [n for n in sub.graph.nodes if n.op == "call_function"]
    reasons = {n: decline_reason(n, job.options.disabled_ops) for n in calls}
    reasons[blamed.node] = blamed.reason
    inner = _split_and_compile(sub, reasons, job, name)
    runtime_args = [a for i, a in enumerate(node.args) if i not in constants]
    _install(parent, node, graph_forward(inner), single, runtime_args)


def _to_fallback(parent, node, sub, single: bool, job: _Job, preport: PartitionReport, why: str) -> None:
    """The whole partition runs on Inductor (or eagerly if Inductor fails too), reported."""
    runner, ran_on, inductor_why = isolation.inductor_fallback(sub)
    preport.on_openvino = False
    job.report.partitions.append(preport)
    job.report.torch_ops.update(preport.ops)
    if inductor_why:
        why = f"{why}; {inductor_why}"
    job.report.fallback(Fallback(preport.name, f"partition of {preport.num_nodes} nodes", why, ran_on))
    _install(parent, node, runner, single, list(node.args))


class _GuardedPartition:
    """Runs the OpenVINO partition; if OpenVINO raises at run time, runs the FX graph eagerly.

    A model that runs eagerly must not crash under fxvino: a bad input then raises torch's
    own error from the eager run. When the eager run succeeds, OpenVINO was at fault: the first
    such failure is bisected with the call's real inputs, and the partition is split around the
    node to blame (as for compile failures) for the calls that follow. Each distinct failure
    is reported once.
    """

    def __init__(
        self,
        partition: CompiledPartition,
        sub: torch.fx.GraphModule,
        constants: dict[int, Any],
        runtime_positions: list[int],
        name: str,
        job: _Job,
    ):
        self.partition = partition
        self.sub = sub
        self.constants = constants
        self.runtime_positions = runtime_positions
        self.name = name
        self.job = job
        self.seen: set[str] = set()
        self.replacement: Callable | None = None
        self.lock = threading.Lock()
        self.bisected = False

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        if self.replacement is not None:
            return self.replacement(*args)
        try:
            return self.partition(*args)
        except Exception as e:  # noqa: BLE001
            why = f"OpenVINO inference failed: {type(e).__name__}: {e}"
            full = self._full_args(args)
            result = tuple(self.sub(*full))  # torch's own error for a bad input
            with self.lock:
                if self.replacement is None and not self.bisected:
                    self.bisected = True
                    self.replacement = self._isolate(full, e)
            if self.replacement is None and why not in self.seen:
                self.seen.add(why)
                self.job.report.fallback(Fallback(self.name, "partition", why, "eager"))
            return result

    def _full_args(self, args: tuple[Any, ...]) -> list[Any]:
        full: list[Any] = [None] * (len(self.constants) + len(self.runtime_positions))
        for i, v in self.constants.items():
            full[i] = v
        for pos, v in zip(self.runtime_positions, args, strict=True):
            full[pos] = v
        return full

    def _isolate(self, full: list[Any], error: Exception) -> Callable | None:
        """Split the partition around the node the failure comes from; None if none is found."""
        job = self.job
        if job.isolations >= isolation.MAX_ISOLATIONS or not isolation.device_infers(job.options):
            return None
        try:
            probe = isolation.infer_probe(job.options, self.constants, full)
            culprit = isolation.blame_by_bisection(self.sub, probe)
            if culprit is None:
                return None
            job.isolations += 1
            reason = (
                f"OpenVINO inference failed with it (found by bisection): {type(error).__name__}: {_ov_message(error)}"
            )
            placeholders_to_attrs(self.sub, self.constants, "_fxvino_const_")
            reasons = {
                n: decline_reason(n, job.options.disabled_ops) for n in self.sub.graph.nodes if n.op == "call_function"
            }
            reasons[culprit] = reason
            return graph_forward(_split_and_compile(self.sub, reasons, job, self.name))
        except Exception:  # noqa: BLE001 - isolation is an improvement, never a new failure
            logger.warning("fxvino: could not isolate the failure of %s; it keeps running eagerly", self.name)
            return None


def _install(parent: torch.fx.GraphModule, node: torch.fx.Node, runner: Callable, single: bool, args: list) -> None:
    """Replace ``node``'s call_module by a call to ``runner`` with ``args``."""
    fn: Any
    if single:

        def fn(*a: Any) -> Any:
            return runner(*a)[0]
    elif isinstance(runner, _GuardedPartition):
        fn = runner  # called directly: a wrapper's frame costs every call of the model
    else:

        def fn(*a: Any) -> Any:
            return runner(*a)

    fn.__name__ = fn.__qualname__ = f"run_{node.target}"  # FX codegen names the call after it
    with parent.graph.inserting_before(node):
        new = parent.graph.call_function(fn, tuple(args))
    new.meta = dict(node.meta)
    node.replace_all_uses_with(new)
    parent.graph.erase_node(node)


def _normalize_tuple_output(sub: torch.fx.GraphModule) -> bool:
    """Make ``sub`` return a tuple (what OpenVINO and Inductor both want); True if it did not."""
    out = next(iter(sub.graph.find_nodes(op="output")))
    if isinstance(out.args[0], (tuple, list)):
        return False
    out.args = ((out.args[0],),)
    sub.recompile()
    return True


def _whole_graph_partition(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """What ``fuse_partitions`` would make of a graph whose every op is supported, built directly.

    The partitioner costs ~0.5 s on BERT-base for a foregone result. ``gm`` itself (a private
    copy) becomes the ``fused_0`` submodule, its constants turned into inputs; a small parent
    passes it its placeholders and constants and rebuilds the output structure.
    """
    graph, parent_graph = gm.graph, torch.fx.Graph()
    placeholders = list(graph.find_nodes(op="placeholder"))
    attrs = list(graph.find_nodes(op="get_attr"))
    parent_env = {n: parent_graph.node_copy(n) for n in placeholders + attrs}
    root: dict[str, Any] = {n.target: fetch_attr(gm, n.target) for n in attrs}
    last = placeholders[-1] if placeholders else None
    for n in attrs:  # constants become inputs, after the real ones
        if last is None:
            with graph.inserting_before(next(iter(graph.nodes))):
                ph = graph.placeholder(f"const_{n.name}")
        else:
            with graph.inserting_after(last):
                ph = graph.placeholder(f"const_{n.name}")
        ph.meta = dict(n.meta)
        parent_env[ph] = parent_env[n]  # an output that is this constant reads the parent's
        n.replace_all_uses_with(ph)
        graph.erase_node(n)
        last = ph
    output = next(iter(graph.find_nodes(op="output")))
    flat, spec = torch.utils._pytree.tree_flatten(output.args[0])
    computed = list(dict.fromkeys(v for v in flat if isinstance(v, torch.fx.Node) and v.op == "call_function"))
    output.args = (tuple(computed),)
    call = parent_graph.call_module("fused_0", tuple(parent_env[n] for n in placeholders + attrs))
    # (placeholders + attrs is the order of fused_0's inputs: the constants' came last.)
    for i, v in enumerate(computed):
        parent_env[v] = parent_graph.call_function(operator.getitem, (call, i))
        parent_env[v].meta = dict(v.meta)
    result = [parent_env[v] if isinstance(v, torch.fx.Node) else v for v in flat]
    parent_graph.output(torch.utils._pytree.tree_unflatten(result, spec))
    graph.eliminate_dead_code()
    gm.recompile()
    # Lazy: Python code for a 500-node graph takes ~0.1 s to generate, and the partition's
    # is only needed if it ever runs eagerly.
    root["fused_0"] = gm if isinstance(gm, _LazyGraphModule) else _LazyGraphModule(gm, graph)
    return _LazyGraphModule(root, parent_graph)
