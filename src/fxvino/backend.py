"""The ``fxvino`` torch.compile backend entry point (registered as a Dynamo entry point)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from fxvino.capture.aot import compile_dynamo_graph
from fxvino.options import Options


def fxvino(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> Callable:
    """``torch.compile(model, backend="fxvino", options={...})`` lands here once per graph."""
    return compile_dynamo_graph(gm, example_inputs, Options.parse(options, mode))
