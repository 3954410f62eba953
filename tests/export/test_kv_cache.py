"""Decoders export with their KV cache: a causal LM called with ``use_cache=True`` (transformers'
default) returns a ``DynamicCache``, and one called with a cache takes it. ``fxvino.export``
registers ``DynamicCache`` with pytree (transformers' own torch.export support), the manifest
records it, and ``fxvino.load`` rebuilds it (or, where transformers cannot be imported, gives
dicts of its keys). Logits and every cached tensor equal eager's, at sizes other than the example's.
"""

from __future__ import annotations

import copy
import inspect
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.export import Dim

import fxvino

transformers = pytest.importorskip("transformers")

TOL = {"rtol": 1e-4, "atol": 1e-5}
VOCAB = 128


def _gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


def _llama() -> torch.nn.Module:
    """Grouped-query attention (2 KV heads for 4 query heads) and rotary positions."""
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config)


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def decoder(request) -> torch.nn.Module:
    torch.manual_seed(0)
    return {"gpt2": _gpt2, "llama": _llama}[request.param]().eval()


def _ids(batch: int, length: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _cache_arg(model: torch.nn.Module) -> str:
    """The keyword that takes a cache: ``cache`` in transformers 5, ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache(out: Any) -> Any:
    """The result's cache (transformers 5 names the field ``cache``; earlier ``past_key_values``)."""
    return out["cache"] if "cache" in out else out["past_key_values"]


def _assert_same_cache(got: Any, expected: Any) -> None:
    assert type(got) is type(expected) and len(got.layers) == len(expected.layers)
    for mine, theirs in zip(got.layers, expected.layers, strict=True):
        torch.testing.assert_close(mine.keys, theirs.keys, **TOL)
        torch.testing.assert_close(mine.values, theirs.values, **TOL)


def _dims() -> dict[int, Dim]:
    return {0: Dim("batch", min=1, max=4), 1: Dim("seq", min=1, max=32)}


@pytest.fixture(scope="module")
def prefill(decoder, tmp_path_factory) -> tuple[Any, Path]:
    """The decoder exported with its default ``use_cache=True``: logits and a DynamicCache."""
    exported = fxvino.export(decoder, (), {"input_ids": _ids(2, 8)}, dynamic_shapes={"input_ids": _dims()})
    return exported, exported.save(tmp_path_factory.mktemp("prefill") / "ir")


@pytest.mark.parametrize("shape", [(2, 8), (1, 5), (3, 17)])
def test_the_cache_comes_back_as_a_dynamic_cache(decoder, prefill, shape):
    exported, saved = prefill
    ids = _ids(*shape, seed=1)
    with torch.no_grad():
        expected = decoder(input_ids=ids)
    for out in (exported(input_ids=ids), fxvino.load(saved)(input_ids=ids)):
        torch.testing.assert_close(out.logits, expected.logits, **TOL)
        _assert_same_cache(_cache(out), _cache(expected))
    names = [p.any_name for p in exported.ov_model.outputs]
    assert names[0] == "logits" and len(names) == 1 + 2 * len(_cache(expected).layers), names
    assert {n.rpartition(".")[0].rpartition(".")[2] for n in names[1:]} == {"key_cache", "value_cache"}, names
    assert not exported.report.torch_ops and not exported.report.fallbacks


def test_the_manifest_names_the_cache_type(prefill):
    _, saved = prefill
    manifest = json.loads((saved / "fxvino_manifest.json").read_text())
    assert "transformers.cache_utils.DynamicCache" in json.dumps(manifest["out_spec"])


def test_without_transformers_the_cache_is_a_dict_of_lists(decoder, prefill, tmp_path, caplog):
    """Where the cache's type cannot be imported, the result keeps its keys in plain containers."""
    _, saved = prefill
    moved = tmp_path / "moved"
    shutil.copytree(saved, moved)
    path = moved / "fxvino_manifest.json"
    text = path.read_text().replace("transformers.cache_utils.DynamicCache", "fxvino_no_such_package.DynamicCache")
    path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="fxvino"):
        loaded = fxvino.load(moved)
    assert "fxvino_no_such_package.DynamicCache cannot be imported here" in caplog.text
    ids = _ids(1, 6, seed=2)
    out = loaded(input_ids=ids)
    with torch.no_grad():
        expected = _cache(decoder(input_ids=ids))
    cache = _cache(out)
    assert type(cache) is dict and list(cache) == ["key_cache", "value_cache"]
    for k, layer in enumerate(expected.layers):
        torch.testing.assert_close(cache["key_cache"][k], layer.keys, **TOL)
        torch.testing.assert_close(cache["value_cache"][k], layer.values, **TOL)


def test_a_decode_step_takes_the_cache(decoder, tmp_path):
    """The cache as an input (``cache``/``past_key_values``), its length a dynamic dim: the IR's result for
    new tokens over a prefill's cache equals eager's, logits and the grown cache. Eager appends to
    the cache it is given; the IR returns a new one and leaves the given one as it was."""
    layers, arg = decoder.config.num_hidden_layers, _cache_arg(decoder)
    with torch.no_grad():
        past = _cache(decoder(input_ids=_ids(2, 6)))
    batch, past_len = Dim("batch", min=1, max=4), Dim("past", min=1, max=32)
    per_layer = [{0: batch, 2: past_len}] * layers
    exported = fxvino.export(
        decoder,
        (),
        {"input_ids": _ids(2, 2, seed=3), arg: copy.deepcopy(past)},
        dynamic_shapes={"input_ids": {0: batch, 1: Dim("new", min=1, max=8)}, arg: [per_layer, per_layer]},
    )
    assert not exported.report.torch_ops and not exported.report.fallbacks
    loaded = fxvino.load(exported.save(tmp_path / "ir"))
    for batch, prompt, new in ((2, 6, 1), (1, 11, 3)):
        with torch.no_grad():
            given = _cache(decoder(input_ids=_ids(batch, prompt, seed=4)))
            before = [layer.keys.clone() for layer in given.layers]
            expected = decoder(input_ids=_ids(batch, new, seed=5), **{arg: copy.deepcopy(given)})
        for model in (exported, loaded):
            out = model(input_ids=_ids(batch, new, seed=5), **{arg: given})
            torch.testing.assert_close(out.logits, expected.logits, **TOL)
            _assert_same_cache(_cache(out), _cache(expected))
            assert all(torch.equal(a.keys, b) for a, b in zip(given.layers, before, strict=True))
