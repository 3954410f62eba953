"""Diffusers pipelines on fxvino: :func:`compile_pipeline`, weight-change notification, single-file
checkpoints loaded offline (:func:`load_single_file`, imports diffusers when called), and
random-weight pipelines for tests and benchmarks (``random_pipelines``, imports diffusers)."""

from fxvino.diffusion.pipeline import compile_pipeline, compiled_components
from fxvino.diffusion.single_file import CheckpointError, load_single_file
from fxvino.diffusion.weights import weights_changed

__all__ = ["compile_pipeline", "compiled_components", "weights_changed", "load_single_file", "CheckpointError"]
