"""Graphs that freeze the same weights, compiled together as one OpenVINO model.

The CPU plugin keeps its own packed copy of a model's weights in every compiled model, and
shares packed weights only within one. ``generate()`` compiles a prefill graph and a decode
graph of the same frame over the same parameters, so a 1.1B Llama in f32 held PyTorch's 4.4 GB
and two packed copies (13.2 GB at peak). Compiled as one model, the two graphs pack their
weights once: measured on that model's 22 layers, 8.7 GB of growth for the two compiled
models against 4.6 GB for one holding both.

How: one member may run at the top level of the merged model; every other member becomes the
then-body of an ``If`` of its own, whose else-body returns empty tensors, chosen by a boolean
input. A member's partition binds its flag (true), the other flags (false) and placeholder tensors
for the other members' inputs once per infer request (``InputSpec`` kind "fixed"), so a call sets
only its own inputs and only its own body runs, besides the top-level member.

The top-level member runs on every call: idle, on zeros of the sizes it was compiled for, when
another member is called. So it must be cheap: at least ``TOP_LEVEL_RATIO`` times fewer
multiply-adds than every other member (in ``generate()``, the decode step beside a prefill). In
exchange it keeps what an ``If`` takes away: the plugin copies an ``If``'s inputs into the running
body and its outputs out (1.5 ms per 23 MB, a decode step's f32 KV cache at 519 positions) and
does not fuse elementwise ops inside its bodies. With every member in an ``If`` a 1.1B Llama
decoded 5-9% slower (DynamicCache moves its whole cache in and out each step). Each output port
of the model also costs every request, idle or not (~18 µs each for a prefill's 45 outputs beside
a decode step), so beside a top-level member the others' outputs leave their ``If`` packed: one
flat tensor per element type and one of sizes, which the runtime splits (``runtime.Piece``). So
laid out, decode runs as fast merged as apart (paired medians 0.996 and 1.003) for 29% less
peak memory. Hence ``share_weights="auto"``, the default, merges only when a member can run at
the top level; ``True`` merges in any case.

When a partition computing in f32 (bf16 models are left alone: ``PRECISIONS``) with at least
``MIN_SHARED_BYTES`` (1 GB) of frozen weights in common with live partitions of the same device
and compile configuration is compiled, the older members drop their compiled models first (their
memory is then free for the new compile; their calls wait), and all are compiled into one model
and rebound to it. If that compile fails, each is compiled alone again, as before. Partitions
loaded from the model cache have no OpenVINO model to merge and stay alone. The index is weak: it
keeps no partition, model or weight alive.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import optimization_hint

from fxvino.devices import core
from fxvino.lowering import helpers as h
from fxvino.lowering.convert import InputSpec, LoweredGraph, OutputSpec, PackedValues
from fxvino.runtime.compiled_partition import CompiledPartition, Piece

logger = logging.getLogger("fxvino")
aten = torch.ops.aten

# Below this many bytes in common, speed is worth more than a second packed copy: the plugin does
# not fuse elementwise ops inside an If's bodies (no Snippets), and copies the running body's inputs
# and outputs. BERT-base's batch-1 and dynamic graphs (0.44 GB shared) ran 9% and 2% slower as one
# model in Ifs (so were a 1.1B Llama's decode steps, by 5-9%, before one member ran at the top level).
MIN_SHARED_BYTES = 1 << 30
# Only models that compute in f32. A bf16 1.1B-class Llama (11 layers, Zen 4, interleaved in one
# process) decoded 8% slower merged in Ifs (46.4 against 42.3 ms/token), and 2% slower with its
# decode step at the top level and outputs packed (paired median 1.02, prefill 1.028); in bf16 the
# packed copy is half the size (peak RSS was already 1.25x eager's on AMX).
PRECISIONS = ("f32",)
# A member keeps its lowered model for later merges; one holding more of its own memory (weights
# copied or compressed while lowering) than this is not kept, as that memory would stay alive. The
# packed 4-bit values of torchao int4 weights are not its own: every graph over them shares them.
MAX_OWNED_BYTES = 16 << 20
# A member this many times cheaper (multiply-adds at the sizes it was compiled for) than every other
# runs at the top level of the merged model, not inside an If: no copies in or out and the plugin's
# fusions intact, paid for by running it idle on example inputs whenever another member is called.
# In generate() that is the decode step (one row) beside a prefill (the prompt's rows).
TOP_LEVEL_RATIO = 8


@dataclasses.dataclass
class Member:
    """What a member was lowered to on its own: what merging starts from."""

    model: ov.Model
    inputs: list[InputSpec]
    outputs: list[OutputSpec]
    weights: dict[int, int]  # data pointer -> bytes of each frozen tensor it reads
    device: str
    config: dict[str, Any]
    name: str
    example: Example | None  # what it was compiled for; None: never run idle at the top level
    # The packed 4-bit values its constants were made from (shared with other graphs over the same
    # torchao weights): held while the member is, and not counted as memory of its own.
    packed: list[PackedValues] = dataclasses.field(default_factory=list)

    @classmethod
    def of(
        cls,
        lowered: LoweredGraph,
        weights: dict[int, int],
        device: str,
        config: dict[str, Any],
        name: str,
        example: Example | None,
    ) -> Member:
        return cls(
            lowered.model,
            list(lowered.inputs),
            list(lowered.outputs),
            weights,
            device,
            config,
            name,
            example,
            list(lowered.packed),
        )


@dataclasses.dataclass(frozen=True)
class Example:
    """A graph's work and runtime arguments at the sizes it was compiled for (Dynamo's hints)."""

    work: int  # multiply-adds of its products
    args: tuple[Any, ...]  # per runtime argument: a tensor's sizes, or a number


_PRODUCTS = {
    aten.mm.default: 0,
    aten.bmm.default: 0,
    aten.addmm.default: 1,
    aten.baddbmm.default: 1,
}  # -> the argument whose last dim is the contraction


def example_of(graph: torch.fx.Graph, runtime_args: Sequence[Any]) -> Example | None:
    """The graph's ``Example``, from its nodes' fake values; None when a size has no hint."""
    try:
        work = 0
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            if node.target in _PRODUCTS:
                left = node.args[_PRODUCTS[node.target]].meta["val"]
                work += _numel(node.meta["val"].shape) * _hint(left.shape[-1])
            elif node.target is aten.convolution.default:
                weight = node.args[1].meta["val"]
                work += _numel(node.meta["val"].shape) * _numel(weight.shape[1:])
            elif node.target is aten._scaled_dot_product_flash_attention_for_cpu.default:
                q, k = (a.meta["val"] for a in node.args[:2])
                work += 2 * _numel(q.shape) * _hint(k.shape[-2])
        return Example(work, tuple(_example_arg(a) for a in runtime_args))
    except Exception:  # noqa: BLE001 - no example: the member is only ever run inside an If
        return None


def _example_arg(node: Any) -> Any:
    value = node.meta["val"] if isinstance(node, torch.fx.Node) else node
    if isinstance(value, torch.Tensor):
        return tuple(_hint(d) for d in value.shape)
    if isinstance(value, torch.SymInt | int):
        return _hint(value)
    if isinstance(value, torch.SymFloat):
        return float(value.node.hint)  # (optimization_hint takes ints only)
    if isinstance(value, float):
        return value
    raise TypeError(f"no example for a {type(value).__name__}")


def _hint(size: Any) -> int:
    return int(optimization_hint(size))


def _numel(shape: Sequence[Any]) -> int:
    return math.prod(_hint(d) for d in shape)


_lock = threading.Lock()
_live: weakref.WeakSet[CompiledPartition] = weakref.WeakSet()


def eligible(config: dict[str, Any]) -> bool:
    """Whether graphs compiled with ``config`` are merged at all (see ``PRECISIONS``)."""
    return str(config.get("INFERENCE_PRECISION_HINT", "f32")).lower() in PRECISIONS


def weights_of(constants: dict[int, Any]) -> dict[int, int]:
    return {
        t.data_ptr(): t.untyped_storage().nbytes()
        for t in constants.values()
        if isinstance(t, torch.Tensor) and t.device.type == "cpu"
    }


def owned_bytes(model: ov.Model, weights: dict[int, int], packed: Sequence[PackedValues] = ()) -> int:
    """Bytes of ``model``'s constants that are not views of the frozen weights, nor of the packed
    4-bit values shared by every graph over the same torchao weights (those live as long as any
    partition made from them, whether this model is kept or not)."""
    spans = sorted(weights.items()) + [(v.tensor.data.ctypes.data, v.tensor.get_byte_size()) for v in packed]
    total = 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant":
            continue
        try:
            ptr = op.get_data().ctypes.data
        except Exception:  # noqa: BLE001 - a type numpy cannot view: counted as owned
            ptr = -1
        if not any(start <= ptr < start + n for start, n in spans):
            total += op.get_byte_size()
    return total


def partners(weights: dict[int, int], device: str, config: dict[str, Any]) -> list[CompiledPartition]:
    """Live partitions to compile together with a new one reading ``weights``."""
    with _lock:
        found = [
            p
            for p in _live
            if p.shared is not None
            and p.shared.device == device
            and p.shared.config == config
            and sum(n for ptr, n in p.shared.weights.items() if ptr in weights) >= MIN_SHARED_BYTES
        ]
    return [p for p in found if not p._closed]


def remember(partition: CompiledPartition, member: Member) -> None:
    """Index ``partition`` as one that later partitions may share its weights with (if it reads
    enough of them, and its lowered model holds little memory of its own)."""
    weights = member.weights
    owned = owned_bytes(member.model, weights, member.packed)
    if sum(weights.values()) >= MIN_SHARED_BYTES and owned <= MAX_OWNED_BYTES:
        _index(partition, member)


def _index(partition: CompiledPartition, member: Member) -> None:
    partition.shared = member
    with _lock:
        _live.add(partition)


def compile_together(new: Member, top_level_only: bool = False) -> CompiledPartition | None:
    """The new partition, compiled in one model with the live partitions it shares weights with,
    which are rebound to that model; None when it has no such partners, none of them could run
    at the top level and ``top_level_only`` (``share_weights="auto"``), or the compile failed
    (the partners then run on models compiled alone again)."""
    members = partners(new.weights, new.device, new.config)
    if not members:
        return None
    owns = [m.shared for m in members] + [new]
    top = top_level(owns)
    if top is None and top_level_only:
        return None
    for m in members:  # their packed weights are freed before the merged compile packs them again
        m.suspend()
    try:
        merged, bindings = merge([o.model for o in owns], [(o.inputs, o.outputs) for o in owns], top)
        compiled = core().compile_model(merged, new.device, new.config)
    except Exception as e:  # noqa: BLE001 - compiling each alone again is always possible
        logger.warning("fxvino: compiling %s with %s failed (%s); compiling them apart", new.name, _names(members), e)
        for m in members:
            own = m.shared
            try:
                m.rebind(core().compile_model(own.model, own.device, own.config), own.inputs, own.outputs)
            except Exception:  # noqa: BLE001 - its calls then run in PyTorch (partitioning/guarded.py), reported
                logger.exception("fxvino: compiling %s alone again failed", own.name)
                m.close()
        return None
    for m, binding in zip(members, bindings, strict=False):
        m.rebind(compiled, *binding)
    inputs, outputs, copied, packed = bindings[-1]
    partition = CompiledPartition(compiled, inputs, outputs, copied=copied, packed=packed)  # nothing lent static
    _index(partition, new)
    logger.info(
        "fxvino: %s shares one compiled model (and its packed weights) with %s%s",
        new.name,
        _names(members),
        "" if top is None else f"; {owns[top[0]].name} runs at its top level",
    )
    return partition


def top_level(owns: Sequence[Member]) -> tuple[int, tuple[ov.Tensor, ...]] | None:
    """(index, idle inputs) of the member to run at the top level of the merged model: one at
    least ``TOP_LEVEL_RATIO`` times cheaper than every other, with its example arguments as the
    inputs it runs idle on (sizes that satisfy its graph, as a real call's do). None: all in Ifs."""
    if len(owns) < 2 or any(o.example is None for o in owns):
        return None
    k = min(range(len(owns)), key=lambda i: owns[i].example.work)
    cheapest = owns[k].example.work
    if any(o.example.work < TOP_LEVEL_RATIO * max(cheapest, 1) for i, o in enumerate(owns) if i != k):
        return None
    try:
        idle = _idle_inputs(owns[k])
    except Exception:  # noqa: BLE001 - an input type numpy cannot fill: keep every member in an If
        return None
    return None if idle is None else (k, idle)


def _idle_inputs(own: Member) -> tuple[ov.Tensor, ...] | None:
    """Zeros of the example's sizes for each model input (the first of each: zero indices are
    always in range); None when the model's inputs do not take them."""
    tensors = []
    for spec, param in zip(own.inputs, own.model.get_parameters(), strict=True):
        kind, shape = param.get_element_type(), param.get_partial_shape()
        if spec.kind in ("tensor", "complex"):
            dims = list(own.example.args[spec.position]) + ([2] if spec.kind == "complex" else [])
        elif spec.kind in ("symint", "symfloat"):
            dims = []
        elif spec.kind == "seed":
            dims = [d.get_length() for d in shape]
        else:
            return None
        if not shape.compatible(ov.PartialShape(dims)):
            return None
        tensor = ov.Tensor(kind, ov.Shape(dims))
        array = tensor.data
        array[...] = own.example.args[spec.position] if spec.kind in ("symint", "symfloat") else 0
        tensors.append(tensor)
    return tuple(tensors)


def _names(members: Sequence[CompiledPartition]) -> str:
    return ", ".join(m.shared.name for m in members)


def merge(
    models: Sequence[ov.Model],
    specs: Sequence[tuple[list[InputSpec], list[OutputSpec]]],
    top: tuple[int, Sequence[ov.Tensor]] | None = None,
) -> tuple[ov.Model, list[tuple[list[InputSpec], list[OutputSpec], frozenset[int], dict[int, Piece]]]]:
    """One model running any one of ``models``, and each one's input and output specs on it, with
    the outputs that were static in its own model (the runtime copies them, as it did there) and
    where its packed outputs lie.

    Each model runs inside an ``If`` of its own, chosen by a flag input, except ``top``'s (index,
    inputs it runs idle on), which runs at the top level on every call. Beside a top-level model
    the others' outputs leave their ``If``s packed, one flat tensor per element type and one of
    sizes: each output port costs every request, and those models are rarely the one called."""
    k_top, idle = top if top is not None else (-1, ())
    flags: dict[int, ov.Node] = {}
    params: list[list[ov.Node]] = []
    results: list[ov.Node] = []
    first_result: list[int] = []
    local_pieces: list[dict[int, Piece] | None] = []  # per model: own output -> Piece (ports local)
    for k, model in enumerate(models):
        body = model.clone()
        first_result.append(len(results))
        if k == k_top:
            params.append(list(body.get_parameters()))
            results += [ops.result(r.input_value(0)) for r in body.get_results()]
            local_pieces.append(None)
            continue
        pieces = None
        if top is not None:
            packed, pieces = _packed(body.get_results())
            body = ov.Model(packed, body.get_parameters())
        local_pieces.append(pieces)
        flags[k] = ops.parameter([], ov.Type.boolean, name=f"run_{k}")
        empty = [_empty_like(r) for r in body.get_results()]
        branch = ops.if_op(flags[k])
        branch.set_then_body(body)
        branch.set_else_body(ov.Model(empty, []))
        outer = []
        for p in body.get_parameters():
            o = ops.parameter(p.get_partial_shape(), p.get_element_type(), name=p.get_friendly_name())
            branch.set_input(o.output(0), p, None)
            outer.append(o)
        params.append(outer)
        results += [ops.result(branch.set_output(r, e)) for r, e in zip(body.get_results(), empty, strict=True)]
    merged = ov.Model(results, list(flags.values()) + [p for group in params for p in group], "shared_weights")
    shared: dict[tuple, ov.Tensor] = {}  # one never-read buffer per type and shape
    placeholders = [
        [InputSpec("fixed", -1, t) for t in idle]
        if j == k_top
        else [InputSpec("fixed", -1, _placeholder(p, shared)) for p in group]
        for j, group in enumerate(params)
    ]
    bindings = []
    virtual = len(results)  # packed outputs get indices past the model's ports
    for k, (inputs, outputs) in enumerate(specs):
        bound = [InputSpec("fixed", -1, ov.Tensor(np.array(i == k))) for i in flags]
        for j, group in enumerate(placeholders):
            bound += inputs if j == k else group
        at, pieces = first_result[k], local_pieces[k]
        if pieces is None:
            own = models[k].get_results()
            static = frozenset(at + i for i, r in enumerate(own) if r.get_output_partial_shape(0).is_static)
            bindings.append((bound, [o.moved(lambda i, at=at: at + i) for o in outputs], static, {}))
            continue
        base = virtual
        virtual += len(pieces)
        packed = {base + i: p._replace(data=at + p.data, sizes=at + p.sizes) for i, p in pieces.items()}
        bindings.append((bound, [o.moved(lambda i, base=base: base + i) for o in outputs], frozenset(), packed))
    return merged, bindings


def _packed(results: Sequence[ov.Node]) -> tuple[list[ov.Node], dict[int, Piece]]:
    """Results returning ``results``' values as one flat tensor per element type and one i64
    tensor of all their sizes, and where each value lies (ports counted among the new results)."""
    groups: dict[str, list[int]] = {}
    starts, ranks, sizes = [], [], []
    for i, r in enumerate(results):
        shape = r.get_output_partial_shape(0)
        if shape.rank.is_dynamic:
            raise ValueError("an output of dynamic rank")
        groups.setdefault(r.get_output_element_type(0).get_type_name(), []).append(i)
        starts.append(sum(ranks))
        ranks.append(shape.rank.get_length())
        sizes.append(ops.shape_of(r.input_value(0), "i64").output(0))
    packed, pieces = [], {}
    for members in groups.values():
        flat = [h.reshape(results[i].input_value(0), [-1]) for i in members]
        packed.append(ops.result(flat[0] if len(flat) == 1 else ops.concat(flat, 0)))
        for n, i in enumerate(members):
            before = tuple((starts[m], ranks[m]) for m in members[:n])
            pieces[i] = Piece(len(packed) - 1, -1, starts[i], ranks[i], before)
    packed.append(ops.result(ops.concat(sizes, 0) if sizes else h.const(np.zeros(0), torch.int64)))
    return packed, {i: p._replace(sizes=len(packed) - 1) for i, p in pieces.items()}


def _empty_like(result: ov.Node) -> ov.Node:
    """A Result of the same type and rank as ``result``, holding no elements (a scalar: zero)."""
    shape = result.get_output_partial_shape(0)
    if shape.rank.is_dynamic:
        raise ValueError("an output of dynamic rank")
    rank = shape.rank.get_length()
    kind = result.get_output_element_type(0)
    return ops.result(ops.constant(ov.Tensor(kind, ov.Shape([0] * rank if rank else []))))


def _placeholder(param: ov.Node, shared: dict[tuple, ov.Tensor]) -> ov.Tensor:
    """A tensor an idle member's input is bound to: never read, so dynamic sizes are 0."""
    dims = tuple(d.get_length() if d.is_static else 0 for d in param.get_partial_shape())
    key = (param.get_element_type().get_type_name(), dims)
    if key not in shared:
        shared[key] = ov.Tensor(param.get_element_type(), ov.Shape(list(dims)))
    return shared[key]
