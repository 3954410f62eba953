"""``export_llm``: a transformers causal LM and its tokenizer as a directory OpenVINO GenAI loads."""

from __future__ import annotations

import copy
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openvino as ov

from fxvino.export.model import ExportedModel
from fxvino.utils.collector import gc_paused

from . import kernels, paged, stateful
from . import tokenizer as tokenizers
from .decoder import FlatKVDecoder, example_inputs, kv_layout
from .weights import compress

MODEL_XML = "openvino_model.xml"
WEIGHTS = ("f32", "int8", "int4")


def _print(msg: str) -> None:
    print(f"[export-llm] {msg}", file=sys.stderr, flush=True)


class _Progress:
    """Messages for the steps that take seconds to minutes (capture, lowering, writing), with
    their times; ``print`` to stderr, a caller's function, or nothing."""

    def __init__(self, progress: bool | Callable[[str], None]):
        self.say: Callable[[str], None] | None = _print if progress is True else (progress or None)
        self.start = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if self.say is not None:
            self.say(f"{msg} ({time.perf_counter() - self.start:.1f} s)")


def export_llm(
    model: Any,
    tokenizer: Any,
    path: str | Path,
    *,
    weights: str = "f32",
    group_size: int = 128,
    kv_cache_precision: str | None = "f32",
    progress: bool | Callable[[str], None] = True,
) -> Path:
    """Write ``model`` (a transformers causal LM) and ``tokenizer`` (its Hugging Face tokenizer) to
    ``path`` as a stateful decoder IR with its tokenizer IRs, for ``openvino_genai.LLMPipeline``.

    ``weights``: ``"f32"`` keeps the model's weights as they are (a model quantized in PyTorch
    exports as it runs); ``"int8"`` compresses every product's weights to 8 bits per output
    channel, ``"int4"`` to 4 bits in groups of ``group_size`` inputs with the embedding and output
    layer in 8 bits (NNCF on the IR: ``weights.py``). ``kv_cache_precision`` is stored
    in the IR as a run-time option OpenVINO applies when it compiles the model: ``"f32"`` keeps the
    cache exact (OpenVINO's CPU default is u8, which changes logits), ``None`` leaves the device's
    default. Greedy tokens equal eager PyTorch's when the pipeline also computes in f32: on CPUs
    with bf16 kernels pass ``INFERENCE_PRECISION_HINT="f32"`` to ``LLMPipeline`` (OpenVINO does not
    read that hint from the model file). Special token ids past the model's logits are left out of
    the config files written, with a warning (GenAI would index the logits by them unchecked), and a
    tokenizer whose end token is past them is refused. Returns the directory.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"export_llm: weights={weights!r}; valid: {', '.join(WEIGHTS)}")
    say = _Progress(progress)
    directory = Path(path).expanduser()
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"export_llm: {directory} is a file; give a directory to write the model into")

    exported = stateful_decoder(model, say)
    decoder = exported.ov_model
    if weights != "f32":
        decoder = compress(decoder, weights, group_size)
        say(f"weights compressed to {weights}")
    if kv_cache_precision is not None:
        decoder.set_rt_info(kv_cache_precision, ["runtime_options", "KV_CACHE_PRECISION"])
    vocab = decoder.output(stateful.LOGITS).get_partial_shape()[-1].get_length()
    _check_tokenizer_ids(tokenizer, vocab)
    directory.mkdir(parents=True, exist_ok=True)
    ov.save_model(decoder, directory / MODEL_XML, compress_to_fp16=False)
    say(f"wrote {MODEL_XML}")
    _in_vocab(model.config, vocab, "config.json").save_pretrained(directory)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        _in_vocab(generation, vocab, "generation_config.json").save_pretrained(directory)
    tokenizers.save(tokenizer, directory)
    say(f"wrote {tokenizers.TOKENIZER_XML} and {tokenizers.DETOKENIZER_XML}")
    return directory


# The special tokens GenAI reads off config.json and generation_config.json. Its sampler indexes
# the logits by the stop tokens without a bounds check (``EOSPenaltyTransform`` writes -inf at
# ``logits[eos]`` while fewer than ``min_new_tokens`` are generated): an id past the vocabulary
# writes past the logits buffer into the heap.
SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _in_vocab(config: Any, vocab: int, name: str) -> Any:
    """``config`` (a model's config or generation config) to be written as ``name``, its special
    token ids outside ``[0, vocab)`` dropped, with a warning; the model's own object is left as it is.

    A model never produces a token past its logits, so such an id (a small config that kept its
    full-size model's ids, as GPT-2's 50256 and Phi-3's 32000 in 1,000 tokens) never ends
    generation in transformers either; without it GenAI stops on the tokenizer's end token.
    """
    dropped: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    for key in SPECIAL_IDS:
        value = getattr(config, key, None)
        if value is None:
            continue
        ids = [value] if isinstance(value, int) else list(value)
        valid = [i for i in ids if 0 <= i < vocab]
        if len(valid) != len(ids):
            dropped[key] = value
            kept[key] = (valid[0] if valid else None) if isinstance(value, int) else (valid or None)
    if not dropped:
        return config
    warnings.warn(
        f"export_llm: {name} without {dropped}: outside the model's {vocab} tokens (GenAI would write past its "
        "logits at those ids)",
        stacklevel=3,
    )
    config = copy.deepcopy(config)
    for key, value in kept.items():
        setattr(config, key, value)
    return config


def _check_tokenizer_ids(tokenizer: Any, vocab: int) -> None:
    """A tokenizer whose end token is past the model's logits does not belong to the model (GenAI
    stops on it, indexing the logits by it: see ``SPECIAL_IDS``)."""
    eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos, int) and not 0 <= eos < vocab:
        raise ValueError(
            f"export_llm: the tokenizer's end token {eos} is outside the model's {vocab} tokens; "
            "give the model's own tokenizer"
        )


def stateful_decoder(model: Any, say: Callable[[str], None] = lambda msg: None) -> ExportedModel:
    """``model`` as GenAI's stateful decoder: lowered by ``fxvino.export``, its ``ov_model`` then
    given GenAI's names and the KV cache as state (in place).

    The ``ExportedModel`` is returned, not only its ``ov_model``: that model's Constants read the
    module's weights and the tensors folded at export without copying them, which the
    ``ExportedModel`` keeps alive until the IR is written.
    """
    from fxvino.export import export

    model.eval()
    layout = kv_layout(model)
    say(
        f"{type(model).__name__}: {layout.layers} layers caching {layout.kv_heads} heads of {layout.head_dim} "
        f"({str(layout.dtype).removeprefix('torch.')}); capturing and lowering"
    )
    args, shapes = example_inputs(layout, model.config.get_text_config().vocab_size)
    with gc_paused():
        exported = export(FlatKVDecoder(model, layout.layers), args, dynamic_shapes=shapes)
    say(f"lowered: {sum(exported.report.ov_ops.values())} ops")
    stateful.name_ports(exported.ov_model, layout)
    stateful.make_stateful(exported.ov_model, layout)
    kernels.gated_mlp_fusable(exported.ov_model)
    if paged.keeps_windows_only_in_its_masks(model.config):
        say("sliding-window attention: left to GenAI's stateful backend (its paged rewrite would drop the windows)")
    else:
        paged.prepare(exported.ov_model)
    return exported
