"""Export to OpenVINO IR: ``fxvino.export(model, args)`` and ``fxvino.load(path)``.

The package itself is callable, ``fxvino.export(model, args, ...)``, and holds the exporter's
names (``fxvino.export.ExportError``): one name for the verb and its namespace, without a
submodule shadowing a function of the same name.

Importing it is cheap. The exporter (torch.export, the lowering registry) is imported on the
first ``export`` call; ``load`` needs only the runtime, so a process that only runs saved IRs
never imports Dynamo or the lowering.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .errors import ExportError, UnsupportedOp
from .loader import LoadedModel, load
from .model import ExportedModel

if TYPE_CHECKING:
    from torch.export import ExportedProgram
    from torch.nn import Module


def export(
    model: Module | Callable[..., Any] | ExportedProgram,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    options: Mapping[str, Any] | None = None,
) -> ExportedModel:
    """Export ``model`` called with ``args``/``kwargs`` as one OpenVINO model.

    ``model`` is an ``nn.Module``, a function or a ``torch.export.ExportedProgram`` (then without
    ``args``, ``kwargs`` and ``dynamic_shapes``: it has its own). ``dynamic_shapes`` is
    ``torch.export``'s: a ``Dim`` per dynamic input dim, whose bounds the IR's dims take.
    ``options`` are fxvino's (``device`` and ``config`` for running the result here,
    ``precision``, ``decompositions``, ``disabled_ops``).

    Returns an :class:`ExportedModel`: callable like ``model``, ``.ov_model``, ``.save(path)``.
    Raises :class:`ExportError` listing every op that does not lower, with its source line.
    """
    from .build import export as _export

    return _export(model, args, kwargs, dynamic_shapes=dynamic_shapes, options=options)


class _CallableModule(types.ModuleType):
    """``fxvino.export(...)`` calls :func:`export`: the package is the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> ExportedModel:
        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["export", "load", "ExportedModel", "LoadedModel", "ExportError", "UnsupportedOp"]
