"""Split an ATen graph into OpenVINO partitions and PyTorch leftovers, then compile each.

The support predicate is the lowering registry (``decline_reason``). Each fused partition is
lowered and compiled; one that fails runs through Inductor, or eagerly if Inductor fails too.
"""

from __future__ import annotations

import collections
import logging
import operator
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

from fxvino import cache
from fxvino.devices import core
from fxvino.lowering import ensure_registered
from fxvino.lowering.convert import LoweringError, fetch_attr, lower_graph
from fxvino.lowering.registry import decline_reason, op_name
from fxvino.options import Options
from fxvino.report import Fallback, GraphReport, PartitionReport
from fxvino.runtime import CompiledPartition

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
    """Rewrite ``gm`` in place so OpenVINO runs every partition it can; returns ``gm``."""
    ensure_registered()
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    reasons = {n: decline_reason(n, options.disabled_ops) for n in calls}
    report.num_nodes = len(calls)
    _record_torch_nodes(report, reasons)

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
                report.torch_ops[op_name(n.target)] += 1
        fused = partitioner.fuse_partitions(partitions)
    for node in list(fused.graph.find_nodes(op="call_module")):
        if not node.target.startswith("fused_"):
            continue
        sub = getattr(fused, node.target)
        _compile_partition(fused, node, sub, options, report)
    fused.graph.lint()
    fused.recompile()
    return fused


def _record_torch_nodes(report: GraphReport, reasons: dict[torch.fx.Node, str | None]) -> None:
    groups: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    for n, why in reasons.items():
        if why is not None:
            groups[(op_name(n.target), why)].append(n.name)
            report.torch_ops[op_name(n.target)] += 1
    for (op, why), names in groups.items():
        shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
        report.fallback(Fallback(shown, op, why, "pytorch"))


def _compile_partition(
    parent: torch.fx.GraphModule,
    node: torch.fx.Node,
    sub: torch.fx.GraphModule,
    options: Options,
    report: GraphReport,
) -> None:
    single = _normalize_tuple_output(sub)
    ops_here = collections.Counter(op_name(n.target) for n in sub.graph.nodes if n.op == "call_function")
    name = f"{report.name}.{node.target}"
    preport = PartitionReport(name, sum(ops_here.values()), ops_here)
    report.partitions.append(preport)
    constants = {
        i: fetch_attr(parent, a.target)
        for i, a in enumerate(node.args)
        if isinstance(a, torch.fx.Node) and a.op == "get_attr"
    }
    key, hit = None, None
    try:
        with unset_fake_temporarily():  # constants are real tensors; AOTAutograd runs us in fake mode
            t0 = time.perf_counter()
            if options.model_caching:  # a hit skips lowering and compiling (cache.py)
                key, hit = cache.lookup(options, sub, constants)
            if hit is not None:
                lowered, compiled = hit, hit.compiled
                t1 = t0
            else:
                lowered = lower_graph(sub, constants, name)
                t1 = time.perf_counter()
                compiled = core().compile_model(lowered.model, options.device, options.compile_config())
                if key is not None:
                    cache.store(options, key, compiled, lowered, name)
            t2 = time.perf_counter()
    except Exception as e:  # noqa: BLE001 - any failure degrades to Inductor, and is reported
        why = e.reason if isinstance(e, LoweringError) else f"OpenVINO compile failed: {type(e).__name__}: {e}"
        if isinstance(e, LoweringError) and e.node is not None:
            why = f"lowering {e.node.name} ({op_name(e.node.target)}) failed: {e.reason}"
        runner, ran_on = _fallback_compile(sub)
        preport.on_openvino = False
        report.torch_ops.update(ops_here)
        report.fallback(Fallback(name, f"partition of {preport.num_nodes} nodes", why, ran_on))
        _install(parent, node, runner, single, list(node.args))
        return
    preport.lowering_seconds, preport.compile_seconds = t1 - t0, t2 - t1
    preport.compiled_ref = weakref.ref(compiled)
    report.ov_ops.update(ops_here)
    partition = CompiledPartition(compiled, lowered.inputs, lowered.outputs)
    if hit is not None:
        partition.mapping = hit.mapping  # the imported model reads the mapped file: keep it open
    runtime_args = [node.args[i] for i in lowered.runtime_positions]
    guarded = _GuardedPartition(partition, sub, constants, lowered.runtime_positions, name, report)
    _install(parent, node, guarded, single, runtime_args)


class _GuardedPartition:
    """Runs the OpenVINO partition; if OpenVINO raises at run time, runs the FX graph eagerly.

    A model that runs eagerly must not crash under fxvino: a bad input then raises torch's
    own error from the eager run. Each distinct failure is reported once.
    """

    def __init__(
        self,
        partition: CompiledPartition,
        sub: torch.fx.GraphModule,
        constants: dict[int, Any],
        runtime_positions: list[int],
        name: str,
        report: GraphReport,
    ):
        self.partition = partition
        self.sub = sub
        self.constants = constants
        self.runtime_positions = runtime_positions
        self.name = name
        self.report = report
        self.seen: set[str] = set()

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        try:
            return self.partition(*args)
        except Exception as e:  # noqa: BLE001
            why = f"OpenVINO inference failed: {type(e).__name__}: {e}"
            if why not in self.seen:
                self.seen.add(why)
                self.report.fallback(Fallback(self.name, "partition", why, "eager"))
            full: list[Any] = [None] * (len(self.constants) + len(self.runtime_positions))
            for i, v in self.constants.items():
                full[i] = v
            for pos, v in zip(self.runtime_positions, args, strict=True):
                full[pos] = v
            return tuple(self.sub(*full))


def _install(parent: torch.fx.GraphModule, node: torch.fx.Node, runner: Callable, single: bool, args: list) -> None:
    """Replace ``node``'s call_module by a call to ``runner`` with ``args``."""
    if single:

        def fn(*a: Any) -> Any:
            return runner(*a)[0]
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


def _fallback_compile(sub: torch.fx.GraphModule) -> tuple[Callable, str]:
    """Inductor for a partition OpenVINO could not take; eager when Inductor fails as well."""
    try:
        from torch._inductor.compile_fx import compile_fx_inner

        example = [n.meta["val"] for n in sub.graph.find_nodes(op="placeholder")]
        compiled = compile_fx_inner(sub, example)
        return (lambda *a: tuple(compiled(list(a)))), "inductor"
    except Exception as e:  # noqa: BLE001
        logger.warning("fxvino: Inductor could not compile the fallback partition either (%s); running eagerly", e)
        return (lambda *a: tuple(sub(*a))), "eager"


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
