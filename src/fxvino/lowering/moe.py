"""Mixture-of-experts routing as transformers 5 writes it: ``histc`` counts and grouped matmuls.

transformers' experts layers sort tokens by expert, count them with ``torch.histc`` and multiply
each run of rows by its expert's weights with ``transformers.grouped_mm_fallback`` (a custom op
whose eager kernel loops over experts). On OpenVINO the grouped product multiplies every row by
every expert in one MatMul and keeps, per row, the expert its position falls in: E times the
arithmetic of the loop, but one fused kernel and no data-dependent shapes, which is what a small
expert count (4-8) and short sequences want.

Training goes through the op's backward, ``transformers.grouped_mm_fallback_backward`` (another
custom op, so autograd never looks into the loop): lowered the same way, it keeps an MoE model's
backward on OpenVINO, where it once left every expert's gradient products to PyTorch.
"""

from __future__ import annotations

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers, lowers_named

aten = torch.ops.aten


def _histc_ok(node: torch.fx.Node) -> str | None:
    args = list(node.args) + [None] * 4
    lo, hi = node.kwargs.get("min", args[2] or 0), node.kwargs.get("max", args[3] or 0)
    if lo == hi:
        return "histc with min == max takes its range from the data"
    return None


@lowers(aten.histc.default, validator=_histc_ok)
def histc(ctx, node, x, bins=100, min=0, max=0):  # noqa: A002 - the schema's names
    """Counts in ``bins`` equal bins over [min, max]; values outside are dropped, max joins the last."""
    dtype = h.out_dtype(node)
    x = h.reshape(h.cast(x, torch.float32), [-1])
    lo, hi = float(min), float(max)
    scaled = ops.multiply(ops.subtract(x, h.const(lo, torch.float32)), h.const(bins / (hi - lo), torch.float32))
    index = ops.minimum(h.cast(ops.floor(scaled).output(0), torch.int64), h.const(bins - 1, torch.int64))
    inside = ops.logical_and(
        ops.greater_equal(x, h.const(lo, torch.float32)), ops.less_equal(x, h.const(hi, torch.float32))
    )
    hits = ops.equal(h.unsqueeze(index.output(0), 1), h.unsqueeze(h.arange(bins), 0))  # [N, bins]
    counted = ops.logical_and(hits, h.unsqueeze(inside.output(0), 1))
    return h.cast(
        ops.reduce_sum(h.cast(counted.output(0), torch.float32), h.const([0], torch.int64), False).output(0), dtype
    )


def _expert_of_rows(offs: ov.Output, rows: ov.Output, experts: ov.Output) -> tuple[ov.Output, ov.Output]:
    """Per row of ``rows`` (its indices), the run (cumulative ends ``offs``) it falls in, clipped to a
    valid expert, and whether it falls in any run at all (rows past the last end do not)."""
    offs = h.cast(offs, torch.int64)
    expert = ops.reduce_sum(
        h.cast(ops.less_equal(h.unsqueeze(offs, 0), h.unsqueeze(rows, 1)).output(0), torch.int64),
        h.const([1], torch.int64),
        False,
    ).output(0)  # [S]: how many runs end at or before the row
    valid = ops.less(expert, experts).output(0)
    return ops.minimum(expert, ops.subtract(experts, h.const(1, torch.int64))).output(0), valid


def _grouped_product(x: ov.Output, side_by_side: ov.Output, experts: ov.Output, offs: ov.Output) -> ov.Output:
    """Row ``s`` of ``x`` [S, K] times its run's expert block of ``side_by_side`` [K, E*N] (the E
    matrices side by side); zero for rows past the last run.

    One [S, K] x [K, E*N] product, not a batch-broadcast [1, S, K] x [E, K, N] MatMul, which the CPU
    plugin rejects once S is dynamic ("Can not clone with new dims")."""
    expert, valid = _expert_of_rows(offs, h.arange(h.dim(x, 0)), experts)
    every = h.reshape(ops.matmul(x, side_by_side, False, False).output(0), [h.dim(x, 0), experts, -1])  # [S, E, N]
    mine = ops.gather(every, expert, h.const(1, torch.int64), 1).output(0)  # [S, N]
    return ops.select(h.unsqueeze(valid, 1), mine, h.cast_like(h.const(0, torch.float32), mine)).output(0)


@lowers_named("transformers.grouped_mm_fallback.default")
def grouped_mm(ctx, node, x, weight, offs):
    """Row ``s`` of ``x`` [S, K] times ``weight[e]`` [K, N], where ``e`` is the run (cumulative
    ends ``offs``) it falls in; rows past the last end stay zero, as in the eager loop."""
    side_by_side = h.reshape(h.transpose(weight, [1, 0, 2]), [h.dim(weight, 1), -1])  # [K, E*N]
    return _grouped_product(x, side_by_side, h.dim(weight, 0), offs)


@lowers_named("transformers.grouped_mm_fallback_backward.default")
def grouped_mm_backward(ctx, node, x, weight, offs, grad):
    """Gradients of :func:`grouped_mm` as transformers' backward op computes them: ``grad_x[s] =
    grad[s] @ weight[e]^T`` (zero past the last run) and ``grad_weight[e] = x[run e]^T @ grad[run e]``.

    The weight gradient is one [E*K, S] x [S, N] product of ``x`` spread into its expert's block of
    E*K columns (zeros elsewhere, and for rows past the last run) with ``grad``: E times the
    arithmetic of the eager loop, as in the forward, but one MatMul and no data-dependent shapes.
    Training an MoE model otherwise left this op, and so the backward's expert products, to PyTorch."""
    experts = h.dim(weight, 0)
    used = h.used_outputs(node)
    grad_x = grad_weight = None
    if 0 in used:
        side_by_side = h.reshape(h.transpose(weight, [2, 0, 1]), [h.dim(weight, 2), -1])  # [N, E*K]
        grad_x = h.cast_like(_grouped_product(grad, side_by_side, experts, offs), x)
    if 1 in used:
        expert, valid = _expert_of_rows(offs, h.arange(h.dim(x, 0)), experts)
        mine = ops.logical_and(
            ops.equal(h.unsqueeze(expert, 1), h.unsqueeze(h.arange(experts), 0)), h.unsqueeze(valid, 1)
        )  # [S, E]
        spread = ops.multiply(h.unsqueeze(x, 1), h.unsqueeze(h.cast_like(mine.output(0), x), 2))  # [S, E, K]
        flat = h.reshape(spread.output(0), [h.dim(x, 0), -1])  # [S, E*K]
        product = ops.matmul(flat, h.cast_like(grad, x), True, False).output(0)  # [E*K, N]
        grad_weight = h.cast_like(ops.reshape(product, h.shape_of(weight), False).output(0), weight)
    return grad_x, grad_weight
