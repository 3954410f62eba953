"""fxvino's persistent model cache: compiled partitions on disk, found again by a key that
cannot go stale (``cache/key.py``), loaded without lowering or compiling. This module is the
store (one :class:`ModelCache` per directory); ``cache/entry.py`` is the file format and
``cache/lookup.py`` the compiler's side.

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
  The crc32 pass is skipped only when the file is provably the one whose bytes were checked:
  see ``entry.set_stamp`` (an extended attribute naming the file's device, inode, size and mtime
  after the check, written once the data is on disk).
- **Cost.** An entry records how long lowering and compiling its partition took. When hits
  of a graph (the weight-independent half of the key) cost more than that (hashing the weights,
  checking and importing the blob) in two processes in a row, the graph is set aside: later
  lookups of it skip the weights hash and the cache and just compile (``cache/lookup.py``). A
  cache that can only slow a model down steps aside; ``fxvino cache clear`` forgets the marks.
- **Size cap.** After each store, least-recently-used entries (mtime; a hit touches it) are
  removed until the directory fits ``cache_size``.

The only process-wide state is :data:`_CACHES`, one :class:`ModelCache` per directory, each
with its own lock; :func:`reset_caches` drops them.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import os
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import torch
import torch.fx

from fxvino.cache import entry
from fxvino.cache.entry import (
    ALIGN,
    HEADER,
    MAGIC,
    SUFFIX,
    TMP_PREFIX,
    CacheEntryError,
    specs_from_json,
)
from fxvino.lowering.convert import InputSpec, OutputSpec
from fxvino.runtime import weight_pages
from fxvino.utils.sizes import format_size

logger = logging.getLogger("fxvino")

# ``<graph prefix>.aside``: this graph's hits cost more than compiling it (see ``lookup``).
ASIDE_SUFFIX = ".aside"
# Slow hits in a row that set a graph aside. One could be a one-off: the first hit after a
# reboot reads the blob from disk, where the compile it is compared with had the weights in
# memory; a permanent decision should not rest on it.
ASIDE_STRIKES = 2
# Temporary files older than this are debris of a killed writer.
_STALE_TMP_SECONDS = 3600.0
# Misses remembered for ``store`` (one per partition being compiled; more means never stored).
_MAX_PENDING_MISSES = 256


@dataclasses.dataclass
class CachedPartition:
    """What a hit gives back: the compiled model, its specs, and the mapping it lives in."""

    compiled: ov.CompiledModel
    inputs: list[InputSpec]
    outputs: list[OutputSpec]
    runtime_positions: list[int]
    mapping: Any  # the np.memmap the compiled model's memory may point into: keep it alive
    compile_seconds: float | None = None  # lowering + compile when the entry was made (None: not recorded)
    partition: str = ""  # the name it was stored under (reports)


@dataclasses.dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    stores: int = 0
    corrupt: int = 0
    evicted: int = 0
    skipped: int = 0  # partitions not stored (Python outputs JSON cannot hold, too big, I/O error)
    aside: int = 0  # partitions compiled without looking (their graph's hits cost more than compiling)
    slow_hits: int = 0  # hits that cost more than compiling their partition (a strike each)
    set_aside: int = 0  # graphs this process set aside (their last ASIDE_STRIKES hits were slow)
    crc_skipped: int = 0  # hits whose blob check was skipped: the file is unchanged since it was checked
    key_seconds: float = 0.0  # computing keys (mostly hashing weights)
    load_seconds: float = 0.0  # checking and importing hits (after the key was known)
    verify_seconds: float = 0.0  # reading and checking blobs (part of it may overlap key_seconds)
    import_seconds: float = 0.0  # OpenVINO's import_model of hits
    store_seconds: float = 0.0  # exporting and writing entries


@dataclasses.dataclass
class EntryRead:
    """An entry's metadata and mapped blob, with the identity of the file they came from."""

    meta: dict
    blob: np.memmap
    identity: tuple[int, ...]  # (device, inode, size, mtime_ns) of the file when it was read
    checked: bool  # True: this read computed the blob's crc32; False: a valid stamp vouched for it


class Prefetch:
    """An entry read and checked on another thread while the weights are hashed."""

    def __init__(self, path: Path, future: concurrent.futures.Future, cancel: threading.Event):
        self.path, self.future, self._cancel = path, future, cancel

    def cancel(self) -> None:
        """Not needed after all: stop the read (its crc32 pass stops at the next chunk)."""
        self._cancel.set()

    def result(self) -> EntryRead:
        return self.future.result()


class ModelCache:
    """Entries of one cache directory. Thread-safe; safe against other processes using it."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.stats = CacheStats()
        self._lock = threading.Lock()
        # key -> perf_counter() when its lookup missed: ``store`` turns it into the entry's
        # lowering + compile seconds. Popped by ``store``; bounded for misses never stored.
        self._missed: dict[str, float] = {}
        self._stampers: list[threading.Thread] = []

    def path(self, key: str) -> Path:
        return self.root / f"{key}{SUFFIX}"

    # -- reading

    def load(
        self,
        key: str,
        device: str,
        config: Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any]],
        prefetched: Prefetch | None = None,
        release_pages: bool = False,
    ) -> CachedPartition | None:
        """The compiled partition stored under ``key``, or None (a miss, or a bad entry removed).

        ``config`` is the import's OpenVINO config, or a function of the run-time properties the
        graph asked for when it was compiled (stored beside the blob, which does not keep them)
        that makes it. ``prefetched`` is a :meth:`prefetch` started before the key was known; it
        is used when it is this key's path. With ``release_pages``, the blob's pages that import
        reads leave resident memory as the compile's weights do (weight_pages.py): the plugin
        packs its own copy of the weights from them.
        """
        path = self.path(key)
        try:
            if prefetched is not None and prefetched.path == path:
                got = prefetched.result()
            else:
                t = time.perf_counter()
                got = self.read(path)
                self._count("verify_seconds", time.perf_counter() - t)
            if got.meta.get("key") != key:
                raise CacheEntryError(f"entry holds key {got.meta.get('key')!r}, expected {key!r}")
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
            inputs, outputs, positions = specs_from_json(got.meta)
            if callable(config):
                wishes = got.meta.get("run_config")
                config = config(wishes if isinstance(wishes, dict) else {})
            if release_pages:
                weight_pages.watch([torch.from_numpy(got.blob)])
            compiled = self._import(got.blob, device, config)
        except Exception as e:  # noqa: BLE001 - a blob OpenVINO rejects is rebuilt, never fatal
            self._discard(path, f"{type(e).__name__}: {e}")
            return None
        self._touch(path, got)
        self._count("hits")
        if not got.checked:
            self._count("crc_skipped")
        spent = got.meta.get("compile_seconds")
        spent = float(spent) if isinstance(spent, (int, float)) and not isinstance(spent, bool) else None
        name = str(got.meta.get("partition", ""))
        return CachedPartition(compiled, inputs, outputs, positions, got.blob, spent, name)

    def prefetch(self, path: Path) -> Prefetch:
        """Read and check ``path`` on another thread (``load`` uses it if the key names it).

        Importing it there too, before the key is known, was measured and dropped: on the SD
        1.5 UNet the import and the BLAKE3 hash slowed each other down (weights key 0.77 ->
        1.2 s, import 2.3 -> 3.1 s) for no gain in the first image.
        """
        cancel = threading.Event()

        def work() -> EntryRead:
            t = time.perf_counter()
            got = self.read(path, cancel)
            self._count("verify_seconds", time.perf_counter() - t)
            return got

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fxvino-prefetch")
        future = pool.submit(work)
        pool.shutdown(wait=False)
        return Prefetch(path, future, cancel)

    def _import(self, blob: np.ndarray, device: str, config: Mapping[str, Any]) -> ov.CompiledModel:
        t = time.perf_counter()
        try:
            return _core().import_model(ov.Tensor(blob, shared_memory=True), device, dict(config))
        finally:
            self._count("import_seconds", time.perf_counter() - t)

    def with_prefix(self, prefix: str) -> list[Path]:
        """The entries whose name starts with ``prefix``, most recently used first."""
        found = []
        try:
            names = [e for e in os.scandir(self.root) if e.name.startswith(prefix) and e.name.endswith(SUFFIX)]
        except OSError:
            return []
        for e in names:
            try:
                found.append((e.stat().st_mtime_ns, e.path))
            except FileNotFoundError:
                continue  # removed by another process meanwhile
        return [Path(p) for _, p in sorted(found, reverse=True)]

    def read(self, path: Path, cancel: threading.Event | None = None) -> EntryRead:
        """An entry's metadata and its verified blob (mapped); raises CacheEntryError if bad.

        Header, metadata, identity, stamp and mapping all come from one open file descriptor,
        so a concurrent ``os.replace`` cannot pair one file's stamp with another's bytes.
        """
        with open(path, "rb") as f:
            head = f.read(HEADER.size)
            if len(head) < HEADER.size:
                raise CacheEntryError(f"truncated header ({len(head)} bytes)")
            magic, meta_len, meta_crc = HEADER.unpack(head)
            if magic != MAGIC:
                raise CacheEntryError(f"not an fxvino cache entry (magic {magic!r})")
            raw = f.read(meta_len)
            if len(raw) != meta_len or zlib.crc32(raw) != meta_crc:
                raise CacheEntryError("metadata truncated or corrupt (crc32 mismatch)")
            try:
                meta = json.loads(raw)
                offset, blob_size = int(meta["blob_offset"]), int(meta["blob_size"])
                blob_crc = int(meta["blob_crc32"])
            except (ValueError, KeyError, TypeError) as e:
                raise CacheEntryError(f"unreadable metadata: {e}") from e
            st = os.fstat(f.fileno())
            if st.st_size != offset + blob_size:
                raise CacheEntryError(
                    f"file is {st.st_size} bytes, expected {offset + blob_size} (truncated or extended)"
                )
            identity = entry.identity(st)
            vouched = entry.get_stamp(f.fileno()) == entry.stamp_value(identity, meta.get("key"), blob_crc)
            blob = np.memmap(f, dtype=np.uint8, mode="c", offset=offset, shape=(blob_size,))
        if vouched:
            return EntryRead(meta, blob, identity, checked=False)
        if entry.crc32(blob, cancel) != blob_crc:
            raise CacheEntryError("compiled blob corrupt (crc32 mismatch)")
        return EntryRead(meta, blob, identity, checked=True)

    def _touch(self, path: Path, got: EntryRead) -> None:
        """Mark a hit as recently used (mtime, for LRU eviction) and renew its stamp.

        The touch changes the identity a stamp names, so the stamp is written again for the new
        identity: at once when a stamp vouched for this read (the bytes were already checked
        and on disk), after an fsync when this read checked them itself (``_stamp_when_durable``).
        Nothing is touched or stamped if the file changed since it was read.
        """
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            if entry.identity(os.fstat(fd)) != got.identity:
                return
            now = time.time_ns()
            os.utime(fd if os.utime in os.supports_fd else path, ns=(now, now))
            identity = entry.identity(os.fstat(fd))
            key, crc = got.meta.get("key"), int(got.meta["blob_crc32"])
            if got.checked:
                self._stamp_when_durable(path, identity, key, crc)
            else:
                entry.set_stamp(fd, identity, key, crc)
        except OSError:
            pass
        finally:
            os.close(fd)

    def _stamp_when_durable(self, path: Path, identity: tuple[int, ...], key: Any, crc: int) -> None:
        """Stamp ``path`` once its bytes are on disk (fsync), on a daemon thread: the fsync
        waits for write-back of a just-stored entry (seconds for gigabytes) and no caller
        should wait for it. A process that exits first leaves no stamp: the next read checks."""

        def work() -> None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                return
            try:
                if entry.identity(os.fstat(fd)) != identity:
                    return
                os.fsync(fd)
                if entry.identity(os.fstat(fd)) == identity:
                    entry.set_stamp(fd, identity, key, crc)
            except OSError:
                pass
            finally:
                os.close(fd)

        thread = threading.Thread(target=work, name="fxvino-stamp", daemon=True)
        with self._lock:
            self._stampers = [t for t in self._stampers if t.is_alive()]
            self._stampers.append(thread)
        thread.start()

    def settle(self, timeout: float | None = None) -> None:
        """Wait for pending stamps (tests, and callers that want the next process to skip checks)."""
        with self._lock:
            pending = list(self._stampers)
        for t in pending:
            t.join(timeout)

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
            meta_base["blob_crc32"] = entry.crc32(blob)
            # The offset depends on the metadata's length, which contains the offset: settle it.
            offset = ALIGN
            while True:
                raw = json.dumps({**meta_base, "blob_offset": offset}, sort_keys=True).encode()
                need = -(-(HEADER.size + len(raw)) // ALIGN) * ALIGN
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
                    f.write(HEADER.pack(MAGIC, len(raw), zlib.crc32(raw)))
                    f.write(raw)
                    f.write(b"\0" * (offset - HEADER.size - len(raw)))
                    f.write(blob)
                    f.flush()
                    written = entry.identity(os.fstat(f.fileno()))
                os.replace(tmp, self.path(key))
            except BaseException:
                _unlink(Path(tmp))
                raise
        except Exception as e:  # noqa: BLE001 - a full disk or read-only dir must not fail the model
            logger.warning("fxvino: could not write cache entry in %s: %s: %s", self.root, type(e).__name__, e)
            self._count("skipped")
            return False
        self._count("stores")
        # The crc32 was computed over the very bytes written: once they are on disk, reading
        # them back would check nothing more (``_stamp``), so the first hit need not either.
        self._stamp_when_durable(self.path(key), written, key, meta_base["blob_crc32"])
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
        """Remove every entry, every aside mark and temporary debris; returns how many entries
        were removed."""
        with self._lock:
            n = sum(1 for path, _, _ in self.entries() if _unlink(path))
            for path, _ in self.asides():
                _unlink(path)
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
            "aside": [record for _, record in self.asides()],
        }

    # -- graphs whose hits cost more than compiling

    def aside_path(self, prefix: str) -> Path:
        return self.root / f"{prefix}{ASIDE_SUFFIX}"

    def strikes(self, prefix: str) -> int:
        """Slow hits in a row of graph ``prefix`` (``ASIDE_STRIKES`` or more: set aside)."""
        try:
            record = json.loads(self.aside_path(prefix).read_text())
            return int(record["strikes"])
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, KeyError, TypeError):
            return ASIDE_STRIKES  # a mark we cannot read was a decision to step aside: keep it

    def is_aside(self, prefix: str) -> bool:
        return self.aside_path(prefix).exists() and self.strikes(prefix) >= ASIDE_STRIKES

    def asides(self) -> list[tuple[Path, dict[str, Any]]]:
        """(path, record) of every mark, set aside or with strikes; unreadable reads as ``{}``."""
        out = []
        try:
            names = [e for e in os.scandir(self.root) if e.name.endswith(ASIDE_SUFFIX)]
        except OSError:
            return []
        for e in sorted(names, key=lambda e: e.name):
            try:
                record = json.loads(Path(e.path).read_text())
            except (OSError, ValueError):
                record = {}
            out.append((Path(e.path), record if isinstance(record, dict) else {}))
        return out

    def strike(self, prefix: str, record: Mapping[str, Any]) -> bool:
        """Count a slow hit of graph ``prefix``; True if that sets it aside, which also removes
        its entries (no lookup will read them again).

        The mark is written like an entry (temporary file, ``os.replace``); two processes
        striking at once may count one strike, and failing to write only means the next process
        tries the cache again: both err towards using the cache.
        """
        strikes = self.strikes(prefix) + 1
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=ASIDE_SUFFIX, dir=self.root)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump({**record, "graph": prefix, "strikes": strikes, "when": time.time()}, f, sort_keys=True)
                os.replace(tmp, self.aside_path(prefix))
            except BaseException:
                _unlink(Path(tmp))
                raise
        except OSError as e:
            logger.warning("fxvino: could not write %s in %s: %s", ASIDE_SUFFIX, self.root, e)
            return False
        self._count("slow_hits")
        if strikes < ASIDE_STRIKES:
            return False
        for path in self.with_prefix(prefix):
            _unlink(path)  # a hit's mapping outlives its file: the model in memory keeps working
        self._count("set_aside")
        return True

    def acquit(self, prefix: str) -> None:
        """A hit of ``prefix`` paid off: earlier strikes (not yet a decision) are forgotten."""
        if 0 < self.strikes(prefix) < ASIDE_STRIKES:
            _unlink(self.aside_path(prefix))

    def note_miss(self, key: str, when: float) -> None:
        """Remember when ``key``'s lookup missed: ``store`` records the time to compile it."""
        with self._lock:
            self._missed.pop(key, None)
            self._missed[key] = when
            while len(self._missed) > _MAX_PENDING_MISSES:  # misses that never reached store
                del self._missed[next(iter(self._missed))]

    def pop_miss(self, key: str) -> float | None:
        with self._lock:
            return self._missed.pop(key, None)

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
