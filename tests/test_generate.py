"""Text generation with transformers' own ``generate()`` on fxvino (the recipes in docs/user-guide/generation.md).

Every test compares with eager PyTorch's tokens for the same random weights, checks that every
compiled graph ran fully on OpenVINO (no op in PyTorch, no fallback), and counts compiled graphs:
generation must not compile per token, and prompts of new lengths must stop compiling after the
second length (Dynamo marks the changing sizes dynamic).
"""

from __future__ import annotations

import copy

import pytest
import torch
from benchmarks import models

import fxvino
from harness import assert_all_on_openvino

pytestmark = pytest.mark.slow

# The list of architectures (suite names in benchmarks/models.py).
ARCHS = [
    "llama",
    "qwen2",
    "qwen3",
    "mistral",  # sliding window 8, crossed by every generation here
    "gemma2",  # soft-capping, alternating local/global layers
    "gemma3",
    "phi3",
    "gpt2",
    "opt",
    "gpt-neox",
    "falcon",
    "mixtral",  # mixture of experts
]
GREEDY = {"do_sample": False, "pad_token_id": 0}


def _decoder(name: str, positions: int = 1024, layers: int | None = None):
    """The model suite's small config for ``name`` with room for long generations, random weights."""
    torch.manual_seed(0)
    model, _ = models.BY_NAME[name].build()
    config = model.config
    config.max_position_embeddings = positions
    if layers is not None:
        config.num_hidden_layers = layers
    torch.manual_seed(0)
    return type(model)(config).eval()


def _prompt(length: int, vocab: int, batch: int = 1, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (batch, length), generator=g)


def _generate(model, ids, new_tokens: int, **kwargs) -> torch.Tensor:
    return model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **GREEDY, **kwargs)


@pytest.mark.parametrize("name", ARCHS)
def test_greedy_tokens_equal_eager_with_bounded_compiles(name):
    """128 new tokens equal eager's; the first generation compiles at most 3 graphs (prefill, then
    decode static and dynamic); a second prompt length adds at most one, a third none."""
    model = _decoder(name)
    vocab = model.config.vocab_size
    prompts = [_prompt(12, vocab), _prompt(20, vocab, seed=1), _prompt(16, vocab, seed=2)]
    new_tokens = [128, 16, 16]
    expected = [_generate(model, p, n) for p, n in zip(prompts, new_tokens, strict=True)]
    model.forward = torch.compile(model.forward, backend="fxvino")
    compiled_after = []
    with fxvino.collect_reports() as report:
        for p, n, want in zip(prompts, new_tokens, expected, strict=True):
            got = _generate(model, p, n)
            assert torch.equal(got, want), f"{name}: tokens differ from eager at prompt length {p.shape[1]}"
            compiled_after.append(len(report.graphs))
    assert compiled_after[0] <= 3, f"{name}: {compiled_after[0]} graphs for one generation\n{report}"
    assert compiled_after[1] - compiled_after[0] <= 1, f"{name}: a second prompt length compiled {compiled_after}"
    assert compiled_after[2] == compiled_after[1], f"{name}: a third prompt length compiled {compiled_after}"
    assert_all_on_openvino(report, partitions=None)


def test_long_generation_compiles_three_graphs():
    """512 tokens (prompt and generated) in one generate(): prefill, decode at the first cache length,
    then one decode graph with a dynamic cache length: no compile per token."""
    model = _decoder("llama")
    ids = _prompt(12, model.config.vocab_size)
    expected = _generate(model, ids, 500)
    model.forward = torch.compile(model.forward, backend="fxvino")
    with fxvino.collect_reports() as report:
        got = _generate(model, ids, 500)
    assert torch.equal(got, expected)
    assert len(report.graphs) == 3, str(report)
    assert_all_on_openvino(report, partitions=None)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_batch_of_four_with_left_padding(cache):
    """Prompts of different lengths in one batch, left-padded with an attention mask. With a
    StaticCache the prompt of 12 tokens is few enough rows for attention over the unwritten cache
    too (lowering/ops/attention.py), pad rows fully masked."""
    model = _decoder("llama")
    kwargs = {"cache_implementation": "static"} if cache == "static" else {}
    lengths = [12, 7, 10, 4]
    ids = torch.zeros(4, max(lengths), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, -n:] = _prompt(n, model.config.vocab_size, seed=row)[0]
        mask[row, -n:] = 1
    expected = _generate(model, ids, 32, attention_mask=mask, **kwargs)
    model.forward = torch.compile(model.forward, backend="fxvino")
    with fxvino.collect_reports() as report:
        got = _generate(model, ids, 32, attention_mask=mask, **kwargs)
    assert torch.equal(got, expected)
    assert_all_on_openvino(report, partitions=None)


def test_sampling_is_reproducible_under_manual_seed():
    model = _decoder("qwen2")
    ids = _prompt(12, model.config.vocab_size)
    model.forward = torch.compile(model.forward, backend="fxvino")
    runs = []
    with fxvino.collect_reports() as report:
        for seed in (5, 5, 6):
            torch.manual_seed(seed)
            runs.append(
                model.generate(ids, max_new_tokens=24, do_sample=True, top_k=50, temperature=1.5, pad_token_id=0)
            )
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2]), "a different seed sampled the same 24 tokens"
    assert_all_on_openvino(report, partitions=None)


@pytest.mark.parametrize("recipe", ["forward", "module.compile", "compile_config"])
def test_static_cache_and_recipes(recipe):
    """StaticCache through the forward recipe, ``model.compile(backend=...)`` (the module compiled in
    place, so generate() calls it), and transformers' own compiled decode (``compile_config``)."""
    from transformers import CompileConfig

    model = _decoder("llama")
    vocab = model.config.vocab_size
    prompts = [_prompt(12, vocab), _prompt(20, vocab, seed=1)]
    cache = {} if recipe == "module.compile" else {"cache_implementation": "static"}
    expected = [_generate(model, p, 24, **cache) for p in prompts]
    if recipe == "forward":
        model.forward = torch.compile(model.forward, backend="fxvino")
    elif recipe == "module.compile":
        model.compile(backend="fxvino")
    else:
        config = CompileConfig(backend="fxvino")
        config._compile_all_devices = True  # transformers compiles decode only on accelerators otherwise
        model.generation_config.compile_config = config
    with fxvino.collect_reports() as report:
        got = [_generate(model, p, 24, **cache) for p in prompts]
    for g, e in zip(got, expected, strict=True):
        assert torch.equal(g, e)
    assert 1 <= len(report.graphs) <= 4, str(report)
    assert_all_on_openvino(report, partitions=None)


def test_example_script_generates_on_fxvino():
    import ast
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "examples" / "generate.py"
    done = subprocess.run(
        [sys.executable, str(script), "llama-tiny", "--new-tokens", "8"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert len(ast.literal_eval(done.stdout.strip().splitlines()[-1])) == 8  # the ids of 8 new tokens (no tokenizer)
    assert "tokens/s with fxvino on CPU" in done.stderr


@pytest.mark.parametrize("bits", [8, 4])
def test_weight_only_quantized_generation(bits):
    """torchao weight-only int8 and int4 (the CPU int4 config) in generate(): eager's tokens, every
    graph on OpenVINO, and the products read 8- or 4-bit weights (kept compressed, not folded)."""
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, PerGroup, quantize_

    model = _decoder("llama")
    config = Int8WeightOnlyConfig() if bits == 8 else IntxWeightOnlyConfig(torch.int4, PerGroup(32))
    quantize_(model, config)
    ids = _prompt(12, model.config.vocab_size)
    expected = _generate(model, ids, 32)
    model.forward = torch.compile(model.forward, backend="fxvino")
    with fxvino.collect_reports() as report:
        assert torch.equal(_generate(model, ids, 32), expected)
    assert_all_on_openvino(report, partitions=None)
    weights = {
        op.inputs()[1].get_element_type().get_type_name()
        for graph in report.graphs
        for part in graph.ov_partitions
        if part.compiled is not None  # the first decode step's graph is released (superseded.py)
        for op in part.compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    }
    assert weights == {"i8" if bits == 8 else "i4"}, (weights, str(report))


def test_nncf_int4_compressed_model_generates():
    """``nncf.compress_weights`` (int4, on the nn.Module: NNCF's hooks decompress each weight) then
    ``model.compile(backend="fxvino")``: eager's tokens, with the products reading i4 weights
    (NNCF keeps the first and last layers in 8 bits). ``model.forward = torch.compile(...)``
    does not combine with NNCF's hooks (Dynamo fails inside NNCF's own forward wrapper).

    NNCF's hooks replace the float weights between compile and first call, so each graph is
    frozen again once, inside the model call and its ``__torch_function__`` mode: that recompile
    ran NNCF's hooks on fxvino's constant folding (a crash) until it stepped outside the mode."""
    nncf = pytest.importorskip("nncf")
    # One decoder layer: Dynamo traces NNCF's hooks op by op (~50 s with the suite's two layers).
    model = _decoder("llama", layers=1)
    ids = _prompt(12, model.config.vocab_size)
    dataset = nncf.Dataset([{"input_ids": ids}])
    model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT4_SYM, group_size=32, dataset=dataset)
    expected = _generate(model, ids, 8)
    model.compile(backend="fxvino")
    with fxvino.collect_reports() as report:
        assert torch.equal(_generate(model, ids, 8), expected)
    assert_all_on_openvino(report, partitions=None)
    weights = [
        op.inputs()[1].get_element_type().get_type_name()
        for graph in report.graphs
        for part in graph.ov_partitions
        if part.compiled is not None  # the first freeze of a refrozen graph is freed
        for op in part.compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    ]
    assert weights and set(weights) <= {"i4", "u8"} and weights.count("i4") > weights.count("u8"), weights


def test_superseded_static_graphs_release_their_weights():
    """The first decode step's graph (cache length = prompt length) is never called again once the
    decode graph with a dynamic cache length exists: it frees its compiled models, and so does the
    first prompt's prefill once a second prompt length compiled a dynamic one. Tokens stay eager's,
    and later generations compile nothing, so nothing released is ever needed again."""
    import gc

    model = _decoder("llama")
    vocab = model.config.vocab_size
    prompts = [_prompt(12, vocab), _prompt(12, vocab, seed=1), _prompt(20, vocab, seed=2), _prompt(12, vocab)]
    expected = [_generate(model, p, 16) for p in prompts]
    model.forward = torch.compile(model.forward, backend="fxvino")
    with fxvino.collect_reports() as report:
        for i, (p, want) in enumerate(zip(prompts, expected, strict=True)):
            assert torch.equal(_generate(model, p, 16), want), i
            if i == 1:
                assert len(report.graphs) == 3, str(report)  # prefill, decode static, decode dynamic
    gc.collect()
    prefill, first_step, decode, prefill_dynamic = report.graphs
    assert len(report.graphs) == 4, str(report)
    assert first_step.released == f"superseded by graph {decode.name}", str(report)
    assert prefill.released == f"superseded by graph {prefill_dynamic.name}", str(report)
    assert decode.released is None and prefill_dynamic.released is None
    for graph in report.graphs:
        alive = [p.compiled is not None for p in graph.ov_partitions]
        assert alive and all(alive) == (graph.released is None), graph.summary()
    assert "released: superseded by graph" in str(report)


def test_static_cache_decode_reads_the_cache_without_copying_it():
    """With a StaticCache, a decode step's attention reads each layer's cache buffer as it is (the
    new position patched into the scores, lowering/ops/attention.py) instead of scattering the step's
    keys and values into a copy of the whole cache; the buffers are written in place after the
    graph (input_writes.py). A prompt longer than 16 tokens keeps the fused attention. Tokens stay
    eager's."""
    model = _decoder("llama")
    ids = _prompt(20, model.config.vocab_size)
    expected = _generate(model, ids, 32, cache_implementation="static")
    model.forward = torch.compile(model.forward, backend="fxvino")
    with fxvino.collect_reports() as report:
        assert torch.equal(_generate(model, ids, 32, cache_implementation="static"), expected)
    assert_all_on_openvino(report, partitions=None)
    _assert_decodes_scatter_nothing_into_the_cache(report, model.config.num_hidden_layers)


def test_static_cache_of_another_length_still_reads_the_cache_without_copying_it():
    """A generate() call with another max_new_tokens makes a StaticCache of another length: the
    decode graph recompiled for a symbolic cache length, whose traced ``repeat_kv`` holds a slice
    of a whole dim, must also read the cache in place. Tokens stay eager's at every length."""
    model = _decoder("llama")
    ids = _prompt(20, model.config.vocab_size)
    twin = copy.deepcopy(model)  # generate() keeps a StaticCache that is long enough: not this one's
    expected = {n: _generate(twin, ids, n, cache_implementation="static") for n in (24, 32, 40)}
    model.forward = torch.compile(model.forward, backend="fxvino")
    with fxvino.collect_reports() as report:
        for n, tokens in expected.items():
            assert torch.equal(_generate(model, ids, n, cache_implementation="static"), tokens), n
    assert_all_on_openvino(report, partitions=None)
    parts = [p for g in report.graphs for p in g.ov_partitions if p.compiled is not None]
    shapes = {str(i.get_partial_shape()) for p in parts for i in p.compiled.inputs}
    assert "[1,1,1,?]" in shapes, f"no decode graph for a symbolic cache length: {shapes}"
    _assert_decodes_scatter_nothing_into_the_cache(report, model.config.num_hidden_layers)


def _assert_decodes_scatter_nothing_into_the_cache(report: fxvino.Report, layers: int) -> None:
    """The prefill graphs scatter their rows into K and V of every layer; each decode graph (one
    input token) none: it patches the scores (ScatterUpdate) instead."""
    scatters: dict[str, list[tuple[int, int]]] = {"prefill": [], "decode": []}
    for graph in report.graphs:
        for part in graph.ov_partitions:
            if part.compiled is not None:
                ops = [op.get_rt_info()["layerType"].astype(str) for op in part.compiled.get_runtime_model().get_ops()]
                kind = "decode" if str(part.compiled.inputs[0].get_partial_shape()) == "[1,1]" else "prefill"
                scatters[kind].append((ops.count("ScatterNDUpdate"), ops.count("ScatterUpdate")))
    assert scatters["prefill"] and all(s == (2 * layers, 0) for s in scatters["prefill"]), scatters
    assert scatters["decode"] and all(s == (0, 2 * layers) for s in scatters["decode"]), scatters
