"""``fxvino.export.llm.export_llm`` run by the real client, OpenVINO GenAI's ``LLMPipeline``.

Every architecture of tests/test_generate.py (small configs, random weights, a BPE trained
offline as the tokenizer) is exported and generated with by GenAI; its greedy tokens must equal
eager ``model.generate()``'s. The pipeline is asked for f32 (``INFERENCE_PRECISION_HINT``): on a
CPU with bf16 kernels OpenVINO would otherwise compute in bf16, and it does not read that hint
from the model file. The KV cache must be OpenVINO state (ReadValue/Assign, ``query_state()``),
and ``beam_idx`` must reorder it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from benchmarks import models

from test_generate import ARCHS

ov_genai = pytest.importorskip("openvino_genai")
pytest.importorskip("openvino_tokenizers")

import openvino as ov  # noqa: E402 - after the skips: without GenAI nothing here runs

from fxvino.export.llm import export_llm  # noqa: E402
from fxvino.export.llm.decoder import FlatKVDecoder, kv_layout  # noqa: E402
from fxvino.export.llm.tokenizer import train_bpe  # noqa: E402

pytestmark = pytest.mark.slow

F32 = {"INFERENCE_PRECISION_HINT": "f32"}


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
def test_genai_greedy_tokens_equal_eager(name, tokenizer, tmp_path):
    """32 new tokens from a 12-token prompt, then 16 from a 5-token one in the same pipeline (GenAI
    resets the state between generate() calls). Mistral's and Gemma's sliding windows of 8 are
    crossed: their state holds every position and the model's own masks hide the old ones."""
    model = _decoder(name)
    vocab = model.config.vocab_size
    prompts = [(_prompt(12, vocab), 32), (_prompt(5, vocab, seed=1), 16)]
    expected = [_eager(model, ids, n) for ids, n in prompts]
    path = export_llm(model, tokenizer, tmp_path, progress=False)
    pipe = ov_genai.LLMPipeline(str(path), "CPU", **F32)
    for (ids, n), want in zip(prompts, expected, strict=True):
        assert _genai(pipe, ids, n) == want, f"{name}: tokens differ from eager at prompt length {ids.shape[1]}"


def test_directory_is_what_genai_reads(llama):
    """Inputs and outputs by GenAI's names, the cache as state with an empty [batch, heads, 0, head]
    start, the KV precision as a run-time option, and the tokenizer and config files beside it."""
    model, path = llama
    ir = ov.Core().read_model(path / "openvino_model.xml")
    assert [p.get_any_name() for p in ir.inputs] == ["input_ids", "attention_mask", "position_ids", "beam_idx"]
    assert [p.get_any_name() for p in ir.outputs] == ["logits"]
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


def test_text_in_text_out_through_the_tokenizer_irs(llama, tokenizer):
    """A string prompt: GenAI's tokenizer IR encodes it as the Hugging Face tokenizer does, and
    its detokenizer decodes eager's greedy tokens to the same text."""
    model, path = llama
    prompt = "the quick brown fox"
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    want = tokenizer.decode(_eager(model, ids, 12), skip_special_tokens=True)
    pipe = ov_genai.LLMPipeline(str(path), "CPU", **F32)
    config = ov_genai.GenerationConfig(max_new_tokens=12, min_new_tokens=12, ignore_eos=True, do_sample=False)
    assert pipe.get_tokenizer().encode(prompt).input_ids.data.tolist() == ids.tolist()
    assert pipe.generate(prompt, config) == want


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_compressed_weights_are_not_there_yet(llama, weights, tmp_path):
    model, _ = llama
    with pytest.raises(NotImplementedError, match="valid today: 'f32'"):
        export_llm(model, None, tmp_path, weights=weights, progress=False)


def test_unknown_weights_name_the_valid_ones(llama, tmp_path):
    model, _ = llama
    with pytest.raises(ValueError, match="valid: f32, int8, int4"):
        export_llm(model, None, tmp_path, weights="fp8", progress=False)
