"""Mixture-of-experts routing as transformers 5 writes it: ``histc`` counts and grouped matmuls.

transformers' experts layers sort tokens by expert, count them with ``torch.histc`` and multiply
each run of rows by its expert's weights with ``transformers.grouped_mm_fallback`` (a custom op
whose eager kernel loops over experts). On OpenVINO the runs become an [E, C] grid (C: the longest
run, a size computed in the graph): the rows are gathered into it, multiplied by their experts'
weights in one batched MatMul and gathered back. C follows the routing, but only as a dynamic
dimension inside the compiled model: one model serves every routing, with no recompile and no
value read back to Python. A product costs E * C rows: about the eager loop's S when the router
spreads tokens evenly, E * S at worst (every token on one expert). The first version multiplied
every row by every expert in one [S, K] x [K, E*N] MatMul and kept each row's own, E times the
loop's arithmetic always (8 experts, 1024 rows spread evenly, K = 768, N = 1536, 2 threads on a
shared AMX Xeon: 248 ms against the loop's 72; the grid takes 31, its backward 60 against the
loop's 160).

Training goes through the op's backward, ``transformers.grouped_mm_fallback_backward`` (another
custom op, so autograd never looks into the loop): lowered on the same grid, it keeps an MoE
model's backward on OpenVINO, where it once left every expert's gradient products to PyTorch.
With bf16 weights transformers calls PyTorch's ``aten._grouped_mm`` instead (its compiled path
takes bf16 only), whose backward is ``_grouped_mm`` again; that too runs on the grid, where before
a bf16 MoE model's experts ran in PyTorch in inference and training alike.
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


class _Groups:
    """The runs of rows (cumulative ends ``offs``, one run per expert) laid out as an [E, C] grid:
    C = the longest run (at least 1), ``index[e, c]`` the row at position ``c`` of run ``e`` and
    ``valid[e, c]`` whether the run has that many rows. Gathering rows by ``index`` gives every
    expert its rows as one batch of a batched MatMul, so a product costs E * C rows, about the S
    rows of the eager loop when the router spreads tokens evenly and never more than E * S."""

    def __init__(self, offs: ov.Output, rows: ov.Output):
        self.rows = rows  # S, an i64 scalar
        ends = h.cast(offs, torch.int64)
        zero = h.const([0], torch.int64)
        starts = ops.slice(ops.concat([zero, ends], 0), zero, h.const([-1], torch.int64), h.const([1], torch.int64))
        self.starts = starts.output(0)
        self.counts = ops.subtract(ends, self.starts).output(0)
        longest = ops.reduce_max(self.counts, h.const([0], torch.int64), False)
        self.longest = ops.maximum(longest, h.const(1, torch.int64)).output(0)  # C
        position = h.unsqueeze(h.arange(self.longest), 0)  # [1, C]
        self.valid = ops.less(position, h.unsqueeze(self.counts, 1)).output(0)  # [E, C]
        index = ops.add(h.unsqueeze(self.starts, 1), position)
        self.index = ops.select(self.valid, index, h.const(0, torch.int64)).output(0)  # [E, C]

    def gather(self, x: ov.Output) -> ov.Output:
        """Rows of ``x`` [S, K] per run, [E, C, K], zero where a run is shorter than C."""
        rows = ops.gather(x, self.index, h.const(0, torch.int64)).output(0)
        return ops.select(h.unsqueeze(self.valid, 2), rows, h.cast_like(h.const(0, torch.float32), rows)).output(0)

    def scatter(self, grouped: ov.Output) -> ov.Output:
        """[E, C, N] per run back to rows, [S, N], by gathering each row's own (run, position);
        rows past the last run are zero, as the eager loop leaves them."""
        offs = ops.add(self.starts, self.counts)
        row = h.arange(self.rows)
        expert = ops.reduce_sum(
            h.cast(ops.less_equal(h.unsqueeze(offs, 0), h.unsqueeze(row, 1)).output(0), torch.int64),
            h.const([1], torch.int64),
            False,
        ).output(0)  # [S]: how many runs end at or before the row, its run if it is in one
        experts = h.dim(self.counts, 0)
        inside = ops.less(expert, experts).output(0)
        expert = ops.minimum(expert, ops.subtract(experts, h.const(1, torch.int64))).output(0)
        start = ops.gather(self.starts, expert, h.const(0, torch.int64)).output(0)
        at = ops.add(ops.multiply(expert, self.longest), ops.subtract(row, start))  # flat [E * C] position
        at = ops.select(inside, at, h.const(0, torch.int64)).output(0)
        flat = h.reshape(grouped, [-1, h.dim(grouped, 2)])
        out = ops.gather(flat, at, h.const(0, torch.int64)).output(0)
        return ops.select(h.unsqueeze(inside, 1), out, h.cast_like(h.const(0, torch.float32), out)).output(0)


@lowers_named("transformers.grouped_mm_fallback.default")
def grouped_mm(ctx, node, x, weight, offs):
    """Row ``s`` of ``x`` [S, K] times ``weight[e]`` [K, N], where ``e`` is the run (cumulative
    ends ``offs``) it falls in; rows past the last end stay zero, as in the eager loop."""
    groups = _Groups(offs, h.dim(x, 0))
    return groups.scatter(ops.matmul(groups.gather(x), weight, False, False).output(0))


@lowers_named("transformers.grouped_mm_fallback_backward.default")
def grouped_mm_backward(ctx, node, x, weight, offs, grad):
    """Gradients of :func:`grouped_mm` as transformers' backward op computes them: ``grad_x[s] =
    grad[s] @ weight[e]^T`` (zero past the last run) and ``grad_weight[e] = x[run e]^T @ grad[run e]``,
    both as batched products over the runs' [E, C] grid. Training an MoE model otherwise left this
    op, and so the backward's expert products, to PyTorch."""
    groups = _Groups(offs, h.dim(x, 0))
    grad = h.cast_like(grad, x)
    grad_rows = groups.gather(grad)  # [E, C, N]
    used = h.used_outputs(node)
    grad_x = grad_weight = None
    if 0 in used:
        grad_x = groups.scatter(ops.matmul(grad_rows, h.cast_like(weight, x), False, True).output(0))
    if 1 in used:
        product = ops.matmul(groups.gather(x), grad_rows, True, False).output(0)  # [E, K, N]
        grad_weight = h.cast_like(product, weight)
    return grad_x, grad_weight


def _aten_grouped_mm_ok(node: torch.fx.Node) -> str | None:
    args = list(node.args) + [None] * 5
    offs = node.kwargs.get("offs", args[2])
    bias = node.kwargs.get("bias", args[3])
    out_dtype = node.kwargs.get("out_dtype", args[4])
    a, b = h.meta(node.args[0]), h.meta(node.args[1])
    if offs is None or bias is not None:
        return "only grouped products over offsets, without bias, are lowered"
    if out_dtype not in (None, a.dtype):
        return "an output dtype other than the inputs' is not lowered"
    if (a.dim(), b.dim()) not in ((2, 3), (2, 2)):
        return "only [S, K] x [E, K, N] and [K, S] x [S, N] grouped products are lowered"
    return None


@lowers(aten._grouped_mm.default, validator=_aten_grouped_mm_ok)
def aten_grouped_mm(ctx, node, a, b, offs=None, bias=None, out_dtype=None):
    """PyTorch's own grouped product, which transformers calls instead of its fallback op for bf16
    weights (``torch.nn.functional.grouped_mm``). [S, K] x [E, K, N] is :func:`grouped_mm` (rows
    past the last run are zero; PyTorch's kernel leaves them unwritten). Its backward's weight
    gradient is the [K, S] x [S, N] form: per run ``e``, ``a[:, run e] @ b[run e]``, [E, K, N],
    zero for an empty run as in PyTorch's kernel."""
    if h.rank(b) == 3:
        groups = _Groups(offs, h.dim(a, 0))
        return groups.scatter(ops.matmul(groups.gather(a), b, False, False).output(0))
    groups = _Groups(offs, h.dim(b, 0))
    columns = groups.gather(h.transpose(a, [1, 0]))  # [E, C, K]
    return ops.matmul(columns, groups.gather(b), True, False).output(0)
