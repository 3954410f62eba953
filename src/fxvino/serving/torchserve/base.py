"""The part every fxvino TorchServe handler shares: load, compile, warm up, batch, answer."""

from __future__ import annotations

import logging
import os
import time
from typing import Any, ClassVar

import torch
from ts.torch_handler.base_handler import BaseHandler
from ts.utils.util import load_label_mapping

from fxvino.serving.inputs import BadRequest
from fxvino.serving.loading import BACKENDS, Inputs, LoadedModel, ServingConfigError, call, load_model

logger = logging.getLogger(__name__)


class FxvinoHandler(BaseHandler):
    """Subclasses say how to build the model and how to read and answer one request.

    ``model-config.yaml``::

        batchSize: 4
        maxBatchDelay: 20
        fxvino:            # torch.compile(backend="fxvino") options
          device: CPU
          model_caching: true
          cache_dir: /shared/fxvino-cache
        handler:
          backend: fxvino  # or inductor / eager: the same handler as a baseline
          threads: 2       # torch intra-op threads of the worker (default: torch's)
          warmup_batch_sizes: [1, 4]   # default: 1 and batchSize
    """

    # Keys of the ``handler:`` section this handler reads (subclasses add theirs).
    SETTINGS: ClassVar[tuple[str, ...]] = ("backend", "threads", "warmup_batch_sizes")

    def __init__(self) -> None:
        super().__init__()
        self.loaded: LoadedModel | None = None
        self.settings: dict[str, Any] = {}

    # -- what subclasses provide

    def build_model(self, model_dir: str) -> torch.nn.Module:
        raise NotImplementedError

    def example(self, batch_size: int) -> Inputs:
        """Model inputs for a batch of ``batch_size`` requests (the warm-up)."""
        raise NotImplementedError

    def decode(self, row: Any) -> Any:
        """One request row to one sample; raise :class:`BadRequest` if it is malformed."""
        raise NotImplementedError

    def collate(self, samples: list[Any]) -> Inputs:
        raise NotImplementedError

    def answer(self, output: Any, count: int) -> list[Any]:
        """The model's output for a batch of ``count`` samples to one JSON answer each."""
        raise NotImplementedError

    # -- TorchServe's entry points

    def initialize(self, context: Any) -> None:
        config = getattr(context, "model_yaml_config", None) or {}
        self.settings = dict(config.get("handler") or {})
        unknown = [k for k in self.settings if k not in self.SETTINGS]
        if unknown:
            raise ServingConfigError(
                f"unknown key(s) {unknown} in the 'handler' section of model-config.yaml; "
                f"valid for {type(self).__name__}: {', '.join(self.SETTINGS)}"
            )
        backend = self.settings.get("backend", "fxvino")
        if backend not in BACKENDS:
            raise ServingConfigError(f"handler.backend {backend!r} is not one of {', '.join(BACKENDS)}")
        if self.settings.get("threads"):
            torch.set_num_threads(int(self.settings["threads"]))
        self.manifest = context.manifest
        self.map_location, self.device = "cpu", torch.device("cpu")  # fxvino takes CPU tensors
        model_dir = context.system_properties.get("model_dir")
        t0 = time.perf_counter()
        model = self.build_model(model_dir)
        built = time.perf_counter() - t0
        batch_size = int(config.get("batchSize", 1))
        sizes = self.settings.get("warmup_batch_sizes") or sorted({1, batch_size})
        warmup = [self.example(int(n)) for n in sizes]
        self.loaded = load_model(model, warmup, backend=backend, fxvino=config.get("fxvino"))
        self.model = self.loaded
        for line in self.loaded.summary().splitlines():
            logger.info("%s", line)
        logger.info("fxvino serving: model built in %.2fs, warm-up batch sizes %s (pid %d)", built, sizes, os.getpid())
        self.mapping = load_label_mapping(os.path.join(model_dir, "index_to_name.json"))
        self.initialized = True

    def handle(self, data: list[Any], context: Any) -> list[Any]:
        start = time.time()
        self.context = context
        if self._is_describe():
            return [self.describe_handle()]
        answers: list[Any] = [None] * len(data)
        samples, positions = [], []
        with self.loaded.preparing():
            for i, row in enumerate(data):
                try:
                    samples.append(self.decode(row))
                    positions.append(i)
                except BadRequest as e:
                    context.set_response_status(400, str(e), i)
                    answers[i] = {"error": str(e)}
            inputs = self.collate(samples) if samples else None
        if inputs is not None:
            output = call(self.loaded, inputs)
            for i, answer in zip(positions, self.answer(output, len(samples)), strict=True):
                answers[i] = answer
        context.metrics.add_time("HandlerTime", round((time.time() - start) * 1000, 2), None, "ms")
        return answers

    def describe_handle(self) -> dict[str, Any]:
        return self.loaded.describe() if self.loaded is not None else {"error": "not initialized"}
