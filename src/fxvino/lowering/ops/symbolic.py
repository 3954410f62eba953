"""Symbolic-int arithmetic and tuple access: shapes computed in-graph as i64 scalars."""

from __future__ import annotations

import math
import operator

import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering import views
from fxvino.lowering.ops.elementwise import float_to_int64
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


@lowers(operator.getitem)
def getitem(ctx, node, seq, i):
    return seq[i]


@lowers(aten.sym_size.int)
def sym_size(ctx, node, x, d):
    """A size that is one of the inputs' symbols is read where the inputs have it.

    Graphs read sizes off whatever tensor is at hand (transformers takes the batch from the
    attention mask); reading each symbol off one input makes equal sizes one value, and keeps
    every size computable once a tool removes an input the size was read from (OpenVINO's
    paged-attention conversion drops the attention mask).
    """
    known = ctx.symbols.get(h.sym_key(h.meta(node)))
    return known if known is not None else h.dim(x, d)


@lowers(aten.sym_numel.default)
def sym_numel(ctx, node, x):
    return ops.reduce_prod(h.shape_of(x), h.const(0, torch.int64), False).output(0)


def _known_offset(node: torch.fx.Node) -> str | None:
    if isinstance(h.meta(node), int):
        return None
    found = views.view_chain(node.args[0])
    if found is None or not isinstance(h.meta(found[0]).storage_offset(), int):
        return "a data-dependent storage offset of something other than a chain of slices and views"
    return None


@lowers(aten.sym_storage_offset.default, validator=_known_offset)
def sym_storage_offset(ctx, node, x):
    """Where a view starts in its base's storage: eager's value when the fake tensor knows it (0
    for fresh tensors, the slice start for views), else computed along the view chain (views.py)."""
    if isinstance(h.meta(node), int):
        return h.const(h.meta(node), torch.int64)
    base, chain = views.view_chain(node.args[0])
    rel = views.relative_offset(ctx.env, chain)
    return ops.add(rel, h.const(h.meta(base).storage_offset(), torch.int64)).output(0)


def _symnum(node: torch.fx.Node) -> str | None:
    """Shape arithmetic only: Python/symbolic ints and floats, never tensors."""
    ok = isinstance(h.meta(node), (int, float, torch.SymInt, torch.SymFloat)) and not isinstance(h.meta(node), bool)
    return None if ok else "only integer/float shape arithmetic is lowered"


def _kind(node: torch.fx.Node) -> torch.dtype:
    """i64 for symbolic ints, f64 for symbolic floats (Python's float is a double)."""
    return torch.float64 if isinstance(h.meta(node), (float, torch.SymFloat)) else torch.int64


def _nums(node: torch.fx.Node, *values):
    dtype = _kind(node)
    return [h.cast(v, dtype) for v in values]


@lowers(operator.add, validator=_symnum)
def sym_add(ctx, node, a, b):
    return ops.add(*_nums(node, a, b)).output(0)


@lowers(operator.sub, validator=_symnum)
def sym_sub(ctx, node, a, b):
    return ops.subtract(*_nums(node, a, b)).output(0)


@lowers(operator.mul, validator=_symnum)
def sym_mul(ctx, node, a, b):
    return ops.multiply(*_nums(node, a, b)).output(0)


@lowers(operator.floordiv, validator=_symnum)
def sym_floordiv(ctx, node, a, b):
    if _kind(node) == torch.float64:
        return ops.floor(ops.divide(*_nums(node, a, b))).output(0)
    return h.floor_div(*_nums(node, a, b))


@lowers(operator.mod, validator=_symnum)
def sym_mod(ctx, node, a, b):
    return h.floor_mod(*_nums(node, a, b))


@lowers(operator.neg, validator=_symnum)
def sym_neg(ctx, node, a):
    return ops.negative(*_nums(node, a)).output(0)


# Float shape arithmetic: upsample/interpolate with a scale or a target size, ``n / 3``...


@lowers(operator.truediv, validator=_symnum)
def sym_truediv(ctx, node, a, b):
    return ops.divide(h.cast(a, torch.float64), h.cast(b, torch.float64)).output(0)


@lowers(operator.pow, validator=_symnum)
def sym_pow(ctx, node, a, b):
    return ops.power(*_nums(node, a, b)).output(0)


@lowers(torch.sym_float, validator=_symnum)
def sym_float(ctx, node, a):
    return h.cast(a, torch.float64)


@lowers(torch.sym_sum, validator=_symnum)
def sym_sum(ctx, node, values):
    # Dynamo emits it for sums of several sizes (e.g. a slice's length with a symbolic start).
    dtype = _kind(node)
    total = h.cast(values[0], dtype)
    for v in values[1:]:
        total = ops.add(total, h.cast(v, dtype)).output(0)
    return total


@lowers(torch.sym_max, validator=_symnum)
def sym_max(ctx, node, a, b):
    return ops.maximum(*_nums(node, a, b)).output(0)


@lowers(torch.sym_min, validator=_symnum)
def sym_min(ctx, node, a, b):
    return ops.minimum(*_nums(node, a, b)).output(0)


@lowers(math.floor, validator=_symnum)
def sym_floor(ctx, node, a):
    return h.cast(ops.floor(h.cast(a, torch.float64)).output(0), torch.int64)


@lowers(math.ceil, validator=_symnum)
def sym_ceil(ctx, node, a):
    return h.cast(ops.ceiling(h.cast(a, torch.float64)).output(0), torch.int64)


@lowers(math.trunc, torch.sym_int, validator=_symnum)
def sym_trunc(ctx, node, a):
    # Convert's float-to-int rounding is not specified: truncate explicitly first.
    x = h.cast(a, torch.float64)
    return h.cast(ops.multiply(ops.sign(x), ops.floor(ops.abs(x))).output(0), torch.int64)


# With symbolic sizes, AOTAutograd's ``tensorify_python_scalars`` pass rewrites SymFloat
# arithmetic (``sym_float(s) / (2.0 * sym_float(s))`` in upsample's scale, for instance) into
# 0-d tensor ops. These two overloads appear only there: without them such graphs split into
# several partitions around PyTorch nodes. Static graphs never contain them (the arithmetic is
# folded to Python floats), which is why they live with the shape arithmetic.
@lowers(torch.ops.prims.convert_element_type.default)
def convert_element_type(ctx, node, x, dtype):
    return float_to_int64(ctx, node, x)


@lowers(aten.true_divide.Tensor)
def true_divide(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    return ops.divide(a, b).output(0)
