"""Gives back the resident memory of PyTorch weights that a compiled OpenVINO model holds its
own copy of.

OpenVINO's CPU plugin repacks each frozen weight into its own layout when it compiles a model.
After that, the PyTorch tensors the weights came from are read again only by an eager fallback
or by the user's own code, yet they stay resident beside the packed copy. When they were loaded
zero-copy from a file (transformers and diffusers map safetensors checkpoints whose stored dtype
is the one asked for), their pages are clean pages of a private file mapping: the kernel can drop
them from this process and read them back from the file on the next access, so nothing is lost.
``madvise(MADV_PAGEOUT)`` asks exactly that (Linux 5.4+). A 1.1B-parameter f32 Llama after
``generate()``: 9.4 -> 5.2 GB resident.

Only pages inside private file mappings are asked for: anonymous memory (weights built or
converted in Python) cannot be dropped without swap, and a page changed in place (a fused LoRA)
is anonymous too. If OpenVINO does read a weight in place (an embedding table's Gather), its
pages simply come back on the next call.

The request waits until fxvino has compiled nothing for ``QUIET_SECONDS``: dropped pages leave the
page cache too, so a compile that reads the weights again reads them from disk (4.2 GB took 3-5 s
on the development machine), and ``generate()`` compiles three graphs over the same weights within
a few seconds of each other. Asking after each compile made its first call 69.0 -> 77.8 s.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import ctypes.util
import functools
import logging
import mmap
import sys
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import torch

log = logging.getLogger(__name__)

MADV_PAGEOUT = 21  # linux/mman-common.h
PAGE = mmap.PAGESIZE
# Longer than the gap between the compiles of one generate(): a prefill run plus Dynamo tracing the
# decode step (~13 s for a 1.1B Llama's 512-token prompt on 2 cores).
QUIET_SECONDS = 30.0


@functools.cache
def _madvise() -> ctypes._CFuncPtr | None:
    """libc's madvise, or None where there is no MADV_PAGEOUT to ask for (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


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


def page_out(tensors: Iterable[torch.Tensor]) -> int:
    """Asks the kernel to drop the file-backed pages under ``tensors``; returns the bytes asked
    for (0 where nothing is file-backed or the platform cannot)."""
    madvise = _madvise()
    if madvise is None:
        return 0
    extents = {e for t in tensors if isinstance(t, torch.Tensor) for e in [_extent(t)] if e is not None}
    if not extents:
        return 0
    files = file_backed_ranges()
    starts = [s for s, _ in files]
    asked = 0
    for lo, hi in sorted(extents):
        i = bisect.bisect_right(starts, lo) - 1
        if i < 0 or hi > files[i][1]:
            continue  # not inside one file mapping
        if madvise(lo, hi - lo, MADV_PAGEOUT) != 0:
            log.debug("madvise(MADV_PAGEOUT) failed with errno %d; the rest stay resident", ctypes.get_errno())
            return asked
        asked += hi - lo
    return asked


class _Pager:
    """Page-outs asked for after compiling, made once no compile has run for ``QUIET_SECONDS``.

    One per process, like the ``ov.Core``: it holds weak references only, and delays nothing but
    these requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[list[weakref.ref], Any]] = []  # (tensors, report to credit)
        self._timer: threading.Timer | None = None
        self._compiling = 0

    def later(self, tensors: Iterable[torch.Tensor], report: Any = None) -> None:
        refs = [weakref.ref(t) for t in tensors if isinstance(t, torch.Tensor) and _extent(t) is not None]
        if not refs:
            return
        with self._lock:
            self._pending.append((refs, weakref.ref(report) if report is not None else None))
            self._arm()

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        with self._lock:
            self._compiling += 1
            self._arm()  # disarms: nothing is asked while a compile runs
        try:
            yield
        finally:
            with self._lock:
                self._compiling -= 1
                self._arm()

    def flush(self) -> int:
        """Makes the pending requests now; returns the bytes asked for."""
        with self._lock:
            pending, self._pending = self._pending, []
            self._arm()  # disarms: nothing is left to ask
        asked = 0
        for refs, report_ref in pending:
            tensors = [t for t in (r() for r in refs) if t is not None]
            n = page_out(tensors)
            asked += n
            report = report_ref() if report_ref is not None else None
            if report is not None:
                report.paged_out_bytes += n
        return asked

    def _arm(self) -> None:  # with the lock held
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending and not self._compiling:
            self._timer = threading.Timer(QUIET_SECONDS, self.flush)
            self._timer.daemon = True
            self._timer.start()


_pager = _Pager()
page_out_later = _pager.later
compiling = _pager.compiling
flush = _pager.flush
