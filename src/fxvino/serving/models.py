"""Models to serve in the examples, tests and benchmark: transformers classifiers with random
weights, saved with ``save_pretrained`` (nothing is downloaded).

``TINY_*`` configurations keep the end-to-end tests fast on two cores; the defaults are
ResNet-50 and BERT-base.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import torch

TINY_RESNET: dict[str, Any] = {"embedding_size": 16, "hidden_sizes": [32, 64], "depths": [1, 1], "num_labels": 10}
TINY_BERT: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 128,
    "num_labels": 3,
}

_WORDS = ("the", "a", "is", "was", "of", "and", "to", "it", "this", "movie", "good", "bad", "great", "not", "very")


class Logits(torch.nn.Module):
    """A transformers classifier seen as ``inputs -> logits``: one tensor out to compile and serve."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self.model(*args, **kwargs).logits


def load_pretrained(directory: str | Path, task: str) -> torch.nn.Module:
    """A transformers classifier saved with ``save_pretrained``, as :class:`Logits`.

    ``task`` is ``image_classifier`` or ``text_classifier``.
    """
    import transformers

    classes = {
        "image_classifier": transformers.AutoModelForImageClassification,
        "text_classifier": transformers.AutoModelForSequenceClassification,
    }
    if task not in classes:
        raise ValueError(f"unknown task {task!r}; valid: {', '.join(classes)}")
    return Logits(classes[task].from_pretrained(directory)).eval()


def image_classifier(seed: int = 0, **config: Any) -> torch.nn.Module:
    """``ResNetForImageClassification`` (ResNet-50 by default) with non-trivial batch-norm statistics."""
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(seed)
    model = ResNetForImageClassification(ResNetConfig(**config))
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            torch.nn.init.uniform_(m.weight, 0.5, 1.5)
    return model.eval()


def text_classifier(seed: int = 0, **config: Any) -> torch.nn.Module:
    """``BertForSequenceClassification`` (BERT-base by default)."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    return BertForSequenceClassification(BertConfig(**config)).eval()


def save_tokenizer(directory: Path) -> Any:
    """A small WordPiece tokenizer (special tokens, characters, a few words) saved beside the model,
    so the example can be sent plain text."""
    from transformers import BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    chars = string.ascii_lowercase + string.digits + string.punctuation
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars), *_WORDS]
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(vocab)})
    tokenizer.save_pretrained(directory)
    return tokenizer


def save(model: torch.nn.Module, directory: Path) -> list[Path]:
    """``save_pretrained`` into ``directory``; returns the files to archive."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    return sorted(p for p in directory.iterdir() if p.is_file())
