"""``--handler fxvino.serving.torchserve.tensor_handler``: JSON tensors in, JSON tensors out."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import torch

from fxvino.serving.inputs import NPY_MAGIC, body, dtype_named, tensor_from_json, tensor_from_npy
from fxvino.serving.loading import ServingConfigError
from fxvino.serving.torchserve.base import FxvinoHandler


class FxvinoTensorHandler(FxvinoHandler):
    """Any ``torch.nn.Module`` taking one tensor: archive its class with ``--model-file`` and its
    state dict with ``--serialized-file``. A request is ``{"data": <nested list>}`` (or a ``.npy``
    file) of one sample of ``handler.input_shape``; the answer is the model's output row as a nested list.

    ``handler:`` keys: ``input_shape`` (one sample, required: the warm-up needs it),
    ``input_dtype`` (default ``float32``).
    """

    SETTINGS: ClassVar[tuple[str, ...]] = (*FxvinoHandler.SETTINGS, "input_shape", "input_dtype")

    def build_model(self, model_dir: str) -> torch.nn.Module:
        shape = self.settings.get("input_shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d > 0 for d in shape):
            raise ServingConfigError("handler.input_shape must be the shape of one sample, e.g. [3, 224, 224]")
        self.shape = tuple(shape)
        self.dtype = dtype_named(self.settings.get("input_dtype", "float32"))
        model_file = self.manifest["model"].get("modelFile", "")
        if not model_file:
            raise ServingConfigError("archive the model's class with torch-model-archiver --model-file")
        serialized = self.manifest["model"].get("serializedFile")
        weights = os.path.join(model_dir, serialized) if serialized else None
        return self._load_pickled_model(model_dir, model_file, weights)

    def example(self, batch_size: int) -> tuple[torch.Tensor]:
        if self.dtype.is_floating_point:
            return (torch.randn(batch_size, *self.shape, dtype=self.dtype),)
        return (torch.zeros(batch_size, *self.shape, dtype=self.dtype),)

    def decode(self, row: Any) -> torch.Tensor:
        value = body(row)
        if isinstance(value, bytes) and value.startswith(NPY_MAGIC):
            return tensor_from_npy(value, self.shape, self.dtype)
        return tensor_from_json(value, self.shape, self.dtype)

    def collate(self, samples: list[torch.Tensor]) -> tuple[torch.Tensor]:
        return (torch.stack(samples),)

    def answer(self, output: Any, count: int) -> list[Any]:
        return [row.tolist() for row in output[:count]]
