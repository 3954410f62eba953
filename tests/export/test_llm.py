"""``fxvino.export.llm.export_llm`` run by the real client, OpenVINO GenAI's ``LLMPipeline``.

Every architecture of tests/test_generate.py (small configs, random weights, a BPE trained
offline as the tokenizer) is exported and generated with by GenAI; its greedy tokens must equal
eager ``model.generate()``'s. The pipeline is asked for f32 (``INFERENCE_PRECISION_HINT``): on a
CPU with bf16 kernels OpenVINO would otherwise compute in bf16, and it does not read that hint
from the model file. The KV cache must be OpenVINO state (ReadValue/Assign, ``query_state()``),
and ``beam_idx`` must reorder it.

The small configs of GPT-2 and Phi-3 keep their full-size models' end tokens (50256, 32000) in a
vocabulary of 1,000: ``export_llm`` leaves such ids out of the files it writes, since GenAI's
sampler writes -inf at ``logits[eos]`` (``min_new_tokens``) without a bounds check; these tests
once corrupted the heap that way and crashed the process at random later tests.
"""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
import torch
from benchmarks import models

from test_generate import ARCHS

ov_genai = pytest.importorskip("openvino_genai")
pytest.importorskip("openvino_tokenizers")

import openvino as ov  # noqa: E402 - after the skips: without GenAI nothing here runs

from fxvino.devices import cpu_features  # noqa: E402
from fxvino.export.llm import export_llm  # noqa: E402
from fxvino.export.llm.decoder import FlatKVDecoder, kv_layout  # noqa: E402
from fxvino.export.llm.tokenizer import train_bpe  # noqa: E402

pytestmark = pytest.mark.slow

F32 = {"INFERENCE_PRECISION_HINT": "f32"}
# GenAI's two CPU backends: the stateful one (SDPA over the IR's own state) and the default,
# continuous batching with paged attention, which OpenVINO's SDPA-to-PagedAttention rewrite makes
# of the IR (export/llm/paged.py); it falls back to the stateful backend when the rewrite does
# not take the IR, as for sliding-window models.
PIPELINE = {**F32, "ATTENTION_BACKEND": "SDPA"}
BACKENDS = {"stateful": PIPELINE, "default": F32}


def _decoder(name: str) -> torch.nn.Module:
    """The model suite's small config for ``name``, with room for the generations here."""
    torch.manual_seed(0)
    model, _ = models.BY_NAME[name].build()
    model.config.max_position_embeddings = 1024
    torch.manual_seed(0)
    return type(model)(model.config).eval()


def _prompt(length: int, vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, vocab, (1, length), generator=torch.Generator().manual_seed(seed))


def _eager(model: torch.nn.Module, ids: torch.Tensor, new: int) -> list[int]:
    out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    return out[0, ids.shape[1] :].tolist()


def _genai(pipe, ids: torch.Tensor, new: int) -> list[int]:
    config = ov_genai.GenerationConfig(max_new_tokens=new, min_new_tokens=new, ignore_eos=True, do_sample=False)
    return list(pipe.generate(ov.Tensor(ids.numpy()), config).tokens[0])


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe(1000)  # the model suite's decoders all have 1,000 tokens


@pytest.fixture(scope="module")
def llama(tmp_path_factory, tokenizer):
    model = _decoder("llama")
    return model, export_llm(model, tokenizer, tmp_path_factory.mktemp("llama"), progress=False)


@pytest.mark.parametrize("name", ARCHS)
def test_genai_greedy_tokens_equal_eager(name, tokenizer, tmp_path, request):
    """32 new tokens from a 12-token prompt, then 16 from a 5-token one in the same pipeline (GenAI
    resets the state between generate() calls), on both of GenAI's backends. Mistral's and
    Gemma's sliding windows of 8 are crossed: their state holds every position and the model's own
    masks hide the old ones."""
    if name == "llama":  # the export the other tests share
        model, path = request.getfixturevalue("llama")
    else:
        model = _decoder(name)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "export_llm: .* outside the model's", UserWarning)
            path = export_llm(model, tokenizer, tmp_path, progress=False)
    vocab = model.config.vocab_size
    for file in ("config.json", "generation_config.json"):
        written = json.loads((path / file).read_text())
        ids = [written.get(key) for key in ("bos_token_id", "eos_token_id", "pad_token_id")]
        assert all(i is None or 0 <= i < vocab for i in ids), f"{name}: {file} names tokens past the logits: {ids}"
    prompts = [(_prompt(12, vocab), 32), (_prompt(5, vocab, seed=1), 16)]
    expected = [_eager(model, ids, n) for ids, n in prompts]
    for backend, properties in BACKENDS.items():
        pipe = ov_genai.LLMPipeline(str(path), "CPU", **properties)
        for (ids, n), want in zip(prompts, expected, strict=True):
            got = _genai(pipe, ids, n)
            assert got == want, f"{name}, {backend} backend: tokens differ from eager at prompt length {ids.shape[1]}"
        del pipe


def _paged(path) -> ov.Model:
    """The decoder IR as GenAI's default backend rewrites it for paged attention."""
    from openvino._offline_transformations import paged_attention_transformation

    ir = ov.Core().read_model(path / "openvino_model.xml")
    paged_attention_transformation(ir, False, False)
    ir.validate_nodes_and_infer_types()
    return ir


def test_paged_attention_rewrite_takes_the_decoder(llama):
    """OpenVINO's SDPA-to-PagedAttention rewrite (what GenAI's default backend runs) replaces every
    layer's attention and the cache state, and leaves no input it removes read anywhere: the
    attention mask fed a Select after attention, and the failed rewrite sent GenAI back to its
    stateful backend, whose first token was 4-6x slower than optimum-intel's IR under paged
    attention."""
    model, path = llama
    ir = _paged(path)
    kinds = [op.get_type_name() for op in ir.get_ops()]
    assert kinds.count("PagedAttentionExtension") == model.config.num_hidden_layers
    assert "ReadValue" not in kinds and "ScaledDotProductAttention" not in kinds
    names = {p.get_any_name() for p in ir.inputs}
    assert {"attention_mask", "beam_idx"}.isdisjoint(names)
    assert {"input_ids", "position_ids", "key_cache.0", "value_cache.0"} <= names


def test_sliding_window_models_stay_with_the_stateful_backend(tokenizer, tmp_path):
    """The rewrite knows sliding windows only from the masks of other exporters and would attend
    past them: a windowed model's IR is left in a form it does not take (GenAI falls back, and the
    greedy test shows its tokens then equal eager's past the window)."""
    model = _decoder("mistral")
    path = export_llm(model, tokenizer, tmp_path, progress=False)
    with pytest.raises(RuntimeError, match="attention_mask"):
        _paged(path)


_DEFAULT_BACKEND = """
import json, sys
import numpy as np, openvino as ov, openvino_genai as ov_genai
path, ids, new = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
pipe = ov_genai.LLMPipeline(path, "CPU", INFERENCE_PRECISION_HINT="f32")
config = ov_genai.GenerationConfig(max_new_tokens=new, min_new_tokens=new, ignore_eos=True, do_sample=False)
print(json.dumps(list(pipe.generate(ov.Tensor(np.array([ids], dtype=np.int64)), config).tokens[0])))
"""


def test_default_backend_runs_paged_attention(llama):
    """``LLMPipeline(path, "CPU")`` as users call it, in a child process with GenAI's log on: it
    builds its paged-attention pipeline (no fallback reported) and the tokens are eager's."""
    import subprocess
    import sys

    model, path = llama
    ids = _prompt(12, model.config.vocab_size)
    env = {**os.environ, "OPENVINO_LOG_LEVEL": "2"}  # warnings: a fallback is one
    args = [sys.executable, "-c", _DEFAULT_BACKEND, str(path), json.dumps(ids[0].tolist()), "16"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == _eager(model, ids, 16)
    assert "Falling back" not in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]


def test_directory_is_what_genai_reads(llama):
    """Inputs and outputs by GenAI's names, the cache as state with an empty [batch, heads, 0, head]
    start, the KV precision as a run-time option, and the tokenizer and config files beside it."""
    model, path = llama
    ir = ov.Core().read_model(path / "openvino_model.xml")
    assert [p.get_any_name() for p in ir.inputs] == ["input_ids", "attention_mask", "position_ids", "beam_idx"]
    assert [p.get_any_name() for p in ir.outputs] == ["logits"]
    # GenAI finds the output layer as the logits' producer and multiplies only a prompt's last
    # position by it (its slice-before-matmul): a Reshape or Convert in between made it multiply all.
    assert ir.output("logits").get_node().input_value(0).get_node().get_type_name() == "MatMul"
    assert {p.get_any_name(): p.get_element_type().get_type_name() for p in ir.inputs} == {
        "input_ids": "i64",
        "attention_mask": "i64",
        "position_ids": "i64",
        "beam_idx": "i32",
    }
    layout = kv_layout(model)
    kinds = [op.get_type_name() for op in ir.get_ops()]
    assert kinds.count("ReadValue") == kinds.count("Assign") == 2 * layout.layers
    starts = {str(op.get_input_partial_shape(0)) for op in ir.get_ops() if op.get_type_name() == "ReadValue"}
    assert starts == {f"[?,{layout.kv_heads},0,{layout.head_dim}]"}
    assert ir.get_rt_info(["runtime_options", "KV_CACHE_PRECISION"]).astype(str) == "f32"
    request = ov.Core().compile_model(ir, "CPU", F32).create_infer_request()
    assert len(request.query_state()) == 2 * layout.layers
    files = {p.name for p in path.iterdir()}
    expected = {"openvino_tokenizer.xml", "openvino_detokenizer.xml", "config.json", "generation_config.json"}
    assert expected <= files
    assert json.loads((path / "config.json").read_text())["model_type"] == "llama"


def test_attention_runs_fused_with_its_cache(llama):
    """The CPU plugin runs each layer's attention as one node that appends to the cache itself
    (its stateful SDPA fusion), not as MatMul + Softmax over a concatenated copy of the cache, and
    the rotary embeddings as its RoPE nodes: the form optimum-intel's IRs get, and what decode and
    first-token speed depend on (stateful.attention_fusable)."""
    model, path = llama
    compiled = ov.Core().compile_model(str(path / "openvino_model.xml"), "CPU", F32)
    kinds = [op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()]
    assert kinds.count("ScaledDotProductAttention") == model.config.num_hidden_layers, sorted(set(kinds))
    assert "Softmax" not in kinds
    assert kinds.count("RoPE") == 2 * model.config.num_hidden_layers  # queries and keys


def test_gated_mlp_is_in_the_form_the_plugin_fuses(llama):
    """Each layer's SiLU is the one-input Swish the CPU plugin's MLP fusion matches
    (export/llm/kernels.py); where the plugin has its fused kernel (AMX, bf16) every layer's gate,
    up and down products run as one LLMMLP node, as in optimum-intel's IR."""
    model, path = llama
    ir = ov.Core().read_model(path / "openvino_model.xml")
    swishes = [op for op in ir.get_ops() if op.get_type_name() == "Swish"]
    assert len(swishes) == model.config.num_hidden_layers
    assert all(op.get_input_size() == 1 for op in swishes)
    if "amx_tile" not in cpu_features():
        return  # the kernel exists only on AMX CPUs; the IR's form is what is checked elsewhere
    compiled = ov.Core().compile_model(ir, "CPU", {"INFERENCE_PRECISION_HINT": "bf16"})
    kinds = [op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()]
    assert kinds.count("LLMMLP") == model.config.num_hidden_layers, sorted(set(kinds))


def test_state_steps_and_beam_idx_reorders_the_cache(llama):
    """Plain OpenVINO, two rows: a prefill, then one step with ``beam_idx = [1, 0]``. The step's
    logits equal eager's with the rows of the cache swapped: the state holds the cache and
    ``beam_idx`` picks its rows."""
    model, path = llama
    request = ov.Core().compile_model(path / "openvino_model.xml", "CPU", F32).create_infer_request()
    ids = torch.cat([_prompt(6, 1000, seed=s) for s in (3, 4)])
    step = torch.tensor([[7], [9]])

    def run(tokens: torch.Tensor, past: int, beams: list[int]) -> np.ndarray:
        length = tokens.shape[1]
        request.infer(
            {
                "input_ids": tokens.numpy(),
                "attention_mask": np.ones((2, past + length), dtype=np.int64),
                "position_ids": np.tile(np.arange(past, past + length), (2, 1)),
                "beam_idx": np.array(beams, dtype=np.int32),
            }
        )
        return request.get_tensor("logits").data.copy()

    prefill = run(ids, 0, [0, 1])
    decode = run(step, 6, [1, 0])
    with torch.no_grad():
        layout = kv_layout(model)
        empty = [torch.zeros(2, layout.kv_heads, 0, layout.head_dim) for _ in range(2 * layout.layers)]
        flat = FlatKVDecoder(model, layout.layers)
        first = flat(ids, torch.ones(2, 6, dtype=torch.long), torch.arange(6).expand(2, 6), empty)
        swapped = [t[[1, 0]] for t in first[1:]]
        second = flat(step, torch.ones(2, 7, dtype=torch.long), torch.tensor([[6], [6]]), swapped)
    np.testing.assert_allclose(prefill, first[0].numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(decode, second[0].numpy(), atol=1e-4, rtol=1e-4)


def test_left_padded_rows_equal_eager_where_they_are_read(llama):
    """Plain OpenVINO, a batch of a 4-token prompt left-padded to 7 beside a 7-token one, then one
    step: every position that is not padding gives eager's logits, and none is NaN. (Pad query rows
    see no key; the IR unmasks them rather than zeroing them after attention, see paged.py, so
    their own outputs are a finite average nothing reads.)"""
    model, path = llama
    request = ov.Core().compile_model(path / "openvino_model.xml", "CPU", F32).create_infer_request()
    ids = torch.cat([_prompt(7, 1000, seed=5), _prompt(7, 1000, seed=6)])
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, :3] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    step = torch.tensor([[11], [13]])
    step_mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], dim=1)
    step_positions = positions[:, -1:] + 1

    def run(tokens, attention, where):
        request.infer(
            {
                "input_ids": tokens.numpy(),
                "attention_mask": attention.numpy(),
                "position_ids": where.numpy(),
                "beam_idx": np.array([0, 1], dtype=np.int32),
            }
        )
        return request.get_tensor("logits").data.copy()

    prefill, decode = run(ids, mask, positions), run(step, step_mask, step_positions)
    assert not np.isnan(prefill).any() and not np.isnan(decode).any()
    with torch.no_grad():
        layout = kv_layout(model)
        empty = [torch.zeros(2, layout.kv_heads, 0, layout.head_dim) for _ in range(2 * layout.layers)]
        flat = FlatKVDecoder(model, layout.layers)
        first = flat(ids, mask, positions, empty)
        second = flat(step, step_mask, step_positions, list(first[1:]))
    real = mask.bool().numpy()
    np.testing.assert_allclose(prefill[real], first[0].numpy()[real], atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(decode, second[0].numpy(), atol=1e-4, rtol=1e-4)


def test_text_in_text_out_through_the_tokenizer_irs(llama, tokenizer):
    """A string prompt: GenAI's tokenizer IR encodes it as the Hugging Face tokenizer does, and
    its detokenizer decodes eager's greedy tokens to the same text."""
    model, path = llama
    prompt = "the quick brown fox"
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    want = tokenizer.decode(_eager(model, ids, 12), skip_special_tokens=True)
    pipe = ov_genai.LLMPipeline(str(path), "CPU", **PIPELINE)
    config = ov_genai.GenerationConfig(max_new_tokens=12, min_new_tokens=12, ignore_eos=True, do_sample=False)
    assert pipe.get_tokenizer().encode(prompt).input_ids.data.tolist() == ids.tolist()
    assert pipe.generate(prompt, config) == want


def _product_weights(path) -> set[str]:
    """The weight types the CPU plugin's products (FullyConnected) read in the compiled IR."""
    compiled = ov.Core().compile_model(path / "openvino_model.xml", "CPU", F32)
    return {
        op.inputs()[1].get_element_type().get_type_name()
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    }


@pytest.mark.parametrize(("weights", "types", "same"), [("int8", {"u8"}, 8), ("int4", {"i4", "u8"}, 2)])
def test_compressed_weights(llama, tokenizer, tmp_path, weights, types, same):
    """NNCF's int8 (per channel) and int4 (groups, the embedding and output layer in int8) on the IR:
    the products read 8- and 4-bit weights, the weights file shrinks, and GenAI's greedy tokens
    start as eager f32's do (random weights give flat distributions, so compressed weights part
    from f32's after a few tokens: 17 for int8 and 4 for int4 at the time of writing)."""
    model, f32 = llama
    path = export_llm(model, tokenizer, tmp_path, weights=weights, progress=False)
    assert _product_weights(path) == types
    size = (path / "openvino_model.bin").stat().st_size
    assert size < 0.3 * (f32 / "openvino_model.bin").stat().st_size
    ids = _prompt(12, model.config.vocab_size)
    pipe = ov_genai.LLMPipeline(str(path), "CPU", **PIPELINE)
    assert _genai(pipe, ids, same) == _eager(model, ids, same)


@pytest.mark.parametrize("bits", [8, 4])
def test_torchao_quantized_model_exports_as_it_runs(tokenizer, tmp_path, bits):
    """A model quantized in PyTorch (torchao weight-only int8, int4 in groups of 32) exports with
    ``weights="f32"`` ("as they are"): its products read i8/i4 weights and GenAI's greedy tokens
    equal the quantized model's own."""
    from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, PerGroup, quantize_

    model = _decoder("llama")
    quantize_(model, Int8WeightOnlyConfig() if bits == 8 else IntxWeightOnlyConfig(torch.int4, PerGroup(32)))
    ids = _prompt(12, model.config.vocab_size)
    expected = _eager(model, ids, 32)
    path = export_llm(model, tokenizer, tmp_path, progress=False)
    assert _product_weights(path) == {"i8" if bits == 8 else "i4"}
    assert _genai(ov_genai.LLMPipeline(str(path), "CPU", **PIPELINE), ids, 32) == expected


def test_unknown_weights_name_the_valid_ones(llama, tmp_path):
    model, _ = llama
    with pytest.raises(ValueError, match="valid: f32, int8, int4"):
        export_llm(model, None, tmp_path, weights="fp8", progress=False)


def test_special_ids_past_the_logits_are_not_written():
    """GenAI indexes the logits by the end token unchecked: an id past them is left out of the
    configs written (with a warning), and a tokenizer whose end token is past them is refused."""
    from types import SimpleNamespace

    from transformers import GenerationConfig

    from fxvino.export.llm.api import _check_tokenizer_ids, _in_vocab

    config = GenerationConfig(bos_token_id=1, eos_token_id=[2, 50256], pad_token_id=0)
    with pytest.warns(UserWarning, match="without {'eos_token_id': \\[2, 50256\\]}"):
        written = _in_vocab(config, 1000, "generation_config.json")
    assert (written.bos_token_id, written.eos_token_id, written.pad_token_id) == (1, [2], 0)
    assert config.eos_token_id == [2, 50256]  # the model's own config is left as it was
    assert _in_vocab(written, 1000, "generation_config.json") is written
    with pytest.raises(ValueError, match="end token 1000 is outside the model's 1000 tokens"):
        _check_tokenizer_ids(SimpleNamespace(eos_token_id=1000), 1000)
