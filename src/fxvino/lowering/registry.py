"""The lowering registry: the single source of truth for what runs on OpenVINO.

Each entry maps an ``OpOverload`` (or a Python callable that appears in FX graphs, such as
``operator.getitem``) to a lowering function and an optional validator. The partitioner asks
:func:`decline_reason`; nothing else decides support.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from fxvino.utils.dtypes import in_int32, is_supported_dtype

Validator = Callable[[torch.fx.Node], str | None]
Lowering = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class Entry:
    target: Any
    fn: Lowering
    validator: Validator | None
    family: str


# Filled at import time by the family modules' decorators and never mutated afterwards.
REGISTRY: dict[Any, Entry] = {}
# Lowerings for nodes that touch complex tensors (carried as a trailing dim of 2, lowering/ops/fft.py).
# A node with a complex input or output uses this entry, never its real one.
COMPLEX: dict[Any, Entry] = {}
# Lowerings of other libraries' custom ops, by op name (lowers_named).
BY_NAME: dict[str, Entry] = {}
COMPLEX_DTYPES = frozenset({torch.complex64})


def lowers(*targets: Any, validator: Validator | None = None) -> Callable[[Lowering], Lowering]:
    """Register ``fn(ctx, node, *args, **kwargs)`` as the lowering of ``targets``.

    ``args``/``kwargs`` are the node's own, with FX nodes replaced by their lowered values
    (``ov.Output`` for tensors and symbolic ints, Python values otherwise).
    """

    def wrap(fn: Lowering) -> Lowering:
        family = fn.__module__.rsplit(".", 1)[-1]
        for t in targets:
            if t in REGISTRY:
                raise RuntimeError(f"{t} is lowered twice: {REGISTRY[t].fn.__module__} and {fn.__module__}")
            REGISTRY[t] = Entry(t, fn, validator, family)
        return fn

    return wrap


def lowers_named(*names: str, validator: Validator | None = None) -> Callable[[Lowering], Lowering]:
    """Register a lowering for ops of other libraries by their name ("transformers.x.default"):
    their ``OpOverload`` exists only once that library is imported, maybe after fxvino."""

    def wrap(fn: Lowering) -> Lowering:
        family = fn.__module__.rsplit(".", 1)[-1]
        for n in names:
            BY_NAME[n] = Entry(n, fn, validator, family)
        return fn

    return wrap


def lowers_complex(*targets: Any, validator: Validator | None = None) -> Callable[[Lowering], Lowering]:
    """Register the lowering of ``targets`` for nodes that read or make complex tensors."""

    def wrap(fn: Lowering) -> Lowering:
        for t in targets:
            if t in COMPLEX:
                raise RuntimeError(f"{t} has two complex lowerings")
            COMPLEX[t] = Entry(t, fn, validator, "fft")
        return fn

    return wrap


def all_entries() -> dict[Any, Entry]:
    """Every op with a lowering, real or complex (the complex-only FFT ops among them), for listings."""
    return {**{t: e for t, e in COMPLEX.items() if t not in REGISTRY}, **REGISTRY}


def involves_complex(node: torch.fx.Node) -> bool:
    vals = _meta_values(node) + [v for a in node.all_input_nodes for v in _meta_values(a)]
    return any(isinstance(v, torch.Tensor) and v.is_complex() for v in vals)


def entry_for(node: torch.fx.Node) -> Entry | None:
    """The lowering ``node`` uses: the complex one when it touches complex tensors."""
    if involves_complex(node):
        return COMPLEX.get(node.target)
    return REGISTRY.get(node.target) or BY_NAME.get(op_name(node.target))


def declines(*targets: Any, reason: str) -> None:
    """Record that ``targets`` stay in PyTorch on purpose, and why (shown in every report)."""

    def refuse(ctx: Any, node: torch.fx.Node, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(reason)

    refuse.__module__ = "fxvino.lowering.ops.declined"
    lowers(*targets, validator=lambda node: reason)(refuse)


def _meta_values(node: torch.fx.Node) -> list[Any]:
    val = node.meta.get("val")
    return list(val) if isinstance(val, (list, tuple)) else [val]


def decline_reason(node: torch.fx.Node, disabled: frozenset = frozenset()) -> str | None:
    """Why ``node`` cannot run on OpenVINO, or None when it can."""
    target = node.target
    if target in disabled:
        return "listed in disabled_ops"
    complex_node = involves_complex(node)
    entry = entry_for(node)
    if entry is None:
        if complex_node and target in REGISTRY:
            return "complex tensors: this op has no complex lowering"
        return "no OpenVINO lowering"
    if "val" not in node.meta and node.users:  # (checks such as _assert_scalar have no value and no users)
        return "no shape/dtype metadata on the node"
    tensors = [v for v in _meta_values(node) if isinstance(v, torch.Tensor)]
    for a in node.all_input_nodes:
        tensors += [v for v in _meta_values(a) if isinstance(v, torch.Tensor)]
    for t in tensors:
        if not is_supported_dtype(t.dtype) and not (complex_node and t.dtype in COMPLEX_DTYPES):
            return f"dtype {t.dtype} has no OpenVINO element type"
        if t.device.type != "cpu":
            return f"tensor on device {t.device}; fxvino takes CPU tensors"
    if target in INT_VALUE_OPERANDS and any(t.dtype == torch.int64 for t in tensors):
        leaves = torch.utils._pytree.tree_leaves((node.args, node.kwargs))
        big = [a for a in leaves if type(a) is int and not in_int32(a, a)]
        if big:
            return f"an int64 operand ({big[0]}) beyond the int32 range OpenVINO's CPU plugin computes int64 in"
    if entry.validator is not None:
        return entry.validator(node)
    return None


_aten = torch.ops.aten
# Ops whose Python-int arguments are values combined with int64 tensors, which the CPU plugin
# computes as int32 with the constant saturated (``x == 2**40`` was True for ``x = 2**31 - 1``,
# ``x % 2**40`` gave 2**31 - 3 for ``-3``). Ops that make int64 results from such a value (sums,
# fills, ``arange``) check them in the graph instead (eager_checks.stays_int32); ints that are
# positions (a slice's end of 2**63 - 1) are not values.
INT_VALUE_OPERANDS = frozenset(
    {
        _aten.eq.Scalar,
        _aten.ne.Scalar,
        _aten.lt.Scalar,
        _aten.le.Scalar,
        _aten.gt.Scalar,
        _aten.ge.Scalar,
        _aten.remainder.Scalar,
        _aten.fmod.Scalar,
        _aten.div.Scalar_mode,
        _aten.floor_divide.Scalar,
        _aten.bitwise_and.Scalar,
        _aten.bitwise_or.Scalar,
        _aten.bitwise_xor.Scalar,
        _aten.scatter.value,
        _aten.scatter.value_reduce,
        _aten.index_fill.int_Scalar,
        _aten.masked_fill.Scalar,
        _aten.clamp.default,
        _aten.where.ScalarOther,
        _aten.where.ScalarSelf,
        _aten.where.Scalar,
    }
)


def op_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__name__", str(target))
