"""Symbolic-int arithmetic and tuple access: shapes computed in-graph as i64 scalars."""

from __future__ import annotations

import operator

import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


@lowers(operator.getitem)
def getitem(ctx, node, seq, i):
    return seq[i]


@lowers(aten.sym_size.int)
def sym_size(ctx, node, x, d):
    return h.dim(x, d)


@lowers(aten.sym_numel.default)
def sym_numel(ctx, node, x):
    return ops.reduce_prod(h.shape_of(x), h.const(0, torch.int64), False).output(0)


def _symint(node: torch.fx.Node) -> str | None:
    return None if isinstance(h.meta(node), (int, torch.SymInt)) else "only integer shape arithmetic is lowered"


def _ints(a, b):
    return h.cast(a, torch.int64), h.cast(b, torch.int64)


@lowers(operator.add, validator=_symint)
def sym_add(ctx, node, a, b):
    return ops.add(*_ints(a, b)).output(0)


@lowers(operator.sub, validator=_symint)
def sym_sub(ctx, node, a, b):
    return ops.subtract(*_ints(a, b)).output(0)


@lowers(operator.mul, validator=_symint)
def sym_mul(ctx, node, a, b):
    return ops.multiply(*_ints(a, b)).output(0)


@lowers(operator.floordiv, validator=_symint)
def sym_floordiv(ctx, node, a, b):
    return h.floor_div(*_ints(a, b))


@lowers(operator.mod, validator=_symint)
def sym_mod(ctx, node, a, b):
    return ops.floor_mod(*_ints(a, b)).output(0)


@lowers(operator.neg, validator=_symint)
def sym_neg(ctx, node, a):
    return ops.negative(h.cast(a, torch.int64)).output(0)
