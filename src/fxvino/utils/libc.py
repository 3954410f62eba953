"""The C library's functions that fxvino calls directly (Linux only): ``madvise`` to release a
weight's file-mapped pages (weight_pages.py) and ``malloc_trim`` to return the plugin's freed
buffers to the kernel (runtime/heap_trim.py). Neither has a Python binding."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from typing import Any


@functools.cache
def _library() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


@functools.cache
def function(name: str, argtypes: tuple[Any, ...], restype: Any) -> Any | None:
    """libc's ``name`` with its C signature, or None where there is no such function (not Linux,
    another C library)."""
    library = _library()
    fn = getattr(library, name, None) if library is not None else None
    if fn is None:
        return None
    fn.argtypes, fn.restype = list(argtypes), restype
    return fn
