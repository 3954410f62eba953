"""Matrix products: MatMul with constant weights is what the CPU plugin turns into FullyConnected."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.devices import cpu_features
from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers
from fxvino.lowering.rounding import op_operand, op_result, opmath_operands
from fxvino.utils.dtypes import ov_type

aten = torch.ops.aten


# Up to this many batches, addbmm adds the per-batch products one after another, as ATen does.
_ADDBMM_UNROLL = 64


def _scaled(ctx, x, factor):
    """``x * factor`` in ``x``'s type (``x`` itself for 1). ATen's 16-bit GEMMs apply alpha and
    beta in f32 and round once: where the device computes the type in f32, a factor the type does
    not hold multiplies in f32 (f16 ``addmm(..., alpha=0.3)`` by an f16 0.3 was 1,108 of 4,096
    values off eager's). With bf16 kernels the bf16 product is rounded before any factor anyway."""
    if factor == 1:
        return x
    dtype = h.dtype_of(x)
    if dtype in ctx.widened and not h.holds(dtype, factor):
        return op_result(ops.multiply(op_operand(x), op_operand(factor)).output(0), dtype)
    return ops.multiply(x, h.const(factor, dtype)).output(0)


def _unflattened(a: ov.Output) -> ov.Output | None:
    """The N-d tensor (N >= 3) a 2-D ``a`` is a flattening of (``[..., K] -> [-1, K]``), or None.

    ``nn.Linear`` reaches the graph as view -> mm -> view. Multiplying the N-d tensor directly
    keeps the product N-d, so the two views cancel. That is the shape the CPU plugin's
    transformer fusions match: on AMX, Llama's gate/up/down products and SiLU become one LLMMLP
    kernel only over a rank-3 MatMul.
    """
    node = a.get_node()
    if node.get_type_name() != "Reshape":
        return None
    src = node.input_value(0)
    if src.get_partial_shape().rank.is_dynamic or h.rank(src) < 3:
        return None
    k = h.static_shape(src)[-1]
    return src if k is not None and k == h.static_shape(a)[1] else None


def _as_2d(prod: ov.Output, n: int) -> ov.Output:
    """An N-d product (from :func:`_unflattened`) as the 2-D result ``mm`` promises."""
    return prod if h.rank(prod) == 2 else h.reshape(prod, [-1, n])


def flattened_product(x: ov.Output) -> ov.Output | None:
    """The N-d product that :func:`_as_2d` flattened into ``x`` (``mm``'s or ``addmm``'s lowered
    value), or None: the view that unflattens it again can return the product itself."""
    reshape = x.get_node()
    if reshape.get_type_name() != "Reshape":
        return None
    product = reshape.input_value(0)
    if product.get_node().get_type_name() not in ("MatMul", "Add") or product.get_partial_shape().rank.is_dynamic:
        return None
    return product if h.rank(product) > 2 else None


def _plain_b_is_slow() -> bool:
    """True on CPUs without AVX-512, where the CPU plugin's MatMul (brgemm_avx2) is slow over a
    right operand stored [K, N] and fast over one stored [N, K].

    Measured on a 2-core AVX2 EPYC, f32, operands computed at run time (training graphs):
    [1024, 768] @ [768, 3072] 68 ms, and 41 ms with the right operand transposed in memory first;
    a weight gradient ``dy.t() @ x`` over 1024 rows 100 ms, 55 ms so. MKL takes 35 ms.
    """
    features = cpu_features()
    return "avx2" in features and "avx512f" not in features


def _from_constants(x: ov.Output, depth: int = 4) -> bool:
    """Whether ``x`` is computed from constants alone (looked at ``depth`` nodes deep)."""
    node = x.get_node()
    if node.get_type_name() == "Constant":
        return True
    if depth == 0 or node.get_input_size() == 0:
        return False
    return all(_from_constants(node.input_value(i), depth - 1) for i in range(node.get_input_size()))


def _k_contiguous(a: ov.Output, b: ov.Output) -> ov.Output | None:
    """``a @ b`` over a copy of ``b`` transposed in memory, where that pays (see
    :func:`_plain_b_is_slow`): a 2-D ``b`` computed at run time, at least 512 rows in the
    product and 256 in the other dims (below, the copy costs what it saves). The copy is a
    Transpose behind an Unsqueeze: a Transpose feeding the MatMul directly would be folded back
    into ``transpose_b`` by the plugin, which reads the same bytes the slow way."""
    if not _plain_b_is_slow() or h.rank(a) != 2 or h.rank(b) != 2:
        return None
    if _from_constants(b):
        return None  # constant weights, decompressed ones too: FullyConnected packs them
    # A Transpose ``b`` is copied too: a backward's ``dy @ t(t(w))`` reads ``w`` [K, N] as it is,
    # and where ``b`` is ``w.t()`` of a run-time ``w`` [N, K] the plugin cancels the two transposes.
    rows, inner = h.static_shape(a)
    _, cols = h.static_shape(b)
    if rows is None or inner is None or cols is None or rows < 512 or inner < 256 or cols < 256:
        return None
    copy = h.unsqueeze(h.transpose(b, [1, 0]), 0)
    return h.squeeze(ops.matmul(a, copy, False, True).output(0), 0)


def _matmul(a: ov.Output, b: ov.Output) -> ov.Output:
    """``a @ b``, with a constant 2-D ``b`` stored the way FullyConnected reads it.

    The CPU plugin makes a MatMul whose right operand is a constant [K, N] matrix into
    FullyConnected over [N, K] weights behind a Transpose it does not fold, so the weights
    would be transposed on every call (GPT-2's Conv1D layers: 48 such Transposes per call).
    Transposing the data once here, with ``transpose_b``, hands it the weights it wants.
    """
    node = b.get_node()
    transposed = _k_contiguous(a, b)
    if transposed is not None:
        return transposed
    if h.rank(a) == 2 and h.rank(b) == 2 and h.static_shape(b)[1] is not None:
        a = _unflattened(a) or a
    if node.get_type_name() == "Constant" and h.rank(b) == 2:
        data = node.get_data().T  # a view of the constant's bytes (bf16 shows as float16 bits)
        owned = ov.Tensor(b.get_element_type(), ov.Shape(list(data.shape)))  # Constant will not copy
        np.copyto(owned.data, data)
        weights = ops.constant(owned).output(0)
        return ops.matmul(a, weights, False, True).output(0)
    if node.get_type_name() == "Transpose" and h.rank(b) == 2:  # x @ w.t(): read w as transpose_b
        order = node.input_value(1).get_node()
        if order.get_type_name() == "Constant" and list(order.get_data()) == [1, 0]:
            return ops.matmul(a, node.input_value(0), False, True).output(0)
    return ops.matmul(a, b, False, False).output(0)


def _zeros_if_empty(node: torch.fx.Node, a: ov.Output, b: ov.Output) -> ov.Output | None:
    """Zeros of the product's shape when an operand has no elements (static), else None.

    OpenVINO's compile fails on MatMul/FullyConnected over a zero-size operand (a zero batch
    through ``nn.Linear``); torch gives an empty result, or zeros when the inner dim is 0.
    """
    if 0 not in h.static_shape(a) and 0 not in h.static_shape(b):
        return None
    shape = list(h.meta(node).shape)
    if not all(isinstance(d, int) for d in shape):
        return None
    return ops.broadcast(h.const(0, h.out_dtype(node)), h.const(shape, torch.int64)).output(0)


@lowers(aten.mm.default, aten.bmm.default, aten.matmul.default)
def mm(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    empty = _zeros_if_empty(node, a, b)
    if empty is not None:
        return empty
    prod = _matmul(a, b)
    return prod if h.rank(a) != 2 else _as_2d(prod, h.static_shape(b)[-1])


@lowers(aten.addmm.default, aten.baddbmm.default)
def addmm(ctx, node, bias, a, b, *, beta=1, alpha=1):
    bias, a, b = h.to_out(node, bias, a, b)
    empty = _zeros_if_empty(node, a, b)
    if empty is not None and 0 in h.static_shape(empty):
        return empty
    prod = empty if empty is not None else _scaled(ctx, _matmul(a, b), alpha)
    n = h.static_shape(b)[-1]
    if beta != 0:  # a row bias joins an N-d product before it is flattened: FullyConnected takes both
        bias = _scaled(ctx, bias, beta)
        if h.rank(prod) > 2 and h.rank(bias) == 2 and h.static_shape(bias)[0] != 1:
            prod = _as_2d(prod, n)  # a full [M, N] bias adds to the 2-D product
        prod = ops.add(prod, bias).output(0)
    return prod if h.rank(a) != 2 else _as_2d(prod, n)


@lowers(aten.addbmm.default)
def addbmm(ctx, node, bias, b1, b2, *, beta=1, alpha=1):
    """``beta * bias + alpha * sum_i b1[i] @ b2[i]``, summed in ATen's order: the scaled bias,
    then each batch's product in turn (one batched MatMul makes them). 16-bit types compute each
    step in f32 and round the sum to the type, as ATen adds each product into the 16-bit result
    (rounded once, 410 of 1,024 f16 values were off eager's). Beyond :data:`_ADDBMM_UNROLL`
    batches, or a dynamic count, the batch joins the inner dimension: one product
    ``[n, B*m] @ [B*m, p]``, rounded in another order (and once)."""
    out = h.out_dtype(node)
    compute = h.opmath_dtype(out)
    bias, b1, b2 = opmath_operands(node, *h.to_out(node, bias, b1, b2))
    empty = _zeros_if_empty(node, b1, b2)
    batches = h.static_shape(b1)[0]
    if empty is not None:
        prods = [h.cast(empty, compute)]
    elif batches is not None and batches <= _ADDBMM_UNROLL:
        each = ops.split(ops.matmul(b1, b2, False, False), h.const(0, torch.int64), batches)
        prods = [_scaled(ctx, h.squeeze(each.output(i), 0), alpha) for i in range(batches)]
    else:
        rows = h.reshape(h.transpose(b1, [1, 0, 2]), [h.dim(b1, 1), -1])
        cols = h.static_shape(b2)[2] or h.dim(b2, 2)
        prods = [_as_2d(_scaled(ctx, _matmul(rows, h.reshape(b2, [-1, cols])), alpha), cols)]
    acc = None if beta == 0 else _scaled(ctx, bias, beta)  # torch ignores the bias at 0, NaN included
    for i, prod in enumerate(prods):
        acc = prod if acc is None else ops.add(acc, prod).output(0)
        if compute != out and i < len(prods) - 1:  # each step's sum is observed, as ATen's 16-bit result
            acc = h.cast(h.cast(acc, out), compute)
    return h.cast(acc, out)


@lowers(aten._trilinear.default)
def trilinear(ctx, node, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """``_trilinear`` (``nn.Bilinear``'s product): each input spans the dims it is not expanded
    along, and their product is summed over ``sumdim``. As an Einsum the plugin makes it
    MatMuls, never the full product tensor (``[N, out, in1, in2]`` for a Bilinear layer)."""
    total = h.rank(i1) + len(expand1)
    letters = "abcdefghijklmnopqrstuvwxyz"[:total]
    terms = ["".join(letters[d] for d in range(total) if d not in expand) for expand in (expand1, expand2, expand3)]
    kept = [d for d in range(total) if d not in sumdim]
    spanned = [d for d in kept if any(letters[d] in t for t in terms)]
    out = ops.einsum(list(h.to_out(node, i1, i2, i3)), f"{','.join(terms)}->{''.join(letters[d] for d in spanned)}")
    out = out.output(0)
    missing = [i for i, d in enumerate(kept) if d not in spanned]  # expanded in all three, kept as size 1
    return h.unsqueeze(out, missing) if missing else out


@lowers(aten.dot.default, aten.vdot.default)
def dot(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    return ops.reduce_sum(ops.multiply(a, b), h.const([0], torch.int64), False).output(0)


@lowers(aten.mv.default)
def mv(ctx, node, a, b):
    a, b = h.to_out(node, a, b)
    return ops.matmul(a, b, False, False).output(0)


@lowers(aten.addmv.default)
def addmv(ctx, node, bias, mat, vec, *, beta=1, alpha=1):
    bias, mat, vec = h.to_out(node, bias, mat, vec)
    prod = _scaled(ctx, ops.matmul(mat, vec, False, False).output(0), alpha)
    if beta == 0:
        return prod
    return ops.add(prod, _scaled(ctx, bias, beta)).output(0)


def _p_norm(diff, p: float, axis: int):
    """The p-norm of ``diff`` over ``axis`` (p = 0 counts non-zeros, inf is the max)."""
    dtype = h.dtype_of(diff)
    axes = h.const([axis], torch.int64)
    a = ops.abs(diff)
    if p == 0:
        return ops.reduce_sum(ops.convert(ops.not_equal(a, h.const(0, dtype)), ov_type(dtype)), axes, False).output(0)
    if p == float("inf"):
        return h.reduce_extreme(a.output(0), axes, True, False)
    if p == 1:
        return ops.reduce_sum(a, axes, False).output(0)
    if p == 2:
        return ops.sqrt(ops.reduce_sum(ops.multiply(a, a), axes, False)).output(0)
    powered = ops.reduce_sum(ops.power(a, h.const(p, dtype)), axes, False)
    return ops.power(powered, h.const(1.0 / p, dtype)).output(0)


@lowers(aten._cdist_forward.default)
def cdist(ctx, node, x1, x2, p, compute_mode=None):
    # [..., P, M] and [..., R, M] -> [..., P, R]; the exact pairwise difference (no mm trick),
    # so results match torch's direct computation.
    r = h.rank(x1)
    diff = ops.subtract(h.unsqueeze(x1, r - 1), h.unsqueeze(x2, r - 2)).output(0)
    return _p_norm(diff, float(p), r)


def _static_rows(node: torch.fx.Node) -> str | None:
    return None if isinstance(h.meta(node.args[0]).shape[0], int) else "needs a static number of rows"


@lowers(aten._pdist_forward.default, validator=_static_rows)
def pdist(ctx, node, x, p=2.0):
    n = h.static_shape(x)[0]
    rows, cols = np.triu_indices(n, 1)
    a = ops.gather(x, h.const(rows.astype(np.int64), torch.int64), h.const(0, torch.int64))
    b = ops.gather(x, h.const(cols.astype(np.int64), torch.int64), h.const(0, torch.int64))
    return _p_norm(ops.subtract(a, b).output(0), float(p), 1)
