"""Matrix products: MatMul with constant weights is what the CPU plugin turns into FullyConnected."""

from __future__ import annotations

import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


def _scaled(node, x, factor):
    if factor == 1:
        return x
    return ops.multiply(x, h.const(factor, h.out_dtype(node))).output(0)


@lowers(aten.mm.default, aten.bmm.default, aten.matmul.default)
def mm(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    return ops.matmul(a, b, False, False).output(0)


@lowers(aten.addmm.default, aten.baddbmm.default)
def addmm(ctx, node, bias, a, b, *, beta=1, alpha=1):
    bias, a, b = h.to_out(node, bias, a, b)
    prod = _scaled(node, ops.matmul(a, b, False, False).output(0), alpha)
    if beta == 0:
        return prod
    return ops.add(prod, _scaled(node, bias, beta)).output(0)


@lowers(aten.dot.default, aten.vdot.default)
def dot(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    return ops.reduce_sum(ops.multiply(a, b), h.const([0], torch.int64), False).output(0)


@lowers(aten.mv.default)
def mv(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    return ops.matmul(a, b, False, False).output(0)
