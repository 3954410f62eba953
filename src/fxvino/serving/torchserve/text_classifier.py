"""``--handler fxvino.serving.torchserve.text_classifier``: text or token ids to labels."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import torch

from fxvino.serving.inputs import body, pad_batch, token_ids
from fxvino.serving.models import load_pretrained
from fxvino.serving.torchserve.base import FxvinoHandler


class FxvinoTextClassifier(FxvinoHandler):
    """A transformers sequence classifier (``save_pretrained`` files in the archive), e.g.
    ``BertForSequenceClassification``; its tokenizer too if the text is to be sent as text.

    A request is ``{"input_ids": [...]}``, ``{"text": "..."}`` or a plain-text body. Every batch
    is padded to ``handler.max_length``, so one compiled graph serves every request length.
    The answer is ``{"label", "index", "scores"}``, plus ``"logits"`` with
    ``handler.return_logits: true``.

    ``handler:`` keys: ``max_length`` (default 128), ``return_logits`` (false).
    """

    SETTINGS: ClassVar[tuple[str, ...]] = (*FxvinoHandler.SETTINGS, "max_length", "return_logits")

    def build_model(self, model_dir: str) -> torch.nn.Module:
        from transformers import AutoTokenizer

        self.max_length = int(self.settings.get("max_length", 128))
        model = load_pretrained(model_dir, "text_classifier")
        self.id2label = model.model.config.id2label
        self.pad_id = model.model.config.pad_token_id or 0
        has_tokenizer = any(
            os.path.exists(os.path.join(model_dir, f)) for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")
        )
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir) if has_tokenizer else None
        return model

    def example(self, batch_size: int) -> dict[str, torch.Tensor]:
        ids, mask = pad_batch([[1] * (self.max_length // 2)] * batch_size, self.max_length, self.pad_id)
        return {"input_ids": ids, "attention_mask": mask}

    def decode(self, row: Any) -> list[int]:
        return token_ids(body(row), self.tokenizer, self.max_length)

    def collate(self, samples: list[list[int]]) -> dict[str, torch.Tensor]:
        ids, mask = pad_batch(samples, self.max_length, self.pad_id)
        return {"input_ids": ids, "attention_mask": mask}

    def answer(self, output: torch.Tensor, count: int) -> list[Any]:
        probs = torch.softmax(output.float(), dim=-1)
        answers = []
        for i in range(count):
            index = int(probs[i].argmax())
            answer: dict[str, Any] = {
                "label": str(self.id2label.get(index, index)),
                "index": index,
                "scores": probs[i].tolist(),
            }
            if self.settings.get("return_logits"):
                answer["logits"] = output[i].tolist()
            answers.append(answer)
        return answers
