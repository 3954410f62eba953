"""``F.interpolate`` kept whole through AOTAutograd, so OpenVINO runs it as one Interpolate.

Dynamo records ``F.interpolate`` as one call, but torch registers Python kernels for the
``upsample_*`` overloads that run while AOTAutograd traces, before any decomposition table is
consulted: the graph then holds arange/index arithmetic, which OpenVINO runs as GatherND (its
reference kernel for a bilinear resize: a 2x bilinear upsample of [1, 128, 64, 64] took 7.8 ms
against 2.4 natively and 2.1 in eager PyTorch). In inference graphs the call becomes
``fxvino::upsample``, an op AOTAutograd keeps as it is (its eager kernel is the ATen overload
``F.interpolate`` would call), lowered by ``lowering/ops/resample.py`` to Interpolate-11 or, where
torch's coordinates differ from Interpolate's, to exact Gathers. A call is left alone when that
lowering would decline it (a non-integer scale over dynamic sizes), when it is not a plain
resize (``area`` is an adaptive pool, ``lanczos`` has no lowering), or when its arguments are
not the constants Dynamo usually records; graphs that need gradients keep the decomposition:
the op has no backward.
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from fxvino.lowering.ops import resample

aten = torch.ops.aten

# (mode, input rank) -> the ATen overload packet F.interpolate calls.
_OPS = {
    ("nearest", 3): "upsample_nearest1d",
    ("nearest", 4): "upsample_nearest2d",
    ("nearest", 5): "upsample_nearest3d",
    ("nearest-exact", 3): "_upsample_nearest_exact1d",
    ("nearest-exact", 4): "_upsample_nearest_exact2d",
    ("nearest-exact", 5): "_upsample_nearest_exact3d",
    ("linear", 3): "upsample_linear1d",
    ("bilinear", 4): "upsample_bilinear2d",
    ("trilinear", 5): "upsample_trilinear3d",
    ("bicubic", 4): "upsample_bicubic2d",
}
_ANTIALIASED = {"bilinear": "_upsample_bilinear2d_aa", "bicubic": "_upsample_bicubic2d_aa"}
_NEAREST = ("nearest", "nearest-exact")
_SIGNATURE = inspect.signature(F.interpolate)


def _call(
    input: torch.Tensor,  # noqa: A002 - torch's own name
    op: str,
    output_size: Sequence[int] | None,
    scale_factors: Sequence[float] | None,
    align_corners: bool | None,
) -> torch.Tensor:
    overload = getattr(aten, op).vec
    if align_corners is None:  # the nearest kinds take no align_corners
        return overload(input, output_size, scale_factors)
    return overload(input, output_size, align_corners, scale_factors)


@torch.library.custom_op("fxvino::upsample", mutates_args=())
def upsample(
    input: torch.Tensor,  # noqa: A002
    op: str,
    output_size: Sequence[int] | None,  # SymInt[] in the schema: dynamic sizes pass through
    scale_factors: Sequence[float] | None,
    align_corners: bool | None,
) -> torch.Tensor:
    return _call(input, op, output_size, scale_factors, align_corners)


@upsample.register_fake
def _(input, op, output_size, scale_factors, align_corners):  # noqa: A002
    return _call(input, op, output_size, scale_factors, align_corners)


def _constant(value: Any) -> bool:
    """No graph value inside (Dynamo records literal arguments as Python values)."""
    if isinstance(value, (list, tuple)):
        return all(map(_constant, value))
    return not isinstance(value, torch.fx.Node)


def _size_entry(value: Any) -> bool:
    """An int, or a graph value Dynamo traced as a (symbolic) int."""
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("example_value")
    return isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)


def _size_entries(node: torch.fx.Node, size: Any, spatial: int) -> list[Any] | None:
    """``size`` as one entry per spatial axis, or None. A size read off another tensor under
    dynamic shapes (``size=skip.shape[-2:]``) is one graph value holding a torch.Size: its
    entries become ``getitem`` nodes, which AOTAutograd traces as SymInts."""
    if isinstance(size, torch.fx.Node) and isinstance(size.meta.get("example_value"), tuple):
        sizes = size.meta["example_value"]
        if len(sizes) != spatial:
            return None
        entries = []
        with node.graph.inserting_before(node):
            for i, value in enumerate(sizes):
                item = node.graph.call_function(operator.getitem, (size, i))
                item.meta["example_value"] = value
                entries.append(item)
        return entries
    entries = list(size) if isinstance(size, (list, tuple)) else [size] * spatial
    if len(entries) != spatial or not all(map(_size_entry, entries)):
        return None
    return entries


def _whole(node: torch.fx.Node) -> tuple[Any, ...] | None:
    """The ``fxvino::upsample`` arguments for an ``F.interpolate`` node, or None to leave it."""
    try:
        bound = _SIGNATURE.bind(*node.args, **node.kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    a = bound.arguments
    x, out = a["input"], node.meta.get("example_value")
    value = x.meta.get("example_value") if isinstance(x, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or not isinstance(out, torch.Tensor) or value.dim() not in (3, 4, 5):
        return None
    size, scale, mode = a["size"], a["scale_factor"], a["mode"]
    if not _constant([scale, mode, a["align_corners"], a["recompute_scale_factor"], a["antialias"]]):
        return None
    if (size is None) == (scale is None) or a["recompute_scale_factor"]:
        return None  # an error eager raises itself, or sizes the decomposition computes
    name = _ANTIALIASED.get(mode) if a["antialias"] else _OPS.get((mode, value.dim()))
    if name is None or (a["antialias"] and value.dim() != 4):
        return None
    spatial = value.dim() - 2
    if size is not None:
        size = _size_entries(node, size, spatial)
        if size is None:
            return None
        scales = None
    else:
        scales = [float(s) for s in scale] if isinstance(scale, (list, tuple)) else [float(scale)] * spatial
        if len(scales) != spatial:
            return None
    if mode in _NEAREST:
        if a["align_corners"] is not None:
            return None
        align = None
    else:
        align = bool(a["align_corners"])
    op = getattr(aten, name).vec
    plan = resample.plan_for(op, scales, bool(align), list(value.shape[2:]), list(out.shape[2:]))
    if resample.declined(plan, size is not None) is not None:
        return None
    return (x, name, size, scales, align)


def keep_resizes_whole(gm: torch.fx.GraphModule) -> bool:
    """Turn the ``F.interpolate`` calls of an inference Dynamo graph into ``fxvino::upsample``; True if any."""
    changed = False
    for node in gm.graph.find_nodes(op="call_function", target=F.interpolate):
        args = _whole(node)
        if args is None:
            continue
        node.target = torch.ops.fxvino.upsample.default
        node.args, node.kwargs = args, {}
        changed = True
    if changed:
        gm.recompile()
    return changed
