"""Turn one FX partition (functional ATen) into an ``ov.Model``.

The driver walks the graph once: placeholders become Parameters (or Constants for frozen
weights), symbolic-int placeholders are recomputed in-graph from a tensor's ShapeOf where
possible so one compiled model serves every size, and every call_function node goes through
its registry entry.
"""

from __future__ import annotations

import collections
import dataclasses
import weakref
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef

from fxvino.lowering import eager_checks, views
from fxvino.lowering import helpers as h
from fxvino.lowering.bf16_infinities import keep_bf16_infinities
from fxvino.lowering.constant_chains import keep_constant_chains
from fxvino.lowering.constant_predicates import fold_constant_predicates
from fxvino.lowering.exact_division import keep_divisions_exact
from fxvino.lowering.ops.random import share_stream_keys
from fxvino.lowering.rank1_abs import keep_rank1_abs
from fxvino.lowering.registry import entry_for, op_name
from fxvino.lowering.rounding import round_like_torch
from fxvino.lowering.scalar_broadcasts import keep_scalar_broadcasts_small
from fxvino.quantization.compressed import four_bit
from fxvino.utils.dtypes import in_int32, ov_type, real_dtype, to_numpy
from fxvino.utils.fx import fetch_attr


class LoweringError(RuntimeError):
    """A node could not be lowered; carries the node so reports can say which one."""

    def __init__(self, node: torch.fx.Node | None, reason: str):
        where = f"{node.name} ({op_name(node.target)})" if node is not None else "graph"
        super().__init__(f"{where}: {reason}")
        self.node = node
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One runtime input of the OpenVINO model: a tensor, a symbolic int fed as i64, a seed, or a
    value fixed for the model's life."""

    kind: str  # "tensor" | "complex" | "symint" | "symfloat" | "seed" (random bits per call, lowering/ops/random.py)
    # | "fixed" (``value``, an ov.Tensor bound once per request: shared_weights.py)
    position: int  # index into the partition's runtime arguments (-1 for "seed" and "fixed")
    value: Any = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    kind: str  # "tensor" | "complex" | "view" | "symint" | "symfloat" | "symbool" | "python"
    index: int = -1  # OpenVINO output index for tensor/sym*
    value: Any = None  # the Python value for kind == "python"
    dtype: torch.dtype | None = None

    def moved(self, to: Callable[[int], int]) -> OutputSpec:
        """This spec with its OpenVINO output indices mapped by ``to``."""
        if self.kind == "python":
            return self
        if self.kind == "view":
            position, strides, offset_index = self.value
            return dataclasses.replace(self, index=to(self.index), value=(position, strides, to(offset_index)))
        return dataclasses.replace(self, index=to(self.index))


@dataclasses.dataclass
class LoweredGraph:
    model: ov.Model
    inputs: list[InputSpec]
    outputs: list[OutputSpec]
    runtime_positions: list[int]  # placeholder positions still passed at run time
    op_counts: collections.Counter
    # Plugin properties this graph compiles better with (under the user's ``config``), read off
    # ``model`` by ``compilation.plugin_config`` once it is lowered.
    plugin_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    # The ``PackedValues`` ``model``'s 4-bit constants were made from: the compiled partition keeps
    # them, so the next graph over the same weights finds them.
    packed: list[PackedValues] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class LoweringContext:
    """What a lowering may need beyond its node: the graph being built."""

    name: str
    env: dict[torch.fx.Node, Any] = dataclasses.field(default_factory=dict)
    seed: ov.Node | None = None  # the per-call seed input, made when a lowering first draws
    streams: int = 0  # random streams handed out so far: each draw gets its own
    # Each symbolic size read off the first runtime input that has it (``helpers.sym_key`` -> i64 scalar).
    symbols: dict[str, ov.Output] = dataclasses.field(default_factory=dict)
    # Each draw's key, to be computed together once the graph is built (random.share_stream_keys).
    stream_keys: list[tuple[int, ov.Output]] = dataclasses.field(default_factory=list)
    # What the indices must satisfy (eager_checks.py); None when the graph is lowered without them.
    checks: list[ov.Output] | None = None
    # The 16-bit float types the device computes in f32 (``lower_graph``'s ``widened``).
    widened: frozenset[torch.dtype] = frozenset()

    def random_seed(self) -> ov.Output:
        """This call's seed (two i32), an extra model input the runtime fills (``InputSpec("seed")``)."""
        if self.seed is None:
            self.seed = ops.parameter(ov.PartialShape([2]), ov.Type.i32, name="fxvino_seed")
        return self.seed.output(0)

    def new_stream(self) -> int:
        self.streams += 1
        return self.streams - 1


def lower_graph(
    gm: torch.fx.GraphModule,
    constants: Mapping[int, torch.Tensor],
    name: str = "fxvino",
    widened: Collection[torch.dtype] = (),
    checks: bool = False,
) -> LoweredGraph:
    """Lower ``gm``; placeholder positions in ``constants`` become OpenVINO Constants. ``widened``
    names the 16-bit float types the target device computes in f32 (``devices.widened_types``):
    their values are rounded where PyTorch's rounding is observable (``rounding.py``). With
    ``checks``, the conditions its indices must meet come back as one more boolean result
    (eager_checks.py), for a runtime that runs the graph in PyTorch when they fail."""
    ctx = LoweringContext(name, checks=[] if checks else None, widened=frozenset(widened))
    params: list[ov.Node] = []
    packed: list[PackedValues] = []  # what its 4-bit constants were made from
    inputs: list[InputSpec] = []
    runtime_positions: list[int] = []
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    sym_sources = ctx.symbols
    pending_syms: list[tuple[int, torch.fx.Node]] = []

    for pos, node in enumerate(placeholders):
        val = node.meta.get("val")
        if pos in constants:
            ctx.env[node] = _constant(_within_int32(node, constants[pos]), packed)
        elif isinstance(val, torch.Tensor):
            dims = [d if isinstance(d, int) else -1 for d in val.shape]
            carried = val.is_complex()  # a complex tensor travels as its view_as_real: [..., 2]
            shape = ov.PartialShape(dims + [2] if carried else dims)
            p = ops.parameter(shape, ov_type(real_dtype(val.dtype)), name=node.name)
            params.append(p)
            inputs.append(InputSpec("complex" if carried else "tensor", pos))
            runtime_positions.append(pos)
            ctx.env[node] = p.output(0)
            for d, size in enumerate(val.shape):
                key = h.sym_key(size)
                if key is not None and key not in sym_sources:
                    sym_sources[key] = h.dim(p.output(0), d)
        elif isinstance(val, torch.SymInt):
            pending_syms.append((pos, node))
        elif isinstance(val, torch.SymFloat):  # e.g. a float .item() computed before this partition
            p = ops.parameter(ov.PartialShape([]), ov.Type.f64, name=node.name)
            params.append(p)
            inputs.append(InputSpec("symfloat", pos))
            runtime_positions.append(pos)
            ctx.env[node] = p.output(0)
        elif isinstance(val, (int, float, bool)) or val is None:
            ctx.env[node] = val
            runtime_positions.append(pos)  # still passed; ignored by the model
        else:
            raise LoweringError(node, f"unsupported placeholder value {type(val).__name__}")

    for pos, node in pending_syms:
        key = h.sym_key(node.meta["val"])
        if key in sym_sources:
            ctx.env[node] = sym_sources[key]
        else:
            p = ops.parameter(ov.PartialShape([]), ov.Type.i64, name=node.name)
            params.append(p)
            inputs.append(InputSpec("symint", pos))
            ctx.env[node] = p.output(0)
        runtime_positions.append(pos)
    runtime_positions.sort()
    # Runtime arguments are passed in placeholder order; inputs are indexed the same way.
    order = {pos: i for i, pos in enumerate(runtime_positions)}
    inputs = [dataclasses.replace(s, position=order[s.position]) for s in inputs]

    counts: collections.Counter = collections.Counter()
    results: list[ov.Node] = []
    outputs: list[OutputSpec] = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            ctx.env[node] = _constant(_within_int32(node, fetch_attr(gm, node.target)), packed)
        elif node.op == "call_function":
            entry = entry_for(node)
            if entry is None:
                raise LoweringError(node, "no OpenVINO lowering")
            empty = _empty_result(node, packed)
            if empty is not None:
                ctx.env[node] = empty
                counts[op_name(node.target)] += 1
                continue
            args = _map(node.args, ctx.env)
            kwargs = {k: _map(v, ctx.env) for k, v in node.kwargs.items()}
            try:
                ctx.env[node] = entry.fn(ctx, node, *args, **kwargs)
            except LoweringError:
                raise
            except Exception as e:  # noqa: BLE001 - any failure is reported with its node
                raise LoweringError(node, f"{type(e).__name__}: {e}") from e
            counts[op_name(node.target)] += 1
        elif node.op == "output":
            outputs = [_result(a, results, ctx.env, order) for a in _flat(node.args[0])]
        elif node.op != "placeholder":
            raise LoweringError(node, f"unsupported FX node kind {node.op}")
    if ctx.checks:
        results.append(ops.result(h.cast(eager_checks.combined(ctx.checks), torch.uint8)))
        outputs.append(OutputSpec("tensor", index=len(results) - 1, value=eager_checks.CHECKS, dtype=torch.bool))
    if ctx.seed is not None:  # drawn by the runtime on each call; it has no placeholder
        params.append(ctx.seed)
        share_stream_keys(ctx)
        inputs.append(InputSpec("seed", -1))
    model = ov.Model(results, params, name)
    keep_scalar_broadcasts_small(model)
    fold_constant_predicates(model)
    keep_bf16_infinities(model, widened)
    round_like_torch(model, widened)
    keep_divisions_exact(model)
    keep_constant_chains(model)  # after: the Divides kept exact are not fused
    keep_rank1_abs(model)  # last: the passes above emit Abs too
    return LoweredGraph(model, inputs, outputs, runtime_positions, counts, packed=packed)


def _within_int32(node: torch.fx.Node, t: Any) -> Any:
    """``t``, a frozen constant, unless it is int64 with values outside int32, which the CPU plugin
    would saturate (it computes int64 as int32): then its first reader is blamed, which leaves
    it to PyTorch (eager_checks.py keeps int64 results in range the same way)."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.numel() == 0:
        return t
    low, high = (int(v) for v in torch.aminmax(t.detach()))
    readers = [user for user in node.users if user.op == "call_function"]
    if not in_int32(low, high) and readers:
        raise LoweringError(
            readers[0], f"int64 values beyond the int32 range OpenVINO's CPU plugin computes int64 in ({low}..{high})"
        )
    return t


def _constant(t: torch.Tensor, packed: list[PackedValues]) -> ov.Output:
    if four_bit(t):
        return _four_bit_constant(t, packed)
    t = t.detach()
    if t.dtype == torch.bfloat16:
        # A Constant made from an ov.Tensor reads the tensor's memory without keeping it alive:
        # share the weight only when it is the caller's own (contiguous) storage, which the
        # compiled partition keeps referenced; copy anything else into memory OpenVINO owns.
        if t.is_contiguous():
            return ops.constant(ov.Tensor(to_numpy(t), list(t.shape), ov.Type.bf16)).output(0)
        return h.owned_constant(t)
    if not t.is_contiguous():
        t = t.contiguous()
    return ops.constant(to_numpy(t), shared_memory=True).output(0)


class PackedValues:
    """4-bit values packed two to a byte, in memory OpenVINO owns: the constant of every graph
    lowered over the same torch tensor while one of them is compiled. A compiled model keeps its
    constants, so without this an LLM's prefill and decode graphs held a copy each (a 1.1B int4
    Llama: 0.55 GB more per graph)."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: ov.Tensor) -> None:
        self.tensor = tensor


# The torch tensor's storage, offset, sizes, strides and dtype -> its packed values, for as long
# as a compiled partition holds them (LoweredGraph.packed): this keeps nothing alive by itself.
_packed: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _four_bit_constant(t: torch.Tensor, made_from: list[PackedValues]) -> ov.Output:
    """A u4/i4 Constant of ``t``'s values (one per byte in ``t``), two to a byte, low nibble first.

    Reused when another graph packed the same tensor to the same bytes: the bytes are compared, not
    trusted to a version counter (the aliases a graph freezes need not share the weight's)."""
    values = to_numpy(t.detach().contiguous()).reshape(-1).view(np.uint8) & 0x0F
    if values.size % 2:
        values = np.append(values, np.uint8(0))
    packed = values[0::2] | (values[1::2] << 4)
    key = (StorageWeakRef(t.untyped_storage()), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
    found = _packed.get(key)
    if found is None or not np.array_equal(found.tensor.data.reshape(-1).view(np.uint8), packed):
        owned = ov.Tensor(ov.Type.u4 if t.dtype == torch.uint8 else ov.Type.i4, ov.Shape(list(t.shape)))
        owned.data[...] = packed.reshape(owned.data.shape).view(owned.data.dtype)
        found = _packed[key] = PackedValues(owned)
    made_from.append(found)
    return ops.constant(found.tensor).output(0)


def _empty_result(node: torch.fx.Node, packed: list[PackedValues]) -> Any:
    """Constants for a node whose every tensor result has no elements and a static shape, else
    None. Such a result is its shape and dtype alone, whatever its inputs; and the CPU plugin
    dies in ``compile_model`` (SIGFPE) on some ops with nothing to compute, as a Gather with an
    empty index (``index_select`` or an embedding of no ids) or ``_pdist_forward`` of one row."""
    val = node.meta.get("val")
    values = val if isinstance(val, (tuple, list)) else [val]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors or any(v is not None and not isinstance(v, torch.Tensor) for v in values):
        return None
    for t in tensors:
        if t.is_complex() or any(not isinstance(d, int) for d in t.shape) or t.numel() != 0:
            return None
    made = [None if v is None else _constant(torch.zeros(v.shape, dtype=v.dtype), packed) for v in values]
    return made if isinstance(val, (tuple, list)) else made[0]


def _map(a: Any, env: dict) -> Any:
    if isinstance(a, torch.fx.Node):
        return env[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_map(x, env) for x in a)
    return a


def _flat(out: Any) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _result(node: Any, results: list[ov.Node], env: dict, order: dict[int, int]) -> OutputSpec:
    """Append ``node``'s lowered value as a model Result and describe how to return it."""
    if not isinstance(node, torch.fx.Node):
        return OutputSpec("python", value=node)
    if node.meta.get("fxvino_view_of_input"):
        return _view_result(node, results, env, order)
    lowered, val = env[node], node.meta.get("val")
    if isinstance(val, torch.SymBool) or (isinstance(val, bool) and h.is_output(lowered)):
        results.append(ops.result(h.cast(lowered, torch.bool)))
        return OutputSpec("symbool", index=len(results) - 1)
    if isinstance(val, torch.SymInt) or (isinstance(val, int) and h.is_output(lowered)):
        results.append(ops.result(h.cast(lowered, torch.int64)))
        return OutputSpec("symint", index=len(results) - 1)
    if isinstance(val, torch.SymFloat) or (isinstance(val, float) and h.is_output(lowered)):
        results.append(ops.result(h.cast(lowered, torch.float64)))
        return OutputSpec("symfloat", index=len(results) - 1)
    if not h.is_output(lowered):
        return OutputSpec("python", value=lowered)
    if not isinstance(val, torch.Tensor):
        raise LoweringError(node, f"output has meta value {type(val).__name__}, expected a tensor")
    if val.is_complex():  # carried as [..., 2] of the real dtype; the runtime views it as complex
        if h.rank(lowered) != val.dim() + 1:
            raise LoweringError(node, f"complex output of rank {h.rank(lowered) - 1}, torch's is {val.dim()}")
        results.append(ops.result(h.cast(lowered, real_dtype(val.dtype))))
        return OutputSpec("complex", index=len(results) - 1, dtype=val.dtype)
    if h.rank(lowered) != val.dim():
        raise LoweringError(node, f"lowered rank {h.rank(lowered)} differs from torch's {val.dim()}")
    # Booleans leave as u8 (the runtime views them as bool): the CPU plugin computes masks in u8
    # and converts them to a boolean Result in a reference kernel (dropout's saved masks: 5% of a
    # BERT-base training forward).
    results.append(ops.result(h.cast(lowered, torch.uint8 if val.dtype == torch.bool else val.dtype)))
    return OutputSpec("tensor", index=len(results) - 1, dtype=val.dtype)


def _view_result(node: torch.fx.Node, results: list[ov.Node], env: dict, order: dict[int, int]) -> OutputSpec:
    """An output that views a graph input at data-dependent positions (``partitioning.support.keep_views_real``):
    the model returns its sizes and storage offset, and the runtime returns a real view of the
    input (AOTAutograd rebuilds such outputs from the returned tensor's strides and offset)."""
    found = views.view_chain(node)
    base_name = node.meta["fxvino_view_of_input"]
    if found is None or found[0].op != "placeholder" or found[0].name != base_name:
        raise LoweringError(node, f"an output viewing input {base_name} lost its chain of views")
    base, chain = found
    position = order[list(base.graph.find_nodes(op="placeholder")).index(base)]
    results.append(ops.result(h.shape_of(env[node])))
    sizes = len(results) - 1
    results.append(ops.result(views.relative_offset(env, chain)))
    strides = tuple(int(s) for s in node.meta["val"].stride())
    return OutputSpec("view", index=sizes, value=(position, strides, len(results) - 1), dtype=node.meta["val"].dtype)
