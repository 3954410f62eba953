"""The model cache's entry file: its header, the blob's crc32, the "checked" stamp, the specs as JSON.

One entry is one file, ``<key>.fxvc``::

    magic "FXVINOC1" | u64 meta length | u32 crc32(meta) | meta (JSON) | padding | blob

(``cache/store.py`` says why it has this shape.)
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from fxvino.lowering.convert import InputSpec, OutputSpec

MAGIC = b"FXVINOC1"
SUFFIX = ".fxvc"
TMP_PREFIX = ".tmp-"
HEADER = struct.Struct("<8sQI")
ALIGN = 4096
_CHUNK = 64 << 20
# The extended attribute vouching that an entry's bytes were checked (``set_stamp``).
STAMP_ATTR = "user.fxvino.verified"


class CacheEntryError(Exception):
    """An entry on disk is truncated, corrupt, or not one of ours."""


class Cancelled(Exception):
    """A prefetching read was not needed after all."""


def crc32(buf: Any, cancel: threading.Event | None = None) -> int:
    """crc32 of a large buffer in chunks (zlib releases the GIL on each; ``cancel`` stops it)."""
    view = memoryview(buf).cast("B")
    crc = 0
    for i in range(0, len(view), _CHUNK):
        if cancel is not None and cancel.is_set():
            raise Cancelled
        crc = zlib.crc32(view[i : i + _CHUNK], crc)
    return crc


# ---- stamps: "these bytes were checked" --------------------------------------------------------


def identity(st: os.stat_result) -> tuple[int, ...]:
    """What any write, truncation or replacement of a file changes: device, inode, size and
    modification time (nanoseconds; a ``write`` sets it, ``os.replace`` brings another inode)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def stamp_value(identity: tuple[int, ...], key: Any, crc: int) -> bytes:
    return json.dumps({"file": list(identity), "key": key, "blob_crc32": crc}, separators=(",", ":")).encode()


def get_stamp(fd: int) -> bytes | None:
    try:
        return os.getxattr(fd, STAMP_ATTR)
    except (OSError, AttributeError):  # no such attribute, no xattr support, or not Linux
        return None


def set_stamp(fd: int, identity: tuple[int, ...], key: Any, crc: int) -> None:
    """Vouch that the file with ``identity`` holds bytes whose crc32 matched ``crc``.

    Why skipping the check on a matching stamp is safe: the crc32 guards against an entry whose
    bytes differ from what fxvino wrote. fxvino never writes an entry in place (temporary
    file + ``os.replace``, so a new entry is a new inode without this attribute); any other
    write or truncation changes the mtime or size; a copy is another inode. What the stamp
    cannot see, a change that keeps inode, size and mtime, is a deliberate restore of the
    mtime or silent media corruption; a crc32 check would not see the first either (it is no
    signature), and the second is what the disk's own ECC reports as an I/O error. The
    attribute is set only after ``fsync``, so a crash cannot leave a stamp over bytes that
    never reached the disk. Setting it changes the ctime, which is why ctime is not part of
    the identity. No xattr support (some network file systems, not Linux): every hit checks.
    """
    with contextlib.suppress(OSError, AttributeError):
        os.setxattr(fd, STAMP_ATTR, stamp_value(identity, key, crc))


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
