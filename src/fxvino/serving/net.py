"""Loopback plumbing shared by the local TorchServe and Ray launchers: free ports, HTTP calls."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Mapping

# No proxy for loopback, whatever the environment says.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port(low: int | None = None, high: int | None = None) -> int:
    """A port free on 127.0.0.1: any (the OS picks), or the first free one in ``[low, high)``."""
    candidates = [0] if low is None or high is None else range(low, high)
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError(f"no free port in {low}-{high}")


def http(
    method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None, timeout: float = 300.0
) -> tuple[int, bytes]:
    """``(status, body)``; HTTP errors are answers, not exceptions (connection errors still raise)."""
    req = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with _OPENER.open(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
