"""Finding the node to blame when OpenVINO rejects a partition, and the last-resort fallback.

A lowering error names its node already. A ``compile_model`` (or first inference) failure
names nothing: :func:`blame_by_bisection` finds the shortest prefix of the partition (in
topological order) that still fails, whose last node is the one to isolate. Each probe is a
real lowering and compile, so bisection costs about log2(n) compiles of growing prefixes.

When even a one-node model does not compile (a device-wide failure, not a graph problem),
bisection would isolate every node in turn; :func:`device_compiles` checks a trivial model
first, and such partitions go to Inductor whole (:func:`inductor_fallback`).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Mapping
from typing import Any

import openvino as ov
import openvino.opset16 as ops
import torch
import torch.fx

from fxvino.devices import core, widened_types
from fxvino.lowering.convert import lower_graph
from fxvino.options import Options

logger = logging.getLogger("fxvino")

# How many nodes one graph may isolate before the rest of a failing partition goes to Inductor
# whole: each isolation re-lowers the partition, and a bisection compiles ~log2(n) prefixes.
MAX_ISOLATIONS = 32

Probe = Callable[[torch.fx.GraphModule], None]  # raises if OpenVINO rejects the graph


def device_compiles(options: Options) -> bool:
    """Whether the device compiles a one-op model at all (with the partition's config)."""
    x = ops.parameter(ov.PartialShape([2]), ov.Type.f32, name="x")
    model = ov.Model([ops.result(ops.relu(x))], [x], "fxvino_canary")
    try:
        core().compile_model(model, options.device, options.compile_config())
    except Exception:  # noqa: BLE001 - any failure means the device, not the graph, is at fault
        return False
    return True


def device_infers(options: Options) -> bool:
    """Whether the device runs a one-op model through fxvino's runtime at all."""
    from fxvino.lowering.convert import InputSpec, OutputSpec
    from fxvino.runtime.compiled_partition import CompiledPartition

    x = ops.parameter(ov.PartialShape([2]), ov.Type.f32, name="x")
    model = ov.Model([ops.result(ops.relu(x))], [x], "fxvino_canary")
    try:
        compiled = core().compile_model(model, options.device, options.compile_config())
        runner = CompiledPartition(compiled, [InputSpec("tensor", 0)], [OutputSpec("tensor", 0, dtype=torch.float32)])
        (out,) = runner(torch.tensor([-1.0, 2.0]))
        return out.tolist() == [0.0, 2.0]
    except Exception:  # noqa: BLE001
        return False


def infer_probe(options: Options, constants: Mapping[int, torch.Tensor], full_args: list[Any]) -> Probe:
    """A probe that lowers, compiles and runs a prefix graph on the call's real arguments."""
    from fxvino.runtime.compiled_partition import CompiledPartition

    def probe(prefix: torch.fx.GraphModule) -> None:
        lowered = lower_graph(prefix, constants, "fxvino_bisect", widened_types(options.device))
        compiled = core().compile_model(lowered.model, options.device, options.compile_config())
        CompiledPartition(compiled, lowered.inputs, lowered.outputs)(*[full_args[i] for i in lowered.runtime_positions])

    return probe


def compile_probe(options: Options, constants: Mapping[int, torch.Tensor]) -> Probe:
    """A probe that lowers and compiles a prefix graph; raises what OpenVINO raises."""

    def probe(prefix: torch.fx.GraphModule) -> None:
        lowered = lower_graph(prefix, constants, "fxvino_bisect", widened_types(options.device))
        core().compile_model(lowered.model, options.device, options.compile_config())

    return probe


def blame_by_bisection(sub: torch.fx.GraphModule, probe: Probe) -> torch.fx.Node | None:
    """The node of ``sub`` whose addition makes OpenVINO fail, assuming the whole of ``sub`` fails.

    Binary search for the shortest failing prefix; its last compute node is blamed (a
    ``getitem`` is blamed on the node it reads). None if no node can be blamed (a prefix that
    fails to *lower* is not counted as failing: only OpenVINO's verdict is).
    """
    compute = [n for n in sub.graph.nodes if n.op == "call_function"]
    if not compute:
        return None
    lo, hi = 1, len(compute)  # the whole partition (hi) fails
    while lo < hi:
        mid = (lo + hi) // 2
        if _fails(sub, compute[:mid], probe):
            hi = mid
        else:
            lo = mid + 1
    culprit = compute[hi - 1]
    while culprit.target is operator.getitem and isinstance(culprit.args[0], torch.fx.Node):
        culprit = culprit.args[0]
    return culprit if culprit.op == "call_function" else None


def _fails(sub: torch.fx.GraphModule, prefix: list[torch.fx.Node], probe: Probe) -> bool:
    try:
        gm = prefix_graph(sub, prefix)
    except Exception:  # noqa: BLE001 - cannot tell: treat as passing, bisection looks further on
        return False
    try:
        probe(gm)
    except Exception as e:  # noqa: BLE001
        from fxvino.lowering.convert import LoweringError

        return not isinstance(e, LoweringError)
    return False


def prefix_graph(sub: torch.fx.GraphModule, prefix: list[torch.fx.Node]) -> torch.fx.GraphModule:
    """A graph of ``sub``'s placeholders and ``prefix``, returning every prefix value used later."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    members = set(prefix)
    for n in sub.graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            env[n] = graph.node_copy(n, env.__getitem__)
    for n in prefix:
        env[n] = graph.node_copy(n, env.__getitem__)
    live = [n for n in prefix if _is_value(n) and any(u not in members for u in n.users)] or [prefix[-1]]
    graph.output(tuple(env[n] for n in live))
    return torch.fx.GraphModule(sub, graph)


def _is_value(n: torch.fx.Node) -> bool:
    val = n.meta.get("val")
    return isinstance(val, (torch.Tensor, torch.SymInt, int, float, bool))


def inductor_fallback(sub: torch.fx.GraphModule) -> tuple[Callable[..., tuple[Any, ...]], str, str | None]:
    """Compile ``sub`` with Inductor: (runner, "inductor", None), or (eager runner, "eager", why).

    fxvino's graphs are decomposed with fxvino's table, not Inductor's, and Inductor assumes its
    own (``_to_copy`` or batch norm left whole trip "both a fallback and a decomp"): the graph
    is re-traced with Inductor's decompositions first, in the fake mode its values came from
    (symbolic sizes included). Random ops run as Inductor's eager fallbacks
    (``fallback_random``), which Inductor would otherwise expect its own passes to have
    rewritten.

    The vector width is pinned to this CPU's (``cpp.simdlen``) because Inductor's FX graph cache
    key leaves it out while the kernels' source assumes it: a cache written on an AVX-512 machine
    (a shared home, a baked image, the native suite before ``make test-avx2``) gave an AVX2 CPU
    16-lane loops over 8-lane vectors, wrong values in every element.
    """
    try:
        from torch._guards import detect_fake_mode
        from torch._inductor import config as inductor_config
        from torch._inductor.compile_fx import compile_fx_inner
        from torch._inductor.cpu_vec_isa import pick_vec_isa
        from torch._inductor.decomposition import select_decomp_table
        from torch.fx.experimental.proxy_tensor import make_fx

        example = [n.meta["val"] for n in sub.graph.find_nodes(op="placeholder")]
        fake_mode = detect_fake_mode(example)
        if fake_mode is None:
            raise RuntimeError("the partition's inputs carry no fake tensors to trace with")
        with fake_mode:
            traced = make_fx(sub, decomposition_table=select_decomp_table(), tracing_mode="real")(*example)
        width = pick_vec_isa().bit_width() or 1  # 1: no vector unit, as Inductor's config reads it
        with inductor_config.patch({"fallback_random": True, "cpp.simdlen": width}):
            compiled = compile_fx_inner(traced, example)
        return (lambda *a: tuple(compiled(list(a)))), "inductor", None
    except Exception as e:  # noqa: BLE001
        why = f"Inductor could not compile it either ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        logger.warning("fxvino: %s; running eagerly", why)
        return (lambda *a: tuple(sub(*a))), "eager", why
