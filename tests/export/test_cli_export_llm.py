"""``fxvino export-llm`` as a user runs it: a ``save_pretrained`` directory in, a directory that
OpenVINO GenAI's ``LLMPipeline`` loads out, greedy tokens equal to eager ``generate()``."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import transformers

ov_genai = pytest.importorskip("openvino_genai")
pytest.importorskip("openvino_tokenizers")

import openvino as ov  # noqa: E402 - after the skips

from fxvino.export.llm.tokenizer import train_bpe  # noqa: E402

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "fxvino.tools.cli"]


def test_export_llm_command_writes_what_llmpipeline_runs(tmp_path):
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=1000, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    source = tmp_path / "hf"
    model.save_pretrained(source)
    train_bpe(1000).save_pretrained(source)

    out = tmp_path / "ov"
    run = subprocess.run([*CLI, "export-llm", str(source), str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "LLMPipeline" in run.stdout
    for name in ("openvino_model.xml", "openvino_tokenizer.xml", "openvino_detokenizer.xml", "config.json"):
        assert (out / name).is_file(), name

    ids = torch.randint(3, 1000, (1, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        eager = model.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0)
    pipe = ov_genai.LLMPipeline(str(out), "CPU", INFERENCE_PRECISION_HINT="f32")
    config = ov_genai.GenerationConfig(max_new_tokens=12, min_new_tokens=12, ignore_eos=True, do_sample=False)
    assert list(pipe.generate(ov.Tensor(ids.numpy()), config).tokens[0]) == eager[0, 10:].tolist()


def test_export_llm_command_names_a_directory_it_cannot_use(tmp_path):
    run = subprocess.run([*CLI, "export-llm", str(tmp_path), str(tmp_path / "out")], capture_output=True, text=True)
    assert run.returncode != 0
    assert "no config.json" in run.stderr and "save_pretrained" in run.stderr
    assert not (tmp_path / "out").exists()
