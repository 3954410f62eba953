"""fxvino: run torch.compile graphs on OpenVINO.

model = torch.compile(model, backend="fxvino", options={"device": "CPU"})

The public names are imported on first use (PEP 562 ``__getattr__``): ``import fxvino`` then
costs only what the name used needs. A process that only runs an exported IR
(``fxvino.load``) never imports the compiler, whose import pulls in Dynamo (about a second).
``backend="fxvino"`` itself needs no import at all (the ``torch_dynamo_backends`` entry point).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fxvino._version import __version__

if TYPE_CHECKING:
    from fxvino.backend import fxvino
    from fxvino.diffusion import compile_pipeline, weights_changed
    from fxvino.explain import explain
    from fxvino.export import ExportedModel, ExportError, export, load
    from fxvino.options import Options
    from fxvino.report import GraphReport, Report, collect_reports

# Public name -> (module, attribute); None: the module itself.
_LAZY: dict[str, tuple[str, str | None]] = {
    "fxvino": ("fxvino.backend", "fxvino"),
    "compile_pipeline": ("fxvino.diffusion", "compile_pipeline"),
    "weights_changed": ("fxvino.diffusion", "weights_changed"),
    "explain": ("fxvino.explain", "explain"),
    # The package is callable (``fxvino.export(model, args)``): it also holds ``ExportError``.
    "export": ("fxvino.export", None),
    "load": ("fxvino.export", "load"),
    "ExportedModel": ("fxvino.export", "ExportedModel"),
    "ExportError": ("fxvino.export", "ExportError"),
    "Options": ("fxvino.options", "Options"),
    "Report": ("fxvino.report", "Report"),
    "GraphReport": ("fxvino.report", "GraphReport"),
    "collect_reports": ("fxvino.report", "collect_reports"),
}


def __getattr__(name: str) -> Any:
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module 'fxvino' has no attribute {name!r}")
    module, attr = found
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | {"__version__"})


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
    "export",
    "load",
    "ExportedModel",
    "ExportError",
    "reset",
    "collect_reports",
    "Options",
    "Report",
    "GraphReport",
    "__version__",
]
