"""Serving compiled models: TorchServe handlers (:mod:`fxvino.serving.torchserve`) and a Ray Serve
deployment (:mod:`fxvino.serving.ray`).

Both compile the model once per worker or replica with :func:`fxvino.serving.loading.load_model`,
which reads the same ``fxvino:`` options, warms the model up and keeps fxvino's compile report.
Neither serving framework is imported here, so the core install stays lean.
"""

from __future__ import annotations

from fxvino.serving.loading import BACKENDS, LoadedModel, ServingConfigError, load_model

__all__ = ["BACKENDS", "LoadedModel", "ServingConfigError", "load_model"]
