"""fxvino: run torch.compile graphs on OpenVINO.

model = torch.compile(model, backend="fxvino", options={"device": "CPU"})
"""

from __future__ import annotations

from fxvino._version import __version__
from fxvino.backend import fxvino
from fxvino.diffusion import compile_pipeline, weights_changed
from fxvino.explain import explain
from fxvino.options import Options
from fxvino.report import GraphReport, Report, collect_reports


def reset() -> None:
    """Drop every compiled model: Dynamo's compiled code (``torch._dynamo.reset()``), which holds
    fxvino's compiled partitions, and fxvino's per-directory cache objects. Files in the model
    cache stay on disk (``fxvino cache clear`` removes them). Memory is returned once no
    compiled callable of the user's still refers to a partition.
    """
    import gc

    import torch._dynamo

    from fxvino.cache.store import reset_caches

    torch._dynamo.reset()
    reset_caches()
    gc.collect()


__all__ = [
    "fxvino",
    "compile_pipeline",
    "weights_changed",
    "explain",
    "reset",
    "collect_reports",
    "Options",
    "Report",
    "GraphReport",
    "__version__",
]
