"""The user-facing options contract.

Options are parsed once per ``torch.compile`` call into a frozen :class:`Options` value that
is handed to every compiler by closure. Everything a user can get wrong is caught here with a
message that names the bad key and the valid ones, because a silently ignored option is a
silently wrong benchmark.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from fxvino.devices import (
    available_devices,
    bf16_capped,
    check_device,
    may_run_on_cpu,
    supported_properties,
    warn_if_isa_capped,
    warn_if_precision_emulated,
)
from fxvino.utils.sizes import parse_size

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
PRECISIONS = {"f32": "f32", "bf16": "bf16", "f16": "f16"}
LEGACY_ENV = {
    "OPENVINO_TORCH_BACKEND_DEVICE": "device",
    "OPENVINO_TORCH_MODEL_CACHING": "model_caching",
    "OPENVINO_TORCH_CACHE_DIR": "cache_dir",
}

# OpenVINO performance settings per torch.compile mode (documented in docs/user-guide/modes.md).
# The default leaves threads unpinned, as PyTorch does: pinned, each inference binds its threads
# to fixed CPUs, and one busy process on one of them made every barrier wait for it (2-core AMX
# Xeon, a busy loop on CPU 0: 4-layer BERT 148 ms pinned against 52 unpinned, an MLP 12.0 ms
# against 3.3; a busy loop the scheduler may move: 64.6 against 57.0; a quiet machine: 28.3
# against 27.9). ``reduce-overhead`` still pins.
MODE_CONFIG: dict[str, dict[str, str]] = {
    "default": {"PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": "NO"},
    "reduce-overhead": {"PERFORMANCE_HINT": "LATENCY", "ENABLE_CPU_PINNING": "YES"},
    "max-autotune": {"PERFORMANCE_HINT": "THROUGHPUT"},
    "max-autotune-no-cudagraphs": {"PERFORMANCE_HINT": "THROUGHPUT"},
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


# The model cache's default size cap: a few dozen large models; LRU eviction beyond it.
DEFAULT_CACHE_SIZE = 10 * 10**9


def default_cache_dir() -> Path:
    """Per-user cache directory: compiled models must not litter the working directory."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "fxvino"


@dataclasses.dataclass(frozen=True)
class Options:
    device: str = "CPU"
    aot_autograd: bool = False
    model_caching: bool = False
    cache_dir: Path = dataclasses.field(default_factory=default_cache_dir)
    cache_size: int | None = DEFAULT_CACHE_SIZE  # bytes; None: no cap
    decompositions: tuple[torch._ops.OpOverload, ...] = ()
    disabled_ops: frozenset[torch._ops.OpOverload] = frozenset()
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    precision: str = "f32"
    # Graphs over the same weights compile into one model (shared_weights.py): "auto" when one of
    # them can run at its top level, True always, False never.
    share_weights: bool | str = "auto"
    # After compiling, frozen weights mapped from a file leave resident memory (weight_pages.py).
    page_out_weights: bool = True
    mode: str = "default"

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None = None, mode: str | None = None) -> Options:
        """Validate a user's ``options`` dict and ``mode``; legacy env vars fill unset keys."""
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise ValueError(f"options must be a dict, got {type(options).__name__}")
        valid = [f.name for f in dataclasses.fields(cls) if f.name != "mode"]
        for key in options:
            if key not in valid:
                raise ValueError(f"unknown option {key!r}; valid: {', '.join(valid)}")
        raw = dict(options)
        for env, key in LEGACY_ENV.items():
            if env in os.environ:
                warnings.warn(
                    f"environment variable {env} is deprecated; pass options={{{key!r}: ...}} to "
                    "torch.compile instead" + (" (ignored: the option is set explicitly)" if key in raw else ""),
                    DeprecationWarning,
                    stacklevel=3,
                )
                raw.setdefault(key, os.environ[env])
        kw: dict[str, Any] = {}
        if "device" in raw:
            kw["device"] = check_device(_expect(raw["device"], str, "device"))
        for key in ("aot_autograd", "model_caching", "page_out_weights"):
            if key in raw:
                kw[key] = _as_bool(raw[key], key)
        if "share_weights" in raw:
            kw["share_weights"] = _share_weights(raw["share_weights"])
        if "cache_dir" in raw:
            kw["cache_dir"] = Path(_expect(raw["cache_dir"], (str, os.PathLike), "cache_dir")).expanduser()
        if "cache_size" in raw:
            kw["cache_size"] = parse_size(raw["cache_size"], "cache_size")
        if "decompositions" in raw:
            kw["decompositions"] = tuple(_overloads(raw["decompositions"], "decompositions"))
        if "disabled_ops" in raw:
            kw["disabled_ops"] = frozenset(_overloads(raw["disabled_ops"], "disabled_ops"))
        if "config" in raw:
            cfg = raw["config"]
            if cfg is None:
                cfg = {}
            if not isinstance(cfg, Mapping) or not all(isinstance(k, str) for k in cfg):
                raise ValueError("option 'config' must be a dict of OpenVINO property names to values")
            kw["config"] = dict(cfg)
        if "precision" in raw:
            p = raw["precision"]
            if p not in PRECISIONS:
                raise ValueError(f"option 'precision' got {p!r}; valid: {', '.join(PRECISIONS)}")
            kw["precision"] = p
        if mode is not None:
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
            kw["mode"] = mode
        return cls(**kw)

    def compile_config(self, graph_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """OpenVINO properties for compile_model: mode, precision, what the lowered graph asks
        for (``graph_config``, e.g. ``SNIPPETS_MODE`` for quantized CNNs), then the user's config.

        ``model_caching`` is fxvino's own cache (``cache/store.py``), not OpenVINO's ``CACHE_DIR``: that
        one would hash every weight of an in-memory model on each compile and store a second
        copy of each blob. A ``CACHE_DIR`` given in ``config`` still passes through.
        """
        known = supported_properties(self.device)
        warn_if_precision_emulated(self.device, self.precision)
        if may_run_on_cpu(self.device):
            warn_if_isa_capped()
        cfg: dict[str, Any] = {k: v for k, v in MODE_CONFIG[self.mode].items() if not known or k in known}
        cfg["INFERENCE_PRECISION_HINT"] = PRECISIONS[self.precision]
        if self.device == "CPU":  # the graph's wishes are CPU plugin properties, some unlisted
            wishes = dict(graph_config or {})
            if self.precision != "f32":  # an explicit bf16/f16 precision is the user's choice
                wishes.pop("INFERENCE_PRECISION_HINT", None)
            cfg.update(wishes)
            if cfg["INFERENCE_PRECISION_HINT"] == "bf16" and bf16_capped() is not None:
                cfg["INFERENCE_PRECISION_HINT"] = "f32"  # what a CPU without bf16 kernels computes in
        cfg.update(self.config)
        return cfg


def _expect(value: Any, types: type | tuple[type, ...], key: str) -> Any:
    if not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
        raise ValueError(f"option {key!r} must be {names}, got {type(value).__name__} {value!r}")
    return value


def _as_bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"option {key!r} must be a bool (or 'true'/'false'), got {value!r}")


def _share_weights(value: Any) -> bool | str:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        return _as_bool(value, "share_weights")
    except ValueError:
        raise ValueError(f"option 'share_weights' got {value!r}; valid: True, False, 'auto'") from None


def _overloads(value: Any, key: str) -> Iterable[torch._ops.OpOverload]:
    """Accept OpOverloads, OpOverloadPackets (all overloads) and their dotted names."""
    if isinstance(value, (str, torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        value = [value]
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(f"option {key!r} must be a list of aten ops, got {type(value).__name__}")
    for item in value:
        yield from resolve_op(item, key)


def resolve_op(item: Any, key: str = "op") -> list[torch._ops.OpOverload]:
    if isinstance(item, torch._ops.OpOverload):
        return [item]
    if isinstance(item, torch._ops.OpOverloadPacket):
        return [getattr(item, o) for o in item.overloads()]
    if isinstance(item, str):
        name = item.strip()
        name = name.removeprefix("torch.ops.").replace("::", ".")
        parts = name.split(".")
        if len(parts) in (2, 3):
            ns = getattr(torch.ops, parts[0], None)
            packet = getattr(ns, parts[1], None) if ns is not None else None
            if isinstance(packet, torch._ops.OpOverloadPacket):
                if len(parts) == 2:
                    return resolve_op(packet, key)
                if parts[2] in packet.overloads():
                    return [getattr(packet, parts[2])]
        raise ValueError(
            f"option {key!r}: {item!r} is not an aten operator; write e.g. 'aten.relu.default', "
            "'torch.ops.aten.relu.default' or torch.ops.aten.relu"
        )
    raise ValueError(f"option {key!r}: expected an aten op or its name, got {type(item).__name__} {item!r}")


__all__ = ["Options", "MODES", "MODE_CONFIG", "default_cache_dir", "resolve_op", "available_devices"]
