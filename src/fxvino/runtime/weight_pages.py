"""Keeps the pages of PyTorch weights that a compiled OpenVINO model holds its own copy of out
of resident memory.

OpenVINO's CPU plugin repacks each frozen weight into its own layout when it compiles a model.
After that, the PyTorch tensors the weights came from are read again only by an eager fallback
or by the user's own code, yet they stay resident beside the packed copy. When they were loaded
zero-copy from a file (transformers and diffusers map safetensors checkpoints whose stored dtype
is the one asked for), their pages are clean pages of a private file mapping:
``madvise(MADV_DONTNEED)`` unmaps them from this process, they stay in the kernel's page cache
(reclaimable, shared, not this process's resident memory), and the next access maps them again
unchanged. Nothing is lost and nothing is read from disk again.

The rest of each mapping a frozen weight lies in goes too. A checkpoint is mapped whole, and the
pages a graph does not freeze are read again only by PyTorch's own code (which maps them again
when it does) or not at all: the float originals of weights quantized after loading. torchao's
``quantize_`` reads every float weight of the checkpoint and replaces it with integers, and the
mapping, held by the weights still mapped (embeddings, norms), keeps those pages resident: 4.0 GB
of a 1.1B Llama's 4.4 GB checkpoint, beside 1 GB of int4 values. The pages stay in the page cache
like the weights', and the same pagemap rule below keeps whatever was changed in place.

The plugin reads every weight while it compiles, so the pages would all be resident, beside the
growing packed copy, at the end of each compile: that is the process's peak (a 1.1B-parameter
f32 Llama: 4.35 GB of mapped weights plus 4.4 GB packed). While a compile runs, a thread therefore
releases the watched weights' pages when it starts, whenever the process's file-backed memory has
grown by ``GROWTH_BYTES``, and once more when the compile ends.

Only pages the kernel can give back unchanged are released: ``/proc/self/pagemap`` tells each
page's state, and a page changed in place (a fused LoRA: the kernel made it a private anonymous
copy) or swapped out is left alone, as is anonymous memory (weights built or converted in
Python). A weight written from another thread while its own graph compiles is a race already
(the compile may freeze either value); a write landing between the pagemap read and the release
would be lost with it, and so would a first write, in that instant, to another tensor mapped from
the same checkpoint.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import logging
import mmap
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from fxvino.utils import libc

log = logging.getLogger(__name__)

MADV_DONTNEED = 4  # linux/mman-common.h
PAGE = mmap.PAGESIZE
# /proc/self/pagemap, one 64-bit entry per page (Documentation/admin-guide/mm/pagemap.rst).
_PRESENT, _SWAPPED, _FILE = np.uint64(1 << 63), np.uint64(1 << 62), np.uint64(1 << 61)
# How often a compile's watcher looks at the process's file-backed memory, and by how much it must
# have grown for a release (a release of 4.35 GB of weights scans their pagemap in ~40 ms).
TICK_SECONDS = 0.2
GROWTH_BYTES = 64 << 20


def _madvise():
    """libc's madvise, or None where pages cannot be released this way (not Linux)."""
    return libc.function("madvise", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int), ctypes.c_int)


def file_backed_ranges(maps: str | None = None) -> list[tuple[int, int]]:
    """(start, end) of this process's private file mappings, sorted (``/proc/self/maps``)."""
    if maps is None:
        try:
            with open("/proc/self/maps") as f:
                maps = f.read()
        except OSError:
            return []
    ranges = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        # address perms offset dev inode [path]: a file has an inode; [heap], [stack] ... do not
        if len(fields) < 6 or fields[4] == "0" or fields[5].startswith("[") or fields[1][3] != "p":
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        ranges.append((start, end))
    ranges.sort()
    return ranges


def _extent(t: torch.Tensor) -> tuple[int, int] | None:
    """The whole pages a CPU tensor's elements lie on, or None if it covers no whole page."""
    if t.device.type != "cpu" or t.numel() == 0 or t.is_sparse or t.is_quantized:
        return None
    span = 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))
    start = t.data_ptr()
    lo = -(-start // PAGE) * PAGE
    hi = (start + span * t.element_size()) // PAGE * PAGE
    return (lo, hi) if hi > lo else None


def _in_files(
    tensors: Iterable[torch.Tensor], files: list[tuple[int, int]], starts: list[int]
) -> tuple[int, set[tuple[int, int]]]:
    """Bytes of the tensors' extents that lie wholly inside one of the private file mappings
    ``files`` (sorted; ``starts`` their first addresses), overlaps counted once, and those mappings."""
    inside: list[tuple[int, int]] = []
    holding: set[tuple[int, int]] = set()
    extents = {e for t in tensors if isinstance(t, torch.Tensor) for e in [_extent(t)] if e is not None}
    for lo, hi in extents:  # /proc/self/maps has ~1,000 lines with torch loaded
        i = bisect.bisect_right(starts, lo) - 1
        if i >= 0 and hi <= files[i][1]:
            inside.append((lo, hi))
            holding.add(files[i])
    total, reached = 0, 0
    for lo, hi in sorted(inside):
        lo = max(lo, reached)
        total += max(0, hi - lo)
        reached = max(reached, hi)
    return total, holding


def _releasable_runs(pagemap: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """Runs of pages in [lo, hi) that read back unchanged once unmapped: not a private copy (a
    page present but not the file's) and not swapped out."""
    entries = np.frombuffer(os.pread(pagemap, (hi - lo) // PAGE * 8, lo // PAGE * 8), dtype=np.uint64)
    private = ((entries & _PRESENT) != 0) & ((entries & _FILE) == 0) | ((entries & _SWAPPED) != 0)
    if not private.any():
        return [(lo, hi)]
    edges = np.flatnonzero(np.diff(np.concatenate(([1], private.view(np.int8), [1]))))
    return [(lo + int(a) * PAGE, lo + int(b) * PAGE) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def release(tensors: Iterable[torch.Tensor]) -> int:
    """Unmaps from this process the clean pages of the file mappings ``tensors`` lie in, theirs
    and the rest of each mapping's (see the module doc); returns the bytes of the tensors' extents
    that lie in file mappings (0 where nothing does or the platform cannot)."""
    return release_groups([tensors])[0]


def release_groups(groups: Sequence[Iterable[torch.Tensor]]) -> list[int]:
    """:func:`release` of each group, every mapping they lie in read and released once."""
    madvise = _madvise()
    if madvise is None:
        return [0] * len(groups)
    files = file_backed_ranges()
    starts = [s for s, _ in files]
    found = [_in_files(tensors, files, starts) for tensors in groups]
    mappings = sorted(set().union(*(held for _, held in found)))
    if not mappings:
        return [0] * len(groups)
    try:
        pagemap = os.open("/proc/self/pagemap", os.O_RDONLY)
    except OSError:
        return [0] * len(groups)
    try:
        for lo, hi in mappings:
            for a, b in _releasable_runs(pagemap, lo, hi):
                if madvise(a, b - a, MADV_DONTNEED) != 0:
                    log.debug("madvise(MADV_DONTNEED) failed with errno %d; the rest stay", ctypes.get_errno())
                    return [0] * len(groups)
    finally:
        os.close(pagemap)
    return [n for n, _ in found]


def _file_resident() -> int:
    """Bytes of this process's resident file-backed (and shared) memory (``/proc/self/statm``)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[2]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


class _Watcher:
    """The weights of the graphs compiling now; their pages are released while the compiles read
    them, and once more when the last compile ends.

    One per process, like the ``ov.Core``. It holds the watched tensors only while a compile
    runs, when the graphs being compiled hold them anyway."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._compiling = 0
        self._watched: list[tuple[list[torch.Tensor], Any]] = []  # (tensors, report to credit)
        self._stop: threading.Event | None = None

    def watch(self, tensors: Iterable[torch.Tensor], report: Any = None) -> None:
        entry = ([t for t in tensors if isinstance(t, torch.Tensor) and _extent(t) is not None], report)
        if not entry[0]:
            return
        with self._lock:
            if self._compiling:
                self._watched.append(entry)
                if self._stop is None:
                    self._stop = threading.Event()
                    threading.Thread(target=self._tick, args=(self._stop,), daemon=True, name="fxvino-pages").start()
                return
        self._release([entry], credit=True)

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        with self._lock:
            self._compiling += 1
        try:
            yield
        finally:
            with self._lock:
                self._compiling -= 1
                last = not self._compiling
                if last:
                    watched, self._watched = self._watched, []
                    if self._stop is not None:
                        self._stop.set()
                        self._stop = None
            if last:
                self._release(watched, credit=True)

    def _tick(self, stop: threading.Event) -> None:
        """Releases at once what is resident already (pages read before the compile: by a
        quantization that read a checkpoint's float weights, or by the compile itself when this
        thread starts late on a busy machine), then whenever file-backed memory has grown."""
        baseline = self._release_watched()
        while not stop.wait(TICK_SECONDS):
            if _file_resident() - baseline >= GROWTH_BYTES:
                baseline = self._release_watched()

    def _release_watched(self) -> int:
        """Releases every watched group's pages (not credited: the compile's end does that); returns
        the file-backed memory left resident, the baseline growth is measured from."""
        with self._lock:
            watched = list(self._watched)
        self._release(watched, credit=False)
        return _file_resident()

    @staticmethod
    def _release(watched: list[tuple[list[torch.Tensor], Any]], credit: bool) -> None:
        released = release_groups([tensors for tensors, _ in watched])
        for (_, report), n in zip(watched, released, strict=True):
            if credit and report is not None:
                report.released_weight_bytes += n


_watcher = _Watcher()
watch = _watcher.watch
compiling = _watcher.compiling
