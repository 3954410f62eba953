"""Weight-only quantized matrix products in the form OpenVINO keeps compressed.

torchao's weight-only int8 computes ``(x @ int8_weight.t().to(float)) * scale``: the per-column
scale multiplies the product. OpenVINO's CPU plugin runs a product over an int8 constant without
decompressing it (a quarter of the bytes to read per call) when the graph reads
``Convert(int8 [N, K]) -> Multiply(scale [N, 1]) -> MatMul(transpose_b)``; otherwise it folds the
weight into f32 at compile time. ``x @ (w * s)`` equals ``(x @ w) * s`` for a scale per output
column, so the multiplication is moved onto the stored weight, before its transpose.
"""

from __future__ import annotations

import contextlib

import torch
from torch._guards import detect_fake_mode

from fxvino.utils.fx import KEEP_UNFOLDED

aten = torch.ops.aten


def _stored_int_weight(cast: object) -> torch.fx.Node | None:
    """The constant integer [N, K] tensor ``cast`` is a float cast of the transpose of, else None."""
    if not (isinstance(cast, torch.fx.Node) and cast.target is aten._to_copy.default):
        return None
    t = cast.args[0]
    transpose = isinstance(t, torch.fx.Node) and (
        t.target is aten.t.default or (t.target is aten.permute.default and list(t.args[1]) == [1, 0])
    )
    if not transpose:
        return None
    stored = t.args[0]
    val = stored.meta.get("val") if isinstance(stored, torch.fx.Node) else None
    if stored.op != "get_attr" or val is None or val.is_floating_point() or val.dim() != 2:
        return None
    return stored


def _infer_val(node: torch.fx.Node) -> None:
    args = torch.fx.node.map_arg(node.args, lambda n: n.meta["val"])
    node.meta["val"] = node.target(*args, **dict(node.kwargs))


def scale_weights_not_products(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``mul(mm(x, cast(t(int_weight))), column_scale)`` into
    ``mm(x, t(mul(cast(int_weight), column_scale[:, None])))``; returns how many were rewritten."""
    rewritten = 0
    for mul in list(gm.graph.nodes):
        if mul.op != "call_function" or mul.target is not aten.mul.Tensor or len(mul.args) != 2:
            continue
        mm, scale = mul.args
        if not (isinstance(mm, torch.fx.Node) and mm.target is aten.mm.default and len(mm.users) == 1):
            continue
        cast, stored = mm.args[1], _stored_int_weight(mm.args[1])
        scale_val = scale.meta.get("val") if isinstance(scale, torch.fx.Node) else None
        if stored is None or scale_val is None:
            continue
        columns = stored.meta["val"].shape[0]
        if scale_val.numel() != columns or scale_val.shape[-1] != columns or scale_val.dtype != cast.meta["val"].dtype:
            continue
        fake = detect_fake_mode([cast.meta["val"]]) or contextlib.nullcontext()  # new values live there too
        with fake, gm.graph.inserting_before(mul):  # after both the product and the scale
            new = [gm.graph.call_function(aten._to_copy.default, (stored,), dict(cast.kwargs))]
            new.append(gm.graph.call_function(aten.view.default, (scale, [columns, 1])))
            new.append(gm.graph.call_function(aten.mul.Tensor, (new[0], new[1])))
            new.append(gm.graph.call_function(aten.t.default, (new[2],)))
            new.append(gm.graph.call_function(aten.mm.default, (mm.args[0], new[3])))
            for n in new:
                _infer_val(n)
                n.meta[KEEP_UNFOLDED] = True  # folded, the weight would be stored as f32
        mul.replace_all_uses_with(new[-1])
        gm.graph.erase_node(mul)
        gm.graph.erase_node(mm)
        rewritten += 1
    if rewritten:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
    return rewritten
