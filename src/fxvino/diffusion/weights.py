"""Making in-place weight edits visible to compiled models.

fxvino freezes weights into OpenVINO constants and, before every call of a compiled graph, checks
the frozen tensors' version counters and data pointers (``runtime.frozen_weights.FrozenWeights``): an edit
through PyTorch's tracked paths (``param.copy_``, ``load_state_dict``, ``param.data = new``)
recompiles the graph with the new values. Edits made in place through ``param.data`` (``weight.data
+= delta``, which is how peft merges a LoRA into its base layer in ``fuse_lora``/``unfuse_lora``)
move neither, so those callers bump the version counters themselves: :func:`weights_changed`.
Inference tensors (made under ``torch.inference_mode``) have no version counter: their in-place
edits are invisible, so :func:`weights_changed` gives them fresh storage instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch

# Pipeline methods that edit base weights through ``.data`` (peft merge/unmerge).
EDITS_WEIGHTS_IN_PLACE = ("fuse_lora", "unfuse_lora")


def weights_changed(obj: Any) -> None:
    """Tell fxvino that the parameters and buffers of ``obj`` (a module, a diffusers pipeline, or an
    iterable of either) may have changed in place: the next call of every compiled graph that
    froze any of them compiles again with the current values. Cheap (a counter per tensor), except
    for inference tensors: they track no version, so each is moved to a copy of itself."""
    tensors = list(_tensors_of(obj))
    counted = [t for t in tensors if not t.is_inference()]
    if counted:
        with torch.no_grad():
            torch.autograd.graph.increment_version(counted)
    if len(counted) < len(tensors):
        with torch.inference_mode():
            for t in tensors:
                if t.is_inference():
                    t.data = t.detach().clone()  # a new data pointer, which the check compares


def _tensors_of(obj: Any) -> Iterable[torch.Tensor]:
    if isinstance(obj, torch.nn.Module):
        yield from obj.parameters()
        yield from obj.buffers()
    elif hasattr(obj, "components"):
        for c in obj.components.values():
            if isinstance(c, torch.nn.Module):
                yield from _tensors_of(c)
    elif isinstance(obj, Iterable):
        for x in obj:
            yield from _tensors_of(x)
    else:
        raise TypeError(
            f"weights_changed: expected a torch.nn.Module, a pipeline or an iterable of them, got {type(obj)}"
        )


def _lora_base_layers(pipe: Any) -> list[torch.nn.Module]:
    """Base layers under peft's tuner layers (the modules whose weights a LoRA merge edits)."""
    bases = []
    for c in pipe.components.values():
        if not isinstance(c, torch.nn.Module):
            continue
        for m in c.modules():
            get_base = getattr(m, "get_base_layer", None)
            if callable(get_base) and hasattr(m, "merged_adapters"):
                bases.append(get_base())
    return bases


def notify_weight_changes(pipe: Any) -> None:
    """Wrap ``pipe``'s methods that edit weights through ``.data`` (on this instance only) so that
    the layers they touched are reported to fxvino by :func:`weights_changed` when they return."""
    for name in EDITS_WEIGHTS_IN_PLACE:
        method = getattr(pipe, name, None)
        if method is None or getattr(method, "_fxvino_notifies", False):
            continue
        setattr(pipe, name, _notifying(pipe, method))


def _notifying(pipe: Any, method: Callable) -> Callable:
    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        finally:
            weights_changed(_lora_base_layers(pipe))

    run._fxvino_notifies = True  # type: ignore[attr-defined]
    return run
