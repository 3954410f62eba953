"""Byte sizes as users write them ("4 GB", "512MiB", 10**9) and as fxvino prints them."""

from __future__ import annotations

from typing import Any

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
