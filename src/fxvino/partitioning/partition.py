"""Split an ATen graph into OpenVINO partitions and PyTorch leftovers, then compile each.

What runs where comes from support.py (the registry's decline reasons); each fused partition
is compiled by compilation/compile_partition.py. A partition that fails is split around the
node to blame (isolation.py), or runs through Inductor, or eagerly if Inductor fails too; at
run time each one is guarded (guarded.py).
"""

from __future__ import annotations

import collections
import operator
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

from fxvino.compilation.compile_partition import Blamed, CompileFailed, compile_partition
from fxvino.lowering import ensure_registered
from fxvino.lowering.convert import LoweringError
from fxvino.lowering.registry import op_name
from fxvino.options import Options
from fxvino.partitioning import isolation, support
from fxvino.partitioning.guarded import GuardedPartition, ov_message
from fxvino.partitioning.job import Job
from fxvino.partitioning.whole_graph import whole_graph_partition
from fxvino.report import Fallback, GraphReport, PartitionReport
from fxvino.runtime import torch_threads, weight_pages
from fxvino.utils.fx import FORWARD_WRAPPER, fetch_attr, graph_forward, placeholders_to_attrs


def partition_and_compile(gm: torch.fx.GraphModule, options: Options, report: GraphReport) -> torch.fx.GraphModule:
    """Rewrite ``gm`` in place so OpenVINO runs every partition it can; returns the graph to run."""
    ensure_registered()
    reasons = support.decline_reasons(gm.graph, options)
    report.num_nodes = len(reasons)
    job = Job(options, report)
    runner = _split_and_compile(gm, reasons, job, report.name)
    runner.meta["fxvino_partitions"] = job.partitions  # what releasing the graph frees (superseded.py)
    report.one_thread_ops = torch_threads.pytorch_ops_between_inferences(runner)
    if report.one_thread_ops:
        runner.meta[FORWARD_WRAPPER] = torch_threads.one_thread
    return runner


def _split_and_compile(
    gm: torch.fx.GraphModule, reasons: dict[torch.fx.Node, str | None], job: Job, prefix: str
) -> torch.fx.GraphModule:
    """Partition ``gm`` by ``reasons`` (None: supported) and compile each partition.

    Partition names start with ``prefix`` ("g0/0.0.fused_0"; a partition split around an
    isolated node names its parts after itself: "g0/0.0.fused_0.fused_1").
    """
    support.decline_orphan_getitems(reasons)
    support.keep_views_real(reasons)
    support.record_torch_nodes(job.report, reasons)
    calls = list(reasons)
    if calls and all(why is None for why in reasons.values()):
        fused = whole_graph_partition(gm)  # the common case, without the partitioner's cost
    else:
        partitioner = CapabilityBasedPartitioner(
            gm, support.Support(reasons), allows_single_node_partition=True, non_compute_ops=support.NON_COMPUTE
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


def _compile_partition(
    parent: torch.fx.GraphModule,
    node: torch.fx.Node,
    sub: torch.fx.GraphModule,
    job: Job,
    prefix: str,
) -> None:
    """Compile the partition ``node`` calls and put it in the node's place; on failure, split it
    around the node to blame or hand it to Inductor."""
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
    try:
        try:
            done = compile_partition(sub, constants, node.args, options, report.kind, name)
        except CompileFailed as failed:
            with unset_fake_temporarily():  # the probes compile with the real constants
                blamed = _blame_compile_failure(sub, constants, job, failed.__cause__)
            if blamed is None:
                raise failed.__cause__ from None
            raise blamed from failed.__cause__
    except Blamed as b:
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
    preport.lowering_seconds, preport.compile_seconds = done.lowering_seconds, done.compile_seconds
    preport.primed = done.primed
    for note in done.notes:
        report.add_note(note)
    report.partitions.append(preport)
    report.ov_ops.update(ops_here)
    preport.partition_ref = weakref.ref(done.partition)
    job.partitions.append(done.partition)
    runtime_args = [node.args[i] for i in done.runtime_positions]
    guarded = GuardedPartition(
        done.partition, sub, constants, done.runtime_positions, name, job, _split_and_compile, done.checked
    )
    _install(parent, node, guarded, single, runtime_args)


def _blame_compile_failure(
    sub: torch.fx.GraphModule, constants: dict[int, Any], job: Job, error: BaseException
) -> Blamed | None:
    """A ``Blamed`` naming the node OpenVINO's compile failure comes from, if one can be found."""
    if not job.device_compiles():
        return None  # the device compiles nothing: no node is to blame
    culprit = isolation.blame_by_bisection(sub, isolation.compile_probe(job.options, constants))
    if culprit is None:
        return None
    return Blamed(
        culprit, f"OpenVINO compile failed with it (found by bisection): {type(error).__name__}: {ov_message(error)}"
    )


def _isolate(
    parent: torch.fx.GraphModule,
    node: torch.fx.Node,
    sub: torch.fx.GraphModule,
    constants: dict[int, Any],
    single: bool,
    blamed: Blamed,
    job: Job,
    name: str,
) -> None:
    """Split ``sub`` around the blamed node: it runs in PyTorch, its neighbours on OpenVINO."""
    with unset_fake_temporarily():  # constants are real tensors; AOTAutograd runs us in fake mode
        placeholders_to_attrs(sub, constants, "_fxvino_const_")
    reasons = support.decline_reasons(sub.graph, job.options)
    reasons[blamed.node] = blamed.reason
    inner = _split_and_compile(sub, reasons, job, name)
    runtime_args = [a for i, a in enumerate(node.args) if i not in constants]
    _install(parent, node, graph_forward(inner), single, runtime_args, runs=inner)


def _to_fallback(parent, node, sub, single: bool, job: Job, preport: PartitionReport, why: str) -> None:
    """The whole partition runs on Inductor (or eagerly if Inductor fails too), reported."""
    runner, ran_on, inductor_why = isolation.inductor_fallback(sub)
    preport.on_openvino = False
    job.report.partitions.append(preport)
    job.report.torch_ops.update(preport.ops)
    if inductor_why:
        why = f"{why}; {inductor_why}"
    job.report.fallback(Fallback(preport.name, f"partition of {preport.num_nodes} nodes", why, ran_on))
    _install(parent, node, runner, single, list(node.args), runs="fallback")


def _install(
    parent: torch.fx.GraphModule,
    node: torch.fx.Node,
    runner: Callable,
    single: bool,
    args: list,
    runs: str | torch.fx.GraphModule = "openvino",
) -> None:
    """Replace ``node``'s call_module by a call to ``runner`` with ``args``; ``runs`` says what
    it runs (``torch_threads.RUNS``)."""
    fn: Any
    if single:

        def fn(*a: Any) -> Any:
            return runner(*a)[0]
    elif isinstance(runner, GuardedPartition):
        fn = runner  # called directly: a wrapper's frame costs every call of the model
    else:

        def fn(*a: Any) -> Any:
            return runner(*a)

    fn.__name__ = fn.__qualname__ = f"run_{node.target}"  # FX codegen names the call after it
    with parent.graph.inserting_before(node):
        new = parent.graph.call_function(fn, tuple(args))
    new.meta = dict(node.meta)
    new.meta[torch_threads.RUNS] = runs
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
