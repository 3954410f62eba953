"""fxvino's persistent model cache: compiled partitions on disk, found again by a key that
cannot go stale (``cache_key.py``), loaded without lowering or compiling.

One entry is one file, ``<key>.fxvc``::

    magic "FXVINOC1" | u64 meta length | u32 crc32(meta) | meta (JSON) | padding | blob

The meta holds the partition's input/output specs (so a hit skips fxvino's lowering too), the
blob's size and crc32; the blob is ``CompiledModel.export_model()``, 4 KiB-aligned. Why this
shape:

- **Speed.** A hit maps the file (``np.memmap``, copy-on-write) and hands OpenVINO an
  ``ov.Tensor`` over it: ``import_model`` then builds the model from the mapping without a
  read/copy. Measured on BERT-base (437 MB, fresh processes, loaded machine, load + first
  inference): import from the mapping 0.44-1.8 s, ``read_model``+``compile_model`` of
  serialized IR 0.67-2.5 s, IR + OpenVINO's ``CACHE_DIR`` 0.79-1.6 s, ``import_model`` of the
  file's bytes 6-8 s (a copy of 437 MB through a Python ``bytes``).
- **Atomicity.** One file per entry, written to a temporary name in the same directory then
  ``os.replace``-d: a reader sees a whole old entry or a whole new one; two processes storing
  the same key both leave a valid file (the last rename wins).
- **Corruption.** Size and crc32 of the blob are checked before OpenVINO sees a byte (a
  corrupt blob could crash the importer); a bad entry is logged, counted, removed and rebuilt.
- **Size cap.** After each store, least-recently-used entries (mtime; a hit touches it) are
  removed until the directory fits ``cache_size``.

The only process-wide state is :data:`_CACHES`, one :class:`ModelCache` per directory, each
with its own lock; :func:`reset_caches` drops them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import struct
import tempfile
import threading
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import torch
import torch.fx

from fxvino.lowering.convert import InputSpec, OutputSpec

logger = logging.getLogger("fxvino")

MAGIC = b"FXVINOC1"
SUFFIX = ".fxvc"
TMP_PREFIX = ".tmp-"
_HEADER = struct.Struct("<8sQI")
_ALIGN = 4096
_CHUNK = 64 << 20
# Temporary files older than this are debris of a killed writer.
_STALE_TMP_SECONDS = 3600.0


class CacheEntryError(Exception):
    """An entry on disk is truncated, corrupt, or not one of ours."""


@dataclasses.dataclass
class CachedPartition:
    """What a hit gives back: the compiled model, its specs, and the mapping it lives in."""

    compiled: ov.CompiledModel
    inputs: list[InputSpec]
    outputs: list[OutputSpec]
    runtime_positions: list[int]
    mapping: Any  # the np.memmap the compiled model's memory may point into: keep it alive


@dataclasses.dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    stores: int = 0
    corrupt: int = 0
    evicted: int = 0
    skipped: int = 0  # partitions not stored (Python outputs JSON cannot hold, too big, I/O error)
    key_seconds: float = 0.0  # computing keys (mostly hashing weights)
    load_seconds: float = 0.0  # checking and importing hits
    store_seconds: float = 0.0  # exporting and writing entries


class Cancelled(Exception):
    """A prefetching read was not needed after all."""


def _crc32(buf: Any, cancel: threading.Event | None = None) -> int:
    """crc32 of a large buffer in chunks (zlib releases the GIL on each; ``cancel`` stops it)."""
    view = memoryview(buf).cast("B")
    crc = 0
    for i in range(0, len(view), _CHUNK):
        if cancel is not None and cancel.is_set():
            raise Cancelled
        crc = zlib.crc32(view[i : i + _CHUNK], crc)
    return crc


# ---- specs <-> JSON -------------------------------------------------------------------------

_PY_TYPES = (type(None), bool, int, float, str)


def _dtype_from(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    dt = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype):
        raise CacheEntryError(f"unknown dtype {name!r} in cache metadata")
    return dt


def specs_to_json(inputs: list[InputSpec], outputs: list[OutputSpec], runtime_positions: list[int]) -> dict | None:
    """The specs as JSON, or None when an output's Python value cannot be stored faithfully."""
    outs = []
    for o in outputs:
        v = o.value
        # Only exact scalars survive JSON unchanged (tuples would come back as lists, NaN as
        # an error): refuse anything else rather than risk returning a different value.
        if not (isinstance(v, _PY_TYPES) and (not isinstance(v, float) or np.isfinite(v))):
            return None
        outs.append({"kind": o.kind, "index": o.index, "value": o.value, "dtype": str(o.dtype) if o.dtype else None})
    return {
        "inputs": [{"kind": i.kind, "position": i.position} for i in inputs],
        "outputs": outs,
        "runtime_positions": list(runtime_positions),
    }


def specs_from_json(meta: Mapping[str, Any]) -> tuple[list[InputSpec], list[OutputSpec], list[int]]:
    try:
        inputs = [InputSpec(str(i["kind"]), int(i["position"])) for i in meta["inputs"]]
        outputs = [
            OutputSpec(str(o["kind"]), int(o["index"]), o["value"], _dtype_from(o["dtype"])) for o in meta["outputs"]
        ]
        positions = [int(p) for p in meta["runtime_positions"]]
    except (KeyError, TypeError, ValueError) as e:
        raise CacheEntryError(f"bad specs in cache metadata: {type(e).__name__}: {e}") from e
    return inputs, outputs, positions


# ---- sizes ----------------------------------------------------------------------------------

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_UNITS["tib"] = 2**40


def parse_size(value: Any, key: str = "cache_size") -> int | None:
    """Bytes from an int or a string such as ``"2GB"``, ``"500 MiB"``; None for no cap."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "unlimited")):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(
            f"option {key!r} must be a number of bytes or a string like '2GB' or '500MiB' "
            f"(or None for no limit), got {type(value).__name__} {value!r}"
        )
    if isinstance(value, int):
        n = value
    else:
        text = value.strip().lower().replace(" ", "")
        digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(digits) :] or "b"
        if unit not in _UNITS or not digits:
            raise ValueError(
                f"option {key!r} got {value!r}; write a size like '2GB', '500MB', '1.5GiB' or a number of "
                f"bytes (units: {', '.join(_UNITS)})"
            )
        try:
            n = int(float(digits) * _UNITS[unit])
        except ValueError:
            raise ValueError(f"option {key!r} got {value!r}: {digits!r} is not a number") from None
    if n <= 0:
        raise ValueError(f"option {key!r} must be positive (or None for no limit), got {value!r}")
    return n


def format_size(n: int | None) -> str:
    if n is None:
        return "unlimited"
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


# ---- the cache ------------------------------------------------------------------------------


class ModelCache:
    """Entries of one cache directory. Thread-safe; safe against other processes using it."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.stats = CacheStats()
        self._lock = threading.Lock()

    def path(self, key: str) -> Path:
        return self.root / f"{key}{SUFFIX}"

    # -- reading

    def load(
        self,
        key: str,
        device: str,
        config: Mapping[str, Any],
        prefetched: tuple[Path, concurrent.futures.Future] | None = None,
    ) -> CachedPartition | None:
        """The compiled partition stored under ``key``, or None (a miss, or a bad entry removed).

        ``prefetched`` is (path, future of :meth:`read`) started before the key was known;
        it is used when it is this key's path.
        """
        path = self.path(key)
        try:
            if prefetched is not None and prefetched[0] == path:
                meta, blob = prefetched[1].result()
            else:
                meta, blob = self.read(path)
            if meta.get("key") != key:
                raise CacheEntryError(f"entry holds key {meta.get('key')!r}, expected {key!r}")
        except FileNotFoundError:
            self._count("misses")
            return None
        except OSError as e:  # unreadable directory or file: compile as if missing
            logger.warning("fxvino: cannot read cache entry %s: %s", path, e)
            self._count("misses")
            return None
        except CacheEntryError as e:
            self._discard(path, str(e))
            return None
        try:
            inputs, outputs, positions = specs_from_json(meta)
            compiled = _core().import_model(ov.Tensor(blob, shared_memory=True), device, dict(config))
        except Exception as e:  # noqa: BLE001 - a blob OpenVINO rejects is rebuilt, never fatal
            self._discard(path, f"{type(e).__name__}: {e}")
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # least-recently-used order
        self._count("hits")
        return CachedPartition(compiled, inputs, outputs, positions, blob)

    def newest(self, prefix: str) -> Path | None:
        """The most recently used entry whose name starts with ``prefix``."""
        try:
            found = [(e.stat().st_mtime, e.path) for e in os.scandir(self.root) if e.name.startswith(prefix)]
        except OSError:
            return None
        return Path(max(found)[1]) if found else None

    def read(self, path: Path, cancel: threading.Event | None = None) -> tuple[dict, np.ndarray]:
        """An entry's metadata and its verified blob (mapped); raises CacheEntryError if bad."""
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
            if len(head) < _HEADER.size:
                raise CacheEntryError(f"truncated header ({len(head)} bytes)")
            magic, meta_len, meta_crc = _HEADER.unpack(head)
            if magic != MAGIC:
                raise CacheEntryError(f"not an fxvino cache entry (magic {magic!r})")
            raw = f.read(meta_len)
            size = os.fstat(f.fileno()).st_size
        if len(raw) != meta_len or zlib.crc32(raw) != meta_crc:
            raise CacheEntryError("metadata truncated or corrupt (crc32 mismatch)")
        try:
            meta = json.loads(raw)
            offset, blob_size, blob_crc = int(meta["blob_offset"]), int(meta["blob_size"]), int(meta["blob_crc32"])
        except (ValueError, KeyError, TypeError) as e:
            raise CacheEntryError(f"unreadable metadata: {e}") from e
        if size != offset + blob_size:
            raise CacheEntryError(f"file is {size} bytes, expected {offset + blob_size} (truncated or extended)")
        blob = np.memmap(path, dtype=np.uint8, mode="c", offset=offset, shape=(blob_size,))
        if _crc32(blob, cancel) != blob_crc:
            raise CacheEntryError("compiled blob corrupt (crc32 mismatch)")
        return meta, blob

    # -- writing

    def store(
        self,
        key: str,
        compiled: ov.CompiledModel,
        specs: Mapping[str, Any],
        cap: int | None,
        info: Mapping[str, Any] | None = None,
    ) -> bool:
        """Write an entry atomically and evict to the cap; False (logged) if it was not stored."""
        try:
            blob = compiled.export_model().getbuffer()
            meta_base = {**specs, **(info or {}), "key": key, "created": time.time(), "blob_size": len(blob)}
            meta_base["blob_crc32"] = _crc32(blob)
            # The offset depends on the metadata's length, which contains the offset: settle it.
            offset = _ALIGN
            while True:
                raw = json.dumps({**meta_base, "blob_offset": offset}, sort_keys=True).encode()
                need = -(-(_HEADER.size + len(raw)) // _ALIGN) * _ALIGN
                if need <= offset:
                    break
                offset = need
            if cap is not None and offset + len(blob) > cap:
                logger.warning(
                    "fxvino: compiled partition (%s) is larger than cache_size (%s); not cached",
                    format_size(offset + len(blob)),
                    format_size(cap),
                )
                self._count("skipped")
                return False
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=SUFFIX, dir=self.root)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_HEADER.pack(MAGIC, len(raw), zlib.crc32(raw)))
                    f.write(raw)
                    f.write(b"\0" * (offset - _HEADER.size - len(raw)))
                    f.write(blob)
                os.replace(tmp, self.path(key))
            except BaseException:
                _unlink(Path(tmp))
                raise
        except Exception as e:  # noqa: BLE001 - a full disk or read-only dir must not fail the model
            logger.warning("fxvino: could not write cache entry in %s: %s: %s", self.root, type(e).__name__, e)
            self._count("skipped")
            return False
        self._count("stores")
        if cap is not None:
            self.evict(cap, keep=self.path(key))
        return True

    # -- housekeeping

    def entries(self) -> list[tuple[Path, int, float]]:
        """(path, bytes, last use) of every entry, oldest use first."""
        out = []
        try:
            names = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        for e in names:
            if e.name.endswith(SUFFIX) and not e.name.startswith(TMP_PREFIX):
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue  # removed by another process meanwhile
                out.append((Path(e.path), st.st_size, st.st_mtime))
        out.sort(key=lambda x: x[2])
        return out

    def evict(self, cap: int, keep: Path | None = None) -> int:
        """Remove least-recently-used entries until the total fits ``cap``; returns how many."""
        with self._lock:
            self._sweep_tmp()
            entries = self.entries()
            total = sum(size for _, size, _ in entries)
            removed = 0
            for path, size, _ in entries:
                if total <= cap:
                    break
                if keep is not None and path == keep:
                    continue
                if _unlink(path):
                    removed += 1
                total -= size
            self.stats.evicted += removed
            return removed

    def clear(self) -> int:
        """Remove every entry (and temporary debris); returns how many entries were removed."""
        with self._lock:
            n = sum(1 for path, _, _ in self.entries() if _unlink(path))
            self._sweep_tmp(max_age=0.0)
            return n

    def info(self) -> dict[str, Any]:
        entries = self.entries()
        return {
            "dir": str(self.root),
            "entries": len(entries),
            "bytes": sum(s for _, s, _ in entries),
            "oldest_use": entries[0][2] if entries else None,
            "newest_use": entries[-1][2] if entries else None,
        }

    def _sweep_tmp(self, max_age: float = _STALE_TMP_SECONDS) -> None:
        now = time.time()
        try:
            names = list(os.scandir(self.root))
        except FileNotFoundError:
            return
        for e in names:
            if e.name.startswith(TMP_PREFIX):
                try:
                    if now - e.stat().st_mtime >= max_age:
                        _unlink(Path(e.path))
                except FileNotFoundError:
                    pass

    def _discard(self, path: Path, why: str) -> None:
        logger.warning("fxvino: cache entry %s is unusable (%s); removed, recompiling", path.name, why)
        _unlink(path)
        self._count("corrupt")
        self._count("misses")

    def _count(self, field: str, amount: float = 1) -> None:
        with self._lock:
            setattr(self.stats, field, getattr(self.stats, field) + amount)


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def _core() -> ov.Core:
    from fxvino.devices import core

    return core()


_CACHES: dict[Path, ModelCache] = {}
_CACHES_LOCK = threading.Lock()


def cache_for(root: Path) -> ModelCache:
    """The process-wide :class:`ModelCache` of a directory (one per resolved path)."""
    resolved = Path(root).expanduser().resolve()
    with _CACHES_LOCK:
        cache = _CACHES.get(resolved)
        if cache is None:
            cache = _CACHES[resolved] = ModelCache(resolved)
        return cache


def reset_caches() -> None:
    """Forget the per-directory cache objects (and their statistics); files stay on disk."""
    with _CACHES_LOCK:
        _CACHES.clear()


# ---- the compiler's side --------------------------------------------------------------------


def lookup(
    options: Any, sub: torch.fx.GraphModule, constants: Mapping[int, torch.Tensor]
) -> tuple[str | None, CachedPartition | None]:
    """(key, hit) for a partition; (None, None) if no key can be made (logged, never raised).

    Hashing the weights and checking a blob's crc32 are the two big costs of a hit (BERT-base:
    ~0.3 s and ~0.15 s). The graph part of the key is known first, so the newest entry of
    this architecture is verified on another thread while the weights are hashed; if the
    weights say another entry, that check is cancelled.
    """
    from fxvino.cache_key import PREFIX_LEN, graph_key, make_key, weights_key

    cache = cache_for(options.cache_dir)
    t0 = time.perf_counter()
    prefetched, cancel = None, threading.Event()
    try:
        gkey = graph_key(sub, options)
        candidate = cache.newest(gkey[:PREFIX_LEN])
        if candidate is not None:
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fxvino-verify")
            prefetched = (candidate, pool.submit(cache.read, candidate, cancel))
            pool.shutdown(wait=False)
        key = make_key(gkey, weights_key(sub, constants))
    except Exception as e:  # noqa: BLE001 - no key, no caching; the model still compiles
        cancel.set()
        logger.warning("fxvino: no cache key for this partition (%s: %s); compiling without cache", type(e).__name__, e)
        return None, None
    if prefetched is not None and prefetched[0] != cache.path(key):
        cancel.set()
    t1 = time.perf_counter()
    hit = cache.load(key, options.device, options.compile_config(), prefetched)
    cache._count("key_seconds", t1 - t0)
    cache._count("load_seconds", time.perf_counter() - t1)
    return key, hit


def store(options: Any, key: str, compiled: ov.CompiledModel, lowered: Any, name: str) -> None:
    """Store a freshly compiled partition (never raises; a partition that cannot be stored is
    only counted)."""
    cache = cache_for(options.cache_dir)
    specs = specs_to_json(lowered.inputs, lowered.outputs, lowered.runtime_positions)
    if specs is None:
        logger.info("fxvino: partition %s returns a Python value JSON cannot hold exactly; not cached", name)
        cache._count("skipped")
        return
    t0 = time.perf_counter()
    cache.store(key, compiled, specs, options.cache_size, {"partition": name, "device": options.device})
    cache._count("store_seconds", time.perf_counter() - t0)
