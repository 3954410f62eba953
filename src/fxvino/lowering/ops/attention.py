"""Scaled dot-product attention onto OpenVINO's ScaledDotProductAttention (opset13).

Grouped-query and multi-query attention (fewer key/value heads than query heads, as in Llama,
Mistral, Qwen or Falcon) reach us as PyTorch's CPU flash op with short K/V; OpenVINO's op wants
equal head counts. Rather than repeat K/V per query head (a copy of the whole KV cache per
call), each group of query heads is folded into the query length of its K/V head:
``[B, Hq, L, E] -> [B, Hkv, G*L, E]``. Rows of a group attend to the same keys, so this is exact;
only the mask must follow the fold (tiled, or reshaped when it has a row per query head), and a
causal flag becomes an explicit mask because a folded row's position is ``row mod L``. Measured
on the shared 2-core CPU in f32 (32 query / 8 KV heads, head size 128, medians of interleaved runs):
a decode step over 1,024 cached positions takes 3.5-3.9 ms folded, the same within noise as 5-D
broadcasting attention (``[B, Hkv, G, L, E]`` against ``[B, Hkv, 1, S, E]``), and 11-20 ms with K/V
repeated to every head; a causal 512-token prefill takes 57-59 ms folded or repeated and 74-76 ms 5-D.

A StaticCache's decode step writes its new keys and values into the cache and attends over the
written cache: ``sdpa(q, index_put(K, pos, k), index_put(V, pos, v))``. Lowered as written, each
layer's whole cache is copied by the scatter on every token only to be read once. For a few query
rows the attention is instead computed over the cache input itself, with the written columns
patched in the small score matrix (``_over_cache_writes``); the cache input is never copied.
"""

from __future__ import annotations

import numpy as np
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.ops.shape_ops import INT64_MAX
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


def _groups(node: torch.fx.Node, first: int = 0) -> int | None:
    """Query heads per key/value head of an attention node; ``first`` is the position of the query
    among the node's arguments."""
    return _head_groups(*node.args[first : first + 2])


def _head_groups(q: torch.fx.Node, k: torch.fx.Node) -> int | None:
    """Query heads of ``q`` per head of ``k``: an int when the head counts are static or the same
    symbol (0 if they do not divide), None when only run time knows (``dynamic=True`` makes input
    head counts symbolic)."""
    hq, hk = q.meta["val"].shape[-3], k.meta["val"].shape[-3]
    if isinstance(hq, int) and isinstance(hk, int):
        return hq // hk if hq % hk == 0 else 0
    return 1 if str(hq) == str(hk) else None


def _sdpa_ok(node: torch.fx.Node, first: int = 0, dropout_at: int = 3) -> str | None:
    dropout = node.kwargs.get("dropout_p", node.args[dropout_at] if len(node.args) > dropout_at else 0.0)
    if dropout:
        # PyTorch's CPU kernel raises for it too: SDPA with dropout reaches us as the math path
        # (matmuls, softmax, native_dropout), which is lowered, mask saved for the backward.
        return "the CPU flash-attention op does not support dropout_p > 0 (PyTorch's kernel rejects it as well)"
    q, k = (a.meta.get("val") for a in node.args[first : first + 2])
    if _groups(node, first) == 0:
        return f"query heads ({q.shape[-3]}) must be a multiple of key/value heads ({k.shape[-3]})"
    mask = node.kwargs.get("attn_mask")
    if _groups(node, first) != 1 and isinstance(mask, torch.fx.Node):
        mval = mask.meta.get("val")
        mh = mval.shape[-3] if mval is not None and mval.dim() >= 3 else 1
        if not (isinstance(mh, int) and mh == 1) and str(mh) != str(q.shape[-3]):
            return f"a grouped-query attention mask needs 1 or {q.shape[-3]} heads, not {mh}"
    return None


@lowers(aten._scaled_dot_product_flash_attention_for_cpu.default, validator=_sdpa_ok)
def sdpa_flash_cpu(ctx, node, q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    if 1 in h.used_outputs(node):  # a training forward: its logsumexp is saved for the backward
        return _attention_with_logsumexp(node, q, k, v, bool(is_causal), attn_mask, scale)
    dtype = h.out_dtype(node)
    writes = _cache_writes(node)
    if writes is not None:
        groups = _head_groups(node.args[0], writes[0])
        out = _over_cache_writes(q, *(ctx.env[n] for n in writes), bool(is_causal), attn_mask, scale, groups)
        if node.kwargs.get("attn_mask") is not None:
            out = _zero_fully_masked_rows(out, ctx.env[node.kwargs["attn_mask"]])
        return (h.cast(out, dtype), None)
    groups = _groups(node)
    query = q
    if groups != 1:  # fold each group of query heads into the query length of its K/V head
        query = h.reshape(q, [h.dim(q, 0), h.dim(k, 1), -1, h.dim(q, 3)])
        if groups is None:
            groups = h.floor_div(h.dim(q, 1), h.dim(k, 1))
        attn_mask = _folded_mask(q, k, attn_mask, bool(is_causal), groups)
        is_causal = False
    args = [query, k, v]
    if attn_mask is not None:
        args.append(attn_mask if h.dtype_of(attn_mask) == torch.bool else h.cast(attn_mask, dtype))
    elif scale is not None:
        args.append(h.const(0, dtype))
    if scale is not None:
        args.append(h.const(scale, dtype))
    out = ops.scaled_dot_product_attention(*args, causal=bool(is_causal)).output(0)
    if query is not q:
        out = h.reshape(out, [h.dim(q, 0), h.dim(q, 1), h.dim(q, 2), h.dim(v, 3)])
    mask = node.kwargs.get("attn_mask")
    if mask is not None:
        out = _zero_fully_masked_rows(out, ctx.env[mask])
    return (out, None)


# Query rows up to which attention over a written cache is computed from the unwritten cache: the
# score matrix it materialises grows with the rows (a prompt keeps the fused op, where the copy of
# the cache is small beside the attention itself).
_FEW_QUERY_ROWS = 16


def _write_into_input(node: object) -> tuple[torch.fx.Node, torch.fx.Node, torch.fx.Node] | None:
    """(cache, positions, values) when ``node`` is ``index_put(cache, [None, None, positions],
    values)`` of a graph input: a plain store at 1-D positions of dim 2 (the values broadcast to
    the written rows, as index_put requires)."""
    if not isinstance(node, torch.fx.Node) or node.target is not aten.index_put.default:
        return None
    base, indices, values = node.args[:3]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    if accumulate or base.op != "placeholder" or not isinstance(values, torch.fx.Node):
        return None
    if len(indices) != 3 or indices[0] is not None or indices[1] is not None:
        return None
    pos, b, val = indices[2].meta.get("val"), base.meta.get("val"), values.meta.get("val")
    if pos is None or pos.dim() != 1 or pos.dtype not in (torch.int64, torch.int32) or b is None or val is None:
        return None
    if b.dim() != 4 or val.dim() > 4 or val.dtype != b.dtype:
        return None
    return base, indices[2], values


def _unrepeated(node: torch.fx.Node) -> torch.fx.Node:
    """What transformers' ``repeat_kv`` repeated (``unsqueeze(2) -> expand -> clone -> view``, each
    key/value head once per query head of its group), or ``node`` itself."""
    n = node
    if n.target not in (aten.view.default, aten._unsafe_view.default, aten.reshape.default):
        return node
    n = n.args[0]
    if isinstance(n, torch.fx.Node) and n.target is aten.clone.default:
        n = n.args[0]
    if not isinstance(n, torch.fx.Node) or n.target is not aten.expand.default:
        return node
    n = _past_whole_slices(n.args[0])
    if not isinstance(n, torch.fx.Node) or n.target is not aten.unsqueeze.default or n.args[1] != 2:
        return node
    base, out = n.args[0], node.meta.get("val")
    short = base.meta.get("val") if isinstance(base, torch.fx.Node) else None
    if short is None or out is None or short.dim() != 4 or out.dim() != 4:
        return node
    same = all(str(short.shape[i]) == str(out.shape[i]) for i in (0, 2, 3))
    return base if same else node


def _past_whole_slices(node: object) -> object:
    """``node`` without the slices that keep a whole dim (``x[:, :, None, :, :]`` traces to one
    when the shapes are symbolic: a cache whose length changed between generate() calls)."""
    while isinstance(node, torch.fx.Node) and node.target is aten.slice.Tensor:
        start, end, step = _slice_bounds(*node.args, **node.kwargs)
        if start not in (0, None) or step != 1 or end not in (None, INT64_MAX):
            break
        node = node.args[0]
    return node


def _slice_bounds(x, dim=0, start=None, end=None, step=1):
    """``aten.slice.Tensor``'s (start, end, step), its defaults filled in."""
    return start, end, step


def _cache_writes(node: torch.fx.Node) -> tuple[torch.fx.Node, ...] | None:
    """(K, K positions, new keys, V, V positions, new values) for attention of a few query rows
    over key and value caches written just before (repeated per query head or not); None for any
    other attention."""
    rows = node.args[0].meta["val"].shape[-2]
    if not isinstance(rows, int) or rows > _FEW_QUERY_ROWS:
        return None
    k, v = _write_into_input(_unrepeated(node.args[1])), _write_into_input(_unrepeated(node.args[2]))
    if k is None or v is None or str(k[0].meta["val"].shape[1]) != str(v[0].meta["val"].shape[1]):
        return None
    return (*k, *v)


def _over_cache_writes(q, k, k_pos, k_new, v, v_pos, v_new, causal: bool, attn_mask, scale, groups):
    """``sdpa(q, index_put(k, k_pos, k_new), index_put(v, v_pos, v_new))`` without writing the caches.

    Scores against the unwritten keys have the written columns replaced by scores against the new
    keys; the probabilities of those columns then weigh the new values instead of the cache's rows.
    The products run in the cache's dtype (a cast would copy the cache); the softmax in f32. A row
    whose keys are all masked comes out NaN here and is zeroed by the caller, as PyTorch's is 0.
    """
    query, mask, causal = _folded(q, k, attn_mask, causal, groups)
    last = h.rank(query) - 1
    keys = h.const(last, torch.int64)  # the scores' key axis
    k_pos, v_pos = h.wrap_negative(k_pos, h.dim(k, 2)), h.wrap_negative(v_pos, h.dim(v, 2))
    k_new, v_new = _written_rows(k_new, k, k_pos), _written_rows(v_new, v, v_pos)
    old = ops.matmul(query, k, False, True).output(0)
    new = ops.matmul(query, k_new, False, True).output(0)
    raw = h.cast(ops.scatter_update(old, k_pos, new, keys).output(0), torch.float32)
    s, _ = _masked_scores(raw, query, mask, causal, scale)
    p = ops.softmax(s, last).output(0)
    p_new = ops.gather(p, v_pos, keys).output(0)
    p_old = ops.scatter_update(p, v_pos, ops.multiply(p_new, h.const(0.0, torch.float32)), keys).output(0)
    dtype = h.dtype_of(v)
    out = ops.add(
        ops.matmul(h.cast(p_old, dtype), v, False, False),
        ops.matmul(h.cast(p_new, dtype), v_new, False, False),
    ).output(0)
    return h.reshape(out, [h.dim(q, 0), h.dim(q, 1), h.dim(q, 2), h.dim(v, 3)])


def _written_rows(values, cache, positions):
    """``values`` broadcast to the rows they are written to: ``[B, H, len(positions), E]``."""
    shape = h.as_shape([h.dim(cache, 0), h.dim(cache, 1), h.dim(positions, 0), h.dim(cache, 3)])
    return ops.broadcast(values, shape).output(0)


def _zero_fully_masked_rows(out, mask):
    """PyTorch gives 0 for a query row whose keys are all masked (OpenVINO: NaN). Left-padded
    batches in generate() have such rows at every pad position, and a NaN there reaches every
    position through the next layer's keys, so the rows are set to 0 as PyTorch does."""
    if h.dtype_of(mask) != torch.bool:  # (the CPU plugin's ReduceMax of all -inf is -FLT_MAX: compare first)
        mask = ops.greater(mask, h.infinity(h.dtype_of(mask), positive=False)).output(0)
    live = ops.reduce_logical_or(mask, h.const([-1], torch.int64), True).output(0)
    return ops.select(live, out, h.cast_like(0, out)).output(0)


def _folded_mask(q, k, mask, causal: bool, groups):
    """The mask for queries folded ``[B, Hkv, G*L, E]``: row ``g*L + l`` is query row ``l``.

    ``groups`` is an int, or an i64 scalar Output when the head counts are symbolic.
    """
    length, keys = h.dim(q, 2), h.dim(k, 2)
    if causal:  # PyTorch's causal mask is top-left aligned: key j is visible from row l if j <= l
        if isinstance(groups, int) and h.static_shape(q)[2] is not None:
            folded = h.arange(groups * h.static_shape(q)[2])
        else:
            folded = h.arange(ops.multiply(h.i64(length), h.i64(groups)).output(0))
        rows = h.floor_mod(folded, h.i64(length))
        return ops.less_equal(h.unsqueeze(h.arange(keys), 0), h.unsqueeze(rows, 1)).output(0)
    if mask is None:
        return None
    while h.rank(mask) < 4:
        mask = h.unsqueeze(mask, 0)
    mask = ops.broadcast(mask, h.as_shape([h.dim(mask, 0), h.dim(mask, 1), length, keys])).output(0)
    if h.static_shape(mask)[1] == 1:  # one mask for every head: repeat its rows per group
        repeats = h.as_shape([1, 1, groups, 1])
        return ops.tile(mask, repeats).output(0)
    return h.reshape(mask, [h.dim(mask, 0), h.dim(k, 1), -1, keys])  # a mask per query head


# ----------------------------------------------------------------------------- training
# OpenVINO's fused op gives no logsumexp and has no backward, so a training graph's attention is
# written out: S = scale * Q K^T (masked), P = softmax(S), O = P V. Computed in f32 as PyTorch's
# CPU kernel accumulates; queries are folded per K/V head as above, which also sums dK and dV over
# each group of query heads for free (their rows are just more rows of the folded product).


def _folded(q, k, attn_mask, causal: bool, groups: int | None):
    """(queries folded per K/V head, mask for them or None, causal flag left to apply)."""
    if groups == 1:
        return q, attn_mask, causal
    query = h.reshape(q, [h.dim(q, 0), h.dim(k, 1), -1, h.dim(q, 3)])
    if groups is None:
        groups = h.floor_div(h.dim(q, 1), h.dim(k, 1))
    return query, _folded_mask(q, k, attn_mask, causal, groups), False


def _scores(q, k, attn_mask, causal: bool, scale):
    """f32 masked scores ``scale * q k^T`` (masked entries -inf) and the scale used."""
    q32, k32 = h.cast(q, torch.float32), h.cast(k, torch.float32)
    return _masked_scores(ops.matmul(q32, k32, False, True).output(0), q, attn_mask, causal, scale)


def _masked_scores(qk, q, attn_mask, causal: bool, scale):
    """``scale * qk`` in f32 with masked entries -inf, and the scale used (``qk`` = ``q k^T``)."""
    if scale is None:
        scale = ops.divide(h.const(1.0, torch.float32), ops.sqrt(h.cast(h.dim(q, 3), torch.float32))).output(0)
    else:
        scale = h.const(scale, torch.float32)
    s = ops.multiply(qk, scale).output(0)
    minus_inf = h.infinity(torch.float32, positive=False)
    if causal:  # top-left aligned, as PyTorch's: key j is visible from row i if j <= i
        rows, keys = h.arange(h.dim(q, 2)), h.arange(h.dim(qk, h.rank(qk) - 1))
        allowed = ops.less_equal(h.unsqueeze(keys, 0), h.unsqueeze(rows, 1)).output(0)
        s = ops.select(allowed, s, minus_inf).output(0)
    if attn_mask is not None:
        if h.dtype_of(attn_mask) == torch.bool:
            s = ops.select(attn_mask, s, minus_inf).output(0)
        else:
            s = ops.add(s, h.cast(attn_mask, torch.float32)).output(0)
    return s, scale


def _attention_with_logsumexp(node, q, k, v, causal: bool, attn_mask, scale):
    """(output, logsumexp) as PyTorch's CPU flash op returns them; a row whose keys are all
    masked gives output 0 and logsumexp 0, as there."""
    query, mask, causal = _folded(q, k, attn_mask, causal, _groups(node))
    s, _ = _scores(query, k, mask, causal, scale)
    last = h.const([-1], torch.int64)
    top = ops.reduce_max(s, last, True).output(0)  # -FLT_MAX, not -inf, for an all -inf row
    e = ops.exp(ops.subtract(s, top)).output(0)
    # A row with a live key sums to >= 1 (its maximum contributes exp(0)); an all-masked row to 0.
    total = ops.maximum(ops.reduce_sum(e, last, True), h.const(1.0, torch.float32)).output(0)
    p = ops.divide(e, total).output(0)
    out = ops.matmul(p, h.cast(v, torch.float32), False, False).output(0)
    lse = ops.add(top, ops.log(total)).output(0)
    live = ops.greater(top, h.const(float(np.finfo(np.float32).min), torch.float32)).output(0)
    lse = ops.select(live, lse, h.const(0.0, torch.float32)).output(0)
    out = h.reshape(out, [h.dim(q, 0), h.dim(q, 1), h.dim(q, 2), h.dim(v, 3)])
    lse = h.reshape(lse, [h.dim(q, 0), h.dim(q, 1), h.dim(q, 2)])
    return h.cast(out, h.out_dtype(node, 0)), h.cast(lse, h.out_dtype(node, 1))


def _sdpa_backward_ok(node: torch.fx.Node) -> str | None:
    return _sdpa_ok(node, first=1, dropout_at=6)


@lowers(aten._scaled_dot_product_flash_attention_for_cpu_backward.default, validator=_sdpa_backward_ok)
def sdpa_flash_cpu_backward(
    ctx, node, grad_out, q, k, v, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None
):
    """dQ, dK, dV from the saved logsumexp: P = exp(S - lse), dV = P^T dO, dS = P * (dO V^T -
    rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q (masked entries of P are 0 whatever lse
    holds, so all-masked rows give zero gradients as in PyTorch)."""
    query, mask, causal = _folded(q, k, attn_mask, bool(is_causal), _groups(node, 1))
    s, scale_ = _scores(query, k, mask, causal, scale)
    folded = lambda x: h.reshape(h.cast(x, torch.float32), [h.dim(k, 0), h.dim(k, 1), -1, h.dim(x, 3)])
    lse = h.reshape(h.cast(logsumexp, torch.float32), [h.dim(k, 0), h.dim(k, 1), -1, 1])
    p = ops.exp(ops.subtract(s, lse)).output(0)
    minus_inf = h.infinity(torch.float32, positive=False)
    p = ops.select(ops.equal(s, minus_inf), h.const(0.0, torch.float32), p).output(0)
    go, o = folded(grad_out), folded(out)
    v32, k32, q32 = h.cast(v, torch.float32), h.cast(k, torch.float32), h.cast(query, torch.float32)
    dv = ops.matmul(p, go, True, False).output(0)
    dp = ops.matmul(go, v32, False, True).output(0)
    rowsum = ops.reduce_sum(ops.multiply(go, o), h.const([-1], torch.int64), True).output(0)
    ds = ops.multiply(ops.multiply(p, ops.subtract(dp, rowsum)), scale_).output(0)
    dq = ops.matmul(ds, k32, False, False).output(0)
    dk = ops.matmul(ds, q32, True, False).output(0)
    dq = h.reshape(dq, [h.dim(q, 0), h.dim(q, 1), h.dim(q, 2), h.dim(q, 3)])
    return tuple(h.cast(g, h.out_dtype(node, i)) for i, g in enumerate((dq, dk, dv)))
