"""``fxvino.explain``: compile and run a model once, and say what ran where."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from fxvino.report import Report, collect_reports


def explain(
    model: Callable, *args: Any, options: Mapping[str, Any] | None = None, dynamic: bool | None = None, **kwargs: Any
) -> Report:
    """Compile ``model`` with fxvino, call it on ``args``/``kwargs`` under ``torch.no_grad``, and
    return the report of every graph compiled for that call.

    Each call compiles afresh (a new backend closure), so earlier compilations do not hide graphs.
    """
    compiled = torch.compile(model, backend="fxvino", options=dict(options or {}), dynamic=dynamic)
    with collect_reports() as report, torch.no_grad():
        compiled(*args, **kwargs)
    return report
