"""Batch norm folded into the convolution before it, for convolutions autocast runs in 16 bits.

Under autocast a CNN's graph casts each frozen f32 weight to bf16 (or f16), convolves, and then
normalizes with f32 statistics. Eager rounds the weight, the convolution's output and the
normalized output; Inductor (freezing) and OpenVINO's own conversion fold the normalization into
the f32 weight first and round that once. Folding here, in f32 on the frozen tensors, makes
ResNet-50 under autocast closer to f32 than eager's autocast instead of further, and leaves the
plugin one convolution with a bias to fuse.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from fxvino.utils.batch_norm import scale_and_shift
from fxvino.utils.dtypes import SIXTEEN_BIT_FLOATS
from fxvino.utils.fx import fetch_attr

aten = torch.ops.aten


def fold_batch_norms(gm: torch.fx.GraphModule) -> int:
    """Fold each ``_native_batch_norm_legit_no_training`` with frozen statistics into the
    convolution it reads, when that convolution takes a frozen weight cast to 16 bits; returns
    how many were folded."""
    folded = 0
    for bn in list(gm.graph.find_nodes(op="call_function", target=aten._native_batch_norm_legit_no_training.default)):
        plan = _plan(gm, bn)
        if plan is None:
            continue
        conv, conv_weight, conv_bias, dtype = plan
        statistics = (None if a is None else fetch_attr(gm, a.target) for a in bn.args[1:5])
        scale, shift = scale_and_shift(*statistics, bn.args[6])
        new_weight = conv_weight.float() * scale.view(-1, *[1] * (conv_weight.dim() - 1))
        new_bias = shift if conv_bias is None else conv_bias.float() * scale + shift
        args = list(conv.args)
        with gm.graph.inserting_before(conv):
            args[1] = _attr(gm, f"_fxvino_bn_weight_{folded}", new_weight.to(dtype), conv.args[1])
            args[2] = _attr(gm, f"_fxvino_bn_bias_{folded}", new_bias.to(dtype), conv.args[2] or conv.args[1])
        conv.args = tuple(args)
        for getitem in list(bn.users):
            getitem.replace_all_uses_with(conv)
            gm.graph.erase_node(getitem)
        gm.graph.erase_node(bn)
        folded += 1
    if folded:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return folded


def _plan(gm: torch.fx.GraphModule, bn: torch.fx.Node) -> tuple | None:
    """(convolution, its f32 weight, its f32 bias or None, the 16-bit type), or None when ``bn``
    is not a frozen normalization of such a convolution's only use."""
    conv = bn.args[0]
    if not (isinstance(conv, torch.fx.Node) and conv.target is aten.convolution.default) or len(conv.users) != 1:
        return None
    if conv.args[6]:  # transposed: its weight's output channels are not the first dimension
        return None
    if any(a is not None and a.op != "get_attr" for a in bn.args[1:5]) or bn.args[3] is None or bn.args[4] is None:
        return None
    if any(u.target is not operator.getitem or u.args[1] != 0 for u in bn.users):
        return None
    weight, dtype = _cast_of_frozen(gm, conv.args[1])
    if weight is None or dtype not in SIXTEEN_BIT_FLOATS:
        return None
    bias = None
    if conv.args[2] is not None:
        bias, bias_dtype = _cast_of_frozen(gm, conv.args[2])
        if bias is None or bias_dtype != dtype:
            return None
    return conv, weight, bias, dtype


def _cast_of_frozen(gm: torch.fx.GraphModule, node: torch.fx.Node) -> tuple[torch.Tensor | None, torch.dtype | None]:
    """For ``_to_copy(frozen f32 tensor, dtype=d)`` used only once: (the f32 tensor, d)."""
    if not (isinstance(node, torch.fx.Node) and node.target is aten._to_copy.default) or len(node.users) != 1:
        return None, None
    source = node.args[0]
    if not isinstance(source, torch.fx.Node) or source.op != "get_attr":
        return None, None
    value = fetch_attr(gm, source.target)
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float32 or set(node.kwargs) - {"dtype"}:
        return None, None
    return value, node.kwargs.get("dtype")


def _attr(gm: torch.fx.GraphModule, name: str, value: torch.Tensor, like: torch.fx.Node) -> torch.fx.Node:
    """A frozen ``value`` as a get_attr node, its meta a fake tensor of ``like``'s kind."""
    gm.register_buffer(name, value.detach().contiguous(), persistent=False)
    attr = gm.graph.get_attr(name)
    attr.meta = dict(like.meta)
    fake = like.meta.get("val")
    if isinstance(fake, torch.Tensor) and tuple(fake.shape) != tuple(value.shape):
        attr.meta["val"] = fake.new_empty(value.shape, dtype=value.dtype)
    return attr
