"""Compile a model for serving, warm it up, and keep what happened.

A serving worker must never fail to start because a compiler did: if compiling or warming up
raises, the model is served eagerly and the error is kept (and logged), so it shows up in the
worker log and in the describe/health answers. Partial fallbacks inside fxvino (a partition
that runs on Inductor, an op that runs in PyTorch) are in the compile report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from fxvino.options import Options
from fxvino.report import Report, collect_reports
from fxvino.runtime import torch_threads

logger = logging.getLogger("fxvino.serving")

# What a handler or deployment can compile with: fxvino, or the baselines it is measured against.
BACKENDS = ("fxvino", "inductor", "eager")

# Keys of the ``fxvino:`` section: every torch.compile option of fxvino, plus ``mode``.
FXVINO_KEYS = tuple(f.name for f in dataclasses.fields(Options))

Inputs = tuple[Any, ...] | Mapping[str, Any]


class ServingConfigError(ValueError):
    """A serving configuration (model-config.yaml, deployment arguments) that cannot work."""


def fxvino_options(section: Mapping[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """Split and validate an ``fxvino:`` section into torch.compile ``options`` and ``mode``.

    Validated at load time so a typo names itself in the worker log instead of surfacing as a
    Dynamo error on the first request.
    """
    if section is None:
        return {}, None
    if not isinstance(section, Mapping):
        raise ServingConfigError(f"the 'fxvino' section must be a mapping of options, got {type(section).__name__}")
    unknown = [k for k in section if k not in FXVINO_KEYS]
    if unknown:
        raise ServingConfigError(f"unknown key(s) {unknown} in the 'fxvino' section; valid: {', '.join(FXVINO_KEYS)}")
    options = {k: v for k, v in section.items() if k != "mode"}
    mode = section.get("mode")
    try:
        Options.parse(options, mode)
    except ValueError as e:
        raise ServingConfigError(f"'fxvino' section: {e}") from e
    return options, mode


@dataclasses.dataclass
class LoadedModel:
    """A model ready to serve: call it like the model (under ``torch.no_grad``)."""

    model: Callable[..., Any]
    backend: str  # what was asked for
    serving: str  # what serves: the backend asked for, or "eager" after a failed compile
    report: Report
    load_seconds: float  # compile + warm-up
    error: str | None = None  # why the compile failed (the model then serves eagerly)
    cache: dict[str, float] | None = None  # model cache hits/misses during the warm-up (fxvino, model_caching)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Recompiles for shapes the warm-up did not cover are reported too.
        with torch.no_grad(), collect_reports() as report:
            out = self.model(*args, **kwargs)
        if report.graphs:
            self.report.graphs.extend(report.graphs)
        return out

    def preparing(self) -> contextlib.AbstractContextManager[None]:
        """Where to make this model's inputs (decode requests, stack a batch): with OpenVINO serving,
        on the calling thread alone, as PyTorch's threads would otherwise spin on the cores the
        inference needs (``runtime.torch_threads.one_thread_here``)."""
        return torch_threads.one_thread_here() if self.serving == "fxvino" else contextlib.nullcontext()

    @property
    def fallbacks(self) -> list[dict[str, str]]:
        items = [dataclasses.asdict(f) for f in self.report.fallbacks]
        if self.error is not None:
            items.append({"where": "model", "op": "torch.compile", "reason": self.error, "ran_on": "eager"})
        return items

    def describe(self) -> dict[str, Any]:
        """A JSON-able summary (what TorchServe's describe and the Ray deployment's health answer)."""
        return {
            "backend": self.backend,
            "serving": self.serving,
            "load_seconds": round(self.load_seconds, 3),
            "graphs": len(self.report.graphs),
            "ov_partitions": self.report.num_ov_partitions,
            "ops_on_openvino": sum(self.report.ov_ops.values()),
            "ops_in_pytorch": sum(self.report.torch_ops.values()),
            "fallbacks": self.fallbacks,
            "cache": self.cache,
            "report": str(self.report) if self.backend == "fxvino" else None,
        }

    def summary(self) -> str:
        head = f"fxvino serving: {self.serving} (asked: {self.backend}), loaded in {self.load_seconds:.2f}s"
        if self.cache is not None:
            head += f"; model cache: {int(self.cache['hits'])} hit(s), {int(self.cache['misses'])} miss(es)"
        lines = [head]
        if self.error is not None:
            lines.append(f"  compile failed, serving eagerly: {self.error}")
        if self.backend == "fxvino" and self.error is None:
            lines.append(str(self.report))
        return "\n".join(lines)


def compile_model(
    model: torch.nn.Module, backend: str, fxvino: Mapping[str, Any] | None = None, dynamic: bool | None = None
) -> Callable[..., Any]:
    """``torch.compile`` with the chosen backend; ``fxvino`` options only apply to fxvino."""
    if backend not in BACKENDS:
        raise ServingConfigError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if backend == "eager":
        return model
    if backend == "inductor":
        # Freezing, as fxvino freezes weights: the fair inference baseline (a per-compile option,
        # not the global inductor flag).
        return torch.compile(model, backend="inductor", options={"freezing": True}, dynamic=dynamic)
    options, mode = fxvino_options(fxvino)
    from fxvino.backend import fxvino as fxvino_backend

    # torch.compile refuses mode= together with options=: hand both to the backend directly.
    return torch.compile(model, backend=functools.partial(fxvino_backend, mode=mode, options=options), dynamic=dynamic)


def load_model(
    model: torch.nn.Module,
    warmup: Iterable[Inputs],
    *,
    backend: str = "fxvino",
    fxvino: Mapping[str, Any] | None = None,
    dynamic: bool | None = None,
) -> LoadedModel:
    """Compile ``model`` and call it on each warm-up input, so the first request pays nothing.

    Warm up with every batch size the server will form (at least the smallest and the largest):
    Dynamo compiles the first shape statically and the second with a dynamic batch dimension,
    after which no batch size compiles again. A configuration error (unknown backend, bad option)
    raises :class:`ServingConfigError`; any failure of the compile itself is caught and the
    model serves eagerly.
    """
    model = model.eval()
    compiled = compile_model(model, backend, fxvino, dynamic)  # configuration errors raise here
    options, mode = fxvino_options(fxvino) if backend == "fxvino" else ({}, None)
    stats_before = _cache_stats(options) if options.get("model_caching") else None
    error = None
    t0 = time.perf_counter()
    with collect_reports() as report:
        try:
            with torch.no_grad():
                for inputs in warmup:
                    call(compiled, inputs)
        except Exception as e:  # noqa: BLE001 - a worker must come up: serve eagerly, report why
            logger.exception("fxvino serving: compiling with %s failed; the model serves eagerly", backend)
            error = f"{type(e).__name__}: {e}".strip()
            compiled = model
    loaded = LoadedModel(
        model=compiled,
        backend=backend,
        serving="eager" if error else backend,
        report=report,
        load_seconds=time.perf_counter() - t0,
        error=error,
    )
    if stats_before is not None:
        after = _cache_stats(options)
        loaded.cache = {k: after[k] - stats_before[k] for k in after}
    return loaded


def call(model: Callable[..., Any], inputs: Inputs) -> Any:
    """Call ``model`` on positional (a tuple) or keyword (a mapping) inputs."""
    return model(**inputs) if isinstance(inputs, Mapping) else model(*inputs)


def _cache_stats(options: Mapping[str, Any]) -> dict[str, float]:
    from fxvino.cache.store import cache_for

    stats = cache_for(Options.parse(options).cache_dir).stats
    return {"hits": stats.hits, "misses": stats.misses, "stores": stats.stores}
