"""``--handler fxvino.serving.torchserve.image_classifier``: images to top-k classes."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from fxvino.serving.inputs import BadRequest, body, image_tensor, tensor_from_json
from fxvino.serving.models import load_pretrained
from fxvino.serving.torchserve.base import FxvinoHandler


class FxvinoImageClassifier(FxvinoHandler):
    """A transformers image classifier (``save_pretrained`` files in the archive: ``config.json``
    and ``model.safetensors``), e.g. ``ResNetForImageClassification``.

    A request is an encoded image (PNG, JPEG, ...: resized, centre-cropped and normalised like
    ImageNet evaluation) or ``{"data": <[3, S, S] nested list>}`` of pixels already prepared.
    The answer is ``{"top_k": [{"index", "label", "score"}, ...]}``, plus ``"logits"`` with
    ``handler.return_logits: true``. Labels come from ``index_to_name.json`` or the config's
    ``id2label``.

    ``handler:`` keys: ``image_size`` (default 224), ``top_k`` (5), ``return_logits`` (false).
    """

    SETTINGS: ClassVar[tuple[str, ...]] = (*FxvinoHandler.SETTINGS, "image_size", "top_k", "return_logits")

    def build_model(self, model_dir: str) -> torch.nn.Module:
        self.size = int(self.settings.get("image_size", 224))
        self.top_k = int(self.settings.get("top_k", 5))
        model = load_pretrained(model_dir, "image_classifier")
        self.id2label = model.model.config.id2label
        return model

    def example(self, batch_size: int) -> tuple[torch.Tensor]:
        return (torch.randn(batch_size, 3, self.size, self.size),)

    def decode(self, row: Any) -> torch.Tensor:
        value = body(row)
        if isinstance(value, bytes):
            return image_tensor(value, self.size)
        if isinstance(value, (dict, list)):
            return tensor_from_json(value, (3, self.size, self.size), torch.float32)
        raise BadRequest("expected an image file or {'data': [3, size, size] pixels}")

    def collate(self, samples: list[torch.Tensor]) -> tuple[torch.Tensor]:
        return (torch.stack(samples),)

    def answer(self, output: torch.Tensor, count: int) -> list[Any]:
        probs = torch.softmax(output.float(), dim=-1)
        scores, indices = probs.topk(min(self.top_k, probs.shape[-1]), dim=-1)
        answers = []
        for i in range(count):
            top = [
                {"index": int(j), "label": self._label(int(j)), "score": float(s)}
                for s, j in zip(scores[i], indices[i], strict=True)
            ]
            answer: dict[str, Any] = {"top_k": top}
            if self.settings.get("return_logits"):
                answer["logits"] = output[i].tolist()
            answers.append(answer)
        return answers

    def _label(self, index: int) -> str:
        if self.mapping and str(index) in self.mapping:
            return str(self.mapping[str(index)])
        return str(self.id2label.get(index, index))
