"""Scaled dot-product attention, including grouped-query and multi-query attention, vs eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness import assert_all_on_openvino, run_fxvino


def _qkv(b: int, hq: int, hkv: int, length: int, keys: int, e: int = 16):
    torch.manual_seed(0)
    return torch.randn(b, hq, length, e), torch.randn(b, hkv, keys, e), torch.randn(b, hkv, keys, e)


def _sdpa(q, k, v, mask=None, causal=False, scale=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=True)


def _check(fn, *args, dynamic=None):
    out, report = run_fxvino(fn, *args, dynamic=dynamic)
    torch.testing.assert_close(out, fn(*args), rtol=1e-5, atol=1e-5)
    assert_all_on_openvino(report)
    assert report.ov_ops, str(report)


@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (8, 1), (6, 3)], ids=["mha", "gqa", "mqa", "gqa3"])
@pytest.mark.parametrize("length,keys", [(5, 5), (1, 9), (3, 7)], ids=["square", "decode", "rect"])
def test_heads_and_lengths(hq, hkv, length, keys):
    q, k, v = _qkv(2, hq, hkv, length, keys)
    _check(_sdpa, q, k, v)


@pytest.mark.numerics
@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2)], ids=["mha", "gqa"])
@pytest.mark.parametrize("kind", ["bool", "-inf", "finfo.min"])
def test_fully_masked_rows_are_zero_as_in_pytorch(hq, hkv, kind):
    """Rows whose keys are all masked (a left-padded batch's pad positions) are 0 in PyTorch; OpenVINO
    gives NaN, which the next layer spreads to every position."""
    q, k, v = _qkv(2, hq, hkv, 4, 4)
    allowed = torch.ones(2, 1, 4, 4, dtype=torch.bool).tril()
    allowed[1, :, :, :2] = False  # the second sequence is left-padded by two tokens
    if kind == "bool":
        mask = allowed
    else:
        fill = float("-inf") if kind == "-inf" else torch.finfo(torch.float32).min
        mask = torch.zeros(allowed.shape).masked_fill(~allowed, fill)
    expected = _sdpa(q, k, v, mask)
    assert not expected.isnan().any()
    _check(_sdpa, q, k, v, mask)


@pytest.mark.parametrize("hq,hkv", [(4, 2), (8, 1)], ids=["gqa", "mqa"])
@pytest.mark.parametrize("length,keys", [(5, 5), (3, 7), (1, 4)], ids=["square", "rect", "decode"])
def test_causal_is_top_left_aligned(hq, hkv, length, keys):
    q, k, v = _qkv(1, hq, hkv, length, keys)
    _check(lambda q, k, v: _sdpa(q, k, v, causal=True), q, k, v)


@pytest.mark.parametrize(
    "mask_shape",
    [(2, 1, 5, 7), (1, 1, 1, 7), (5, 7), (2, 4, 5, 7), (4, 1, 7)],
    ids=["b1ls", "111s", "ls", "bhls", "h1s"],
)
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_gqa_masks(mask_shape, kind):
    q, k, v = _qkv(2, 4, 2, 5, 7)
    torch.manual_seed(1)
    if kind == "bool":
        mask = torch.rand(mask_shape) > 0.3
        mask[..., 0] = True  # every row sees a key: a fully masked row is NaN in both, by design
    else:
        mask = torch.randn(mask_shape)
    _check(lambda q, k, v, m: _sdpa(q, k, v, mask=m), q, k, v, mask)


@pytest.mark.parametrize("mask_shape", [(2, 1, 5, 7), (2, 4, 5, 7), (5, 7)], ids=["b1ls", "bhls", "ls"])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_gqa_masks_dynamic(mask_shape, kind):
    """Symbolic batch, head and length sizes: the fold and the mask's tiling are built in the graph."""
    q, k, v = _qkv(2, 4, 2, 5, 7)
    torch.manual_seed(1)
    mask = torch.rand(mask_shape) > 0.3 if kind == "bool" else torch.randn(mask_shape)
    if kind == "bool":
        mask[..., 0] = True
    _check(lambda q, k, v, m: _sdpa(q, k, v, mask=m), q, k, v, mask, dynamic=True)


def test_gqa_scale():
    q, k, v = _qkv(1, 4, 2, 6, 6)
    _check(lambda q, k, v: _sdpa(q, k, v, scale=0.3), q, k, v)
    _check(lambda q, k, v: _sdpa(q, k, v, causal=True, scale=0.3), q, k, v)


def test_gqa_dynamic_lengths_compile_once():
    """A decode loop: the key length grows each step, one OpenVINO compile serves every length."""
    import fxvino
    from harness import run_fxvino as _  # noqa: F401  (same harness, compiled once below)

    compiled = torch.compile(_sdpa, backend="fxvino", dynamic=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for keys in (3, 8, 17, 40):
            q, k, v = _qkv(1, 8, 2, 1, keys)
            torch.testing.assert_close(compiled(q, k, v), _sdpa(q, k, v), rtol=1e-5, atol=1e-5)
        for length in (4, 9):  # prefill-like, causal, same compiled graph family
            q, k, v = _qkv(1, 8, 2, length, length)
            torch.testing.assert_close(compiled(q, k, v, None, True), _sdpa(q, k, v, causal=True), rtol=1e-5, atol=1e-5)
    assert_all_on_openvino(report, partitions=None)
    assert len(report.graphs) <= 2, str(report)  # one for the plain call, one with causal


def _llama(kv_heads: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        vocab_size=500,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.slow
@pytest.mark.parametrize("kv_heads", [2, 1], ids=["gqa", "mqa"])
def test_llama_generate_fully_on_openvino(kv_heads):
    import fxvino

    model = _llama(kv_heads)
    ids = torch.randint(0, 500, (1, 12))
    expected = model.generate(ids, max_new_tokens=16, do_sample=False)
    model.forward = torch.compile(model.forward, backend="fxvino")
    with fxvino.collect_reports() as report:
        out = model.generate(ids, max_new_tokens=16, do_sample=False)
    assert torch.equal(out, expected)
    assert_all_on_openvino(report, partitions=None)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2", "mistral-sliding-window"])
def test_gqa_decoders_generate_fully_on_openvino(family):
    """Four query heads per K/V head; Mistral's 8-position sliding window passes an explicit mask."""
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    import fxvino

    sizes = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=8, vocab_size=500)
    if family == "qwen2":
        config, cls = Qwen2Config(num_key_value_heads=2, **sizes), Qwen2ForCausalLM
    else:
        config, cls = MistralConfig(num_key_value_heads=2, sliding_window=8, **sizes), MistralForCausalLM
    torch.manual_seed(0)
    model = cls(config).eval()
    ids = torch.randint(0, 500, (1, 12))
    expected = model.generate(ids, max_new_tokens=16, do_sample=False)
    model.forward = torch.compile(model.forward, backend="fxvino")
    with fxvino.collect_reports() as report:
        out = model.generate(ids, max_new_tokens=16, do_sample=False)
    assert torch.equal(out, expected)
    assert_all_on_openvino(report, partitions=None)


@pytest.mark.parametrize(
    "norm_first, activation, masked",
    [(False, "relu", False), (False, "relu", True), (True, "gelu", False), (True, "gelu", True)],
    ids=["post-norm", "post-norm-padding", "pre-norm-gelu", "pre-norm-gelu-padding"],
)
def test_transformer_encoder_fast_path(norm_first, activation, masked):
    """Eval + no_grad takes aten._transformer_encoder_layer_fwd, which fxvino decomposes itself."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, norm_first=norm_first, activation=activation)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.zeros(2, 5, dtype=torch.bool)
    mask[1, 3:] = True  # the second sequence is padded after 3 tokens

    def fn(x, mask):
        return model(x, src_key_padding_mask=mask if masked else None)

    with torch.no_grad():
        expected = fn(x, mask)
    out, report = run_fxvino(fn, x, mask)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert_all_on_openvino(report, partitions=None)


def test_transformer_encoder_fast_path_dynamic():
    """The decomposed fast path under symbolic batch and length: one graph for every padded batch."""
    import fxvino

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    compiled = torch.compile(lambda x, m: model(x, src_key_padding_mask=m), backend="fxvino", dynamic=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for batch, length in ((2, 5), (3, 9)):
            x = torch.randn(batch, length, 16)
            mask = torch.zeros(batch, length, dtype=torch.bool)
            mask[1, 3:] = True
            expected = model(x, src_key_padding_mask=mask)
            torch.testing.assert_close(compiled(x, mask), expected, rtol=1e-5, atol=1e-5)
    assert_all_on_openvino(report, partitions=None)
    assert len(report.graphs) == 1, str(report)


@pytest.mark.parametrize("dynamic", [None, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "key-padding"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["output-only", "weights"])
def test_multihead_attention_module(need_weights, masked, dynamic):
    """In eager, eval + no_grad runs aten._native_multi_head_attention; under Dynamo the module takes its
    Python path (SDPA when need_weights=False, softmax(QK^T)V otherwise), which lowers op by op."""
    import fxvino

    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()

    def fn(x, mask):
        return mha(x, x, x, key_padding_mask=mask if masked else None, need_weights=need_weights)

    compiled = torch.compile(fn, backend="fxvino", dynamic=dynamic)
    with fxvino.collect_reports() as report, torch.no_grad():
        for batch, length in ((2, 5), (3, 7)):  # under dynamic=True, one graph serves both
            x = torch.randn(batch, length, 16)
            mask = torch.zeros(batch, length, dtype=torch.bool)
            mask[0, -1] = True
            out, expected = compiled(x, mask), fn(x, mask)
            torch.testing.assert_close(out[0], expected[0], rtol=1e-5, atol=1e-5)
            if need_weights:  # head-averaged attention weights
                torch.testing.assert_close(out[1], expected[1], rtol=1e-5, atol=1e-5)
    assert_all_on_openvino(report, partitions=None)
    assert len(report.graphs) == (1 if dynamic else 2), str(report)


class _StaticCacheAttention(torch.nn.Module):
    """A StaticCache layer's decode: the new keys/values are written into the cache buffers at
    ``pos``, then the query rows attend over the whole written cache (grouped-query heads)."""

    def __init__(self, hq: int, hkv: int, slots: int, how: str, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.hq, self.how = hq, how
        self.register_buffer("keys", torch.zeros(1, hkv, slots, 16, dtype=dtype))
        self.register_buffer("values", torch.zeros(1, hkv, slots, 16, dtype=dtype))

    def forward(self, q, k, v, pos, mask):
        if self.how == "index_copy":
            self.keys.index_copy_(2, pos, k)
            self.values.index_copy_(2, pos, v)
        else:
            self.keys[:, :, pos] = k
            self.values[:, :, pos] = v
        return _sdpa(q, self.keys, self.values, mask)


def _cache_ops(report) -> set[str]:
    return {
        op.get_rt_info()["layerType"].astype(str)
        for graph in report.graphs
        for part in graph.ov_partitions
        if part.compiled is not None
        for op in part.compiled.get_runtime_model().get_ordered_ops()
    }


@pytest.mark.parametrize("how", ["index_copy", "index_put"])
@pytest.mark.parametrize("hq,hkv,rows", [(4, 2, 1), (4, 4, 1), (8, 1, 3)], ids=["gqa", "mha", "mqa-3rows"])
@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_attention_over_a_written_static_cache_copies_no_cache(how, hq, hkv, rows, mask_kind):
    """Eager's outputs and caches step after step, while the compiled graph never scatters into a
    copy of the cache: the written columns are patched into the scores instead (the cache buffers
    themselves are written in place after the graph, input_writes.py)."""
    import copy

    import fxvino

    slots = 12
    model = _StaticCacheAttention(hq, hkv, slots, how)
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino")
    torch.manual_seed(0)
    with torch.no_grad(), fxvino.collect_reports() as report:
        for step in range(0, slots - rows + 1, rows):
            q = torch.randn(1, hq, rows, 16)
            k, v = torch.randn(1, hkv, rows, 16), torch.randn(1, hkv, rows, 16)
            pos = torch.arange(step, step + rows)
            visible = torch.arange(slots)[None, :] <= pos[:, None]  # causal over the cache, like StaticCache
            mask = (
                visible[None, None]
                if mask_kind == "bool"
                else torch.zeros(1, 1, rows, slots).masked_fill(~visible[None, None], torch.finfo(torch.float32).min)
            )
            expected = eager(q, k, v, pos, mask)
            got = compiled(q, k, v, pos, mask)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(model.keys, eager.keys)
            torch.testing.assert_close(model.values, eager.values)
    assert_all_on_openvino(report)
    ops = _cache_ops(report)
    assert "ScatterNDUpdate" not in ops and "ScaledDotProductAttention" not in ops, ops
    assert "ScatterUpdate" in ops, ops  # the written columns of the scores


def test_attention_over_a_written_cache_for_many_rows_keeps_the_fused_op():
    """A prompt written into the cache (more rows than _FEW_QUERY_ROWS) keeps the fused attention
    over the scattered cache (the plugin runs it as an attention Subgraph here)."""
    import fxvino

    slots, rows = 40, 20
    model = _StaticCacheAttention(4, 2, slots, "index_copy")
    q, k, v = torch.randn(1, 4, rows, 16), torch.randn(1, 2, rows, 16), torch.randn(1, 2, rows, 16)
    pos = torch.arange(rows)
    mask = (torch.arange(slots)[None, :] <= pos[:, None])[None, None]
    expected = _StaticCacheAttention(4, 2, slots, "index_copy")(q, k, v, pos, mask)
    with torch.no_grad(), fxvino.collect_reports() as report:
        got = torch.compile(model, backend="fxvino")(q, k, v, pos, mask)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert_all_on_openvino(report)
    assert "ScatterNDUpdate" in _cache_ops(report)


@pytest.mark.numerics
def test_attention_over_a_written_bf16_cache():
    """A bf16 StaticCache: the same path, within bf16's rounding of eager's attention."""
    import copy

    model = _StaticCacheAttention(4, 2, 10, "index_copy", dtype=torch.bfloat16)
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino")
    torch.manual_seed(0)
    with torch.no_grad():
        for step in range(4):
            q = torch.randn(1, 4, 1, 16, dtype=torch.bfloat16)
            k, v = (torch.randn(1, 2, 1, 16, dtype=torch.bfloat16) for _ in range(2))
            pos = torch.tensor([step])
            mask = (torch.arange(10) <= step)[None, None, None]
            torch.testing.assert_close(compiled(q, k, v, pos, mask), eager(q, k, v, pos, mask), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(model.keys, eager.keys)
