"""ATen → OpenVINO lowerings, one module per op family; importing them fills the registry."""

from __future__ import annotations

import functools
import importlib

FAMILIES = (
    "elementwise",
    "activation",
    "reduction",
    "linalg",
    "conv",
    "pooling",
    "normalization",
    "attention",
    "shape_ops",
    "indexing",
    "creation",
    "symbolic",
    "sorting",
    "scans",
    "special",
    "scatter",
    "padding",
    "resample",
    "backward",
    "random",
    "dynamic_output",
    "fft",
    "moe",
    "recurrent",
    "quantized",
    "declined",
)


@functools.cache
def ensure_registered() -> None:
    for name in FAMILIES:
        importlib.import_module(f"fxvino.lowering.ops.{name}")
