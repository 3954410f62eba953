"""Compile every model of a diffusers pipeline with fxvino, leaving schedulers and glue alone.

Pipelines call their models in three ways: ``unet(...)`` / ``transformer(...)`` / ``controlnet(...)``
/ ``text_encoder(...)`` (module calls), and ``vae.decode(...)`` / ``vae.encode(...)`` (methods that
bypass ``forward``). Modules are compiled in place (``module.compile``), so the pipeline keeps its
own objects: ``save_pretrained``, LoRA loading and ``pipe.components`` see plain modules.

Shapes: the first call compiles static shapes (the fastest graph for one resolution). The first
call with other shapes marks the batch and spatial dimensions of every tensor argument dynamic
before Dynamo recompiles, so that one dynamic graph serves every later resolution *and* batch
size; Dynamo's own automatic dynamic would only generalise the dims that changed that time, and a
batch change after a resolution change would compile again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch

from fxvino.diffusion.weights import notify_weight_changes

# Methods (not forward) that pipelines call on autoencoders: compiled as methods.
ENTRY_METHODS = ("decode", "encode")

# Every LoRA change (load, set_adapters, fuse, unfuse, delete) is a guard failure and a Dynamo
# recompile of the models it touches; past Dynamo's default limit of 8 a model would silently run
# eagerly. Its limit is raised for the calls of compiled pipeline components only.
RECOMPILE_LIMIT = 64

_COMPILED_MARK = "_fxvino_compiled_components"


def compile_pipeline(
    pipe: Any,
    options: Mapping[str, Any] | None = None,
    *,
    components: list[str] | None = None,
    mode: str | None = None,
) -> Any:
    """Compile the pipeline's models with ``backend="fxvino"`` in place and return the pipeline.

    ``components`` restricts it to those names of ``pipe.components`` (default: every
    ``torch.nn.Module``). Autoencoders get their ``decode`` and ``encode`` compiled (what pipelines
    call); other models their whole call. The pipeline's LoRA methods are wrapped so that weights
    they change in place are seen by the next call (see ``fxvino.diffusion.weights``).
    Calling it again compiles only components it has not compiled yet.
    """
    done: set[str] = getattr(pipe, _COMPILED_MARK, set())
    compile_kwargs: dict[str, Any] = {"backend": "fxvino"}
    if mode is not None:
        compile_kwargs["mode"] = mode
    else:
        compile_kwargs["options"] = dict(options or {})
    names = components if components is not None else list(pipe.components)
    unknown = [n for n in names if n not in pipe.components]
    if unknown:
        raise ValueError(f"compile_pipeline: no component {unknown} in this pipeline; it has {sorted(pipe.components)}")
    for name in names:
        module = pipe.components[name]
        if name in done or not isinstance(module, torch.nn.Module):
            continue
        if hasattr(module, "decode") and hasattr(module, "encode"):
            _compile_codec(module, compile_kwargs)
        else:
            module.compile(**compile_kwargs)
            module._compiled_call_impl = _DynamicAfterFirstChange(module._compiled_call_impl)
        done.add(name)
    setattr(pipe, _COMPILED_MARK, done)
    notify_weight_changes(pipe)
    return pipe


def _compile_codec(vae: torch.nn.Module, compile_kwargs: dict[str, Any]) -> None:
    """An autoencoder: pipelines call ``decode``/``encode``, not ``forward``.

    Where the model slices batches (diffusers' ``enable_slicing``: ``decode`` calls ``_decode`` per
    image), the per-image ``_decode``/``_encode`` are compiled and slicing is switched on, so a
    change of batch size never recompiles the VAE (a batch of 1 and of 2 are different graphs for
    PyTorch's convolution) and peak memory stays that of one image.
    """
    per_image = hasattr(vae, "enable_slicing") and all(hasattr(vae, f"_{m}") for m in ENTRY_METHODS)
    if per_image:
        vae.enable_slicing()
    for method in ENTRY_METHODS:
        name = f"_{method}" if per_image else method
        compiled = torch.compile(getattr(vae, name), **compile_kwargs)
        setattr(vae, name, _DynamicAfterFirstChange(compiled))


def compiled_components(pipe: Any) -> set[str]:
    """Names of the components :func:`compile_pipeline` compiled."""
    return set(getattr(pipe, _COMPILED_MARK, set()))


def _dynamic_dims(t: torch.Tensor) -> tuple[int, ...]:
    """Batch and spatial dims: dim 0 of every batched tensor, and H/W (/frames) of images/latents.
    Channel and hidden sizes are properties of the model and stay static."""
    if t.ndim >= 4:
        return (0, *range(2, t.ndim))
    return (0,) if t.ndim >= 2 else ()


def _tensors(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, Mapping):
            for x in v.values():
                walk(x)

    walk(args)
    walk(kwargs)
    return found


class _DynamicAfterFirstChange:
    """A compiled entry point with a higher recompile limit which, once called with shapes other
    than its first call's, marks the batch and spatial dims of its arguments dynamic (module docstring).

    A dim of size 1 stays specialised (PyTorch's convolution picks its memory format by whether
    the batch is 1, a guard no marking removes): that is why autoencoders run one image at a time.
    """

    def __init__(self, compiled: Callable) -> None:
        self.compiled = compiled
        self.first: list[torch.Size] | None = None
        functools.update_wrapper(self, compiled)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors = _tensors(args, kwargs)
        shapes = [t.shape for t in tensors]
        if self.first is None:
            self.first = shapes
        elif shapes != self.first:
            for t in tensors:
                for d in _dynamic_dims(t):
                    torch._dynamo.maybe_mark_dynamic(t, d)
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            return self.compiled(*args, **kwargs)
