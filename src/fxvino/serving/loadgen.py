"""Concurrent clients for the serving tests and benchmark: latencies, throughput, every answer kept.

Each client is a thread sending its share of the requests one after another (a closed loop), as
a fixed pool of callers would; answers are kept by request index so each can be checked.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class LoadResult:
    latencies: list[float]  # seconds, by request index
    answers: list[Any]  # whatever ``send`` returned, by request index
    wall_seconds: float
    concurrency: int

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies) * 1000

    @property
    def p99_ms(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.wall_seconds

    def row(self, name: str) -> str:
        return (
            f"| {name} | {len(self.latencies)} | {self.concurrency} | {self.p50_ms:.1f} | {self.p99_ms:.1f} "
            f"| {self.throughput:.1f} |"
        )


TABLE_HEADER = "| server | requests | clients | p50 ms | p99 ms | requests/s |\n|---|--:|--:|--:|--:|--:|"


def run_load(send: Callable[[int], Any], requests: int, concurrency: int) -> LoadResult:
    """Call ``send(i)`` for i in range(requests) from ``concurrency`` threads; exceptions propagate."""
    latencies: list[float] = [0.0] * requests
    answers: list[Any] = [None] * requests

    def client(c: int) -> None:
        for i in range(c, requests, concurrency):
            t0 = time.perf_counter()
            answers[i] = send(i)
            latencies[i] = time.perf_counter() - t0

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for f in [pool.submit(client, c) for c in range(concurrency)]:
            f.result()
    return LoadResult(latencies, answers, time.perf_counter() - t0, concurrency)
