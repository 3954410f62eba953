"""Diffusers pipelines on fxvino: :func:`compile_pipeline`, weight-change notification, and
random-weight pipelines for tests and benchmarks (``random_pipelines``, imports diffusers)."""

from fxvino.diffusion.pipeline import compile_pipeline, compiled_components
from fxvino.diffusion.weights import weights_changed

__all__ = ["compile_pipeline", "compiled_components", "weights_changed"]
