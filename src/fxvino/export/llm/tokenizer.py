"""The tokenizer and detokenizer IRs GenAI loads beside the decoder, and a tokenizer for random weights.

GenAI tokenizes in OpenVINO too: ``ov::genai::Tokenizer(path)`` reads ``openvino_tokenizer.xml`` and
``openvino_detokenizer.xml``, which ``openvino_tokenizers.convert_tokenizer`` makes from a Hugging
Face tokenizer. The special tokens' ids come from those IRs' rt_info, else ``config.json`` and
``special_tokens_map.json`` (``tokenizer_impl.cpp``), so the Hugging Face files are saved too.

Models built from a config (tests, demos, benchmarks: no downloads) have no tokenizer of their
own; :func:`train_bpe` makes one offline so that GenAI's text-in, text-out path can be run on them.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import openvino as ov

TOKENIZER_XML = "openvino_tokenizer.xml"
DETOKENIZER_XML = "openvino_detokenizer.xml"
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")  # ids 0, 1, 2: Llama's bos and eos ids among them


def train_bpe(vocab_size: int, *, seed: int = 0) -> Any:
    """A byte-level BPE of exactly ``vocab_size`` tokens, trained on a corpus generated from ``seed``.

    The corpus is pseudo-words over skewed letter sets, varied enough that BPE finds merges up to
    any vocabulary a small test config asks for (1,000 in the model suite) in under a second. It is
    generated rather than read from files so that the same seed gives the same vocabulary anywhere.
    Returns a ``transformers`` fast tokenizer with ``<pad>``, ``<s>`` and ``</s>`` as ids 0, 1 and 2.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    words = ["".join(rng.choice(letters[: rng.randint(5, 26)]) for _ in range(rng.randint(1, 9))) for _ in range(3000)]
    corpus = [" ".join(rng.choice(words) for _ in range(20)) for _ in range(max(2000, vocab_size * 2))]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    if bpe.get_vocab_size() != vocab_size:
        raise ValueError(f"train_bpe: the generated corpus gave {bpe.get_vocab_size()} tokens, not {vocab_size}")
    pad, bos, eos = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token=pad, bos_token=bos, eos_token=eos)


def convert(tokenizer: Any) -> tuple[ov.Model, ov.Model]:
    """``tokenizer`` as GenAI's tokenizer and detokenizer models.

    Padding goes on the left, as for every decoder GenAI batches: the last position of each row
    must be its last real token, the one whose logits pick the next token.
    """
    from openvino_tokenizers import convert_tokenizer

    tokenizer.padding_side = "left"
    tokenizer.truncation_side = "left"
    converted = convert_tokenizer(tokenizer, with_detokenizer=True)
    if not isinstance(converted, tuple) or len(converted) != 2:
        raise ValueError(f"openvino_tokenizers gave no detokenizer for {type(tokenizer).__name__}")
    return converted


def save(tokenizer: Any, directory: Path) -> None:
    """The Hugging Face files and the two IRs in ``directory``."""
    tokenizer.save_pretrained(directory)
    encoder, decoder = convert(tokenizer)
    ov.save_model(encoder, directory / TOKENIZER_XML)
    ov.save_model(decoder, directory / DETOKENIZER_XML)
