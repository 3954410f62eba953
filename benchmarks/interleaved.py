"""Several backends on one model, interleaved call block by call block in one process.

    python -m benchmarks.interleaved --model resnet50 --backends native_ov_bf16,fxvino_bf16
    python -m benchmarks.interleaved --model mlp --backends native_ov,fxvino --blocks 60 --calls 20

Why beside ``benchmarks.bench``: on a shared VM the host's load drifts within seconds (a 2-core
Xeon gave one fresh-process round of native OpenVINO ResNet-50 at 9.8 ms and the next at 20 ms,
with no other process in the VM), so two fresh processes a minute apart can differ by more than
the backends do. Here every backend is built once (the same module and inputs as the bench's
workers, ``benchmarks.worker.build`` and ``setup``), warmed, and then run in short blocks of
``--calls`` calls, the order rotated every block: a slow spell of the host lands on all of them
alike. Each block gives its median; the table shows the median and the minimum of those, and
the per-block ratio to the first backend (median and spread over blocks), which is the figure
to quote. The machine class is recorded as the bench records it. Each block runs inside the
worker's call context for its backend (no_grad, autocast), entered once per block as the bench's
timed loop enters it once.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


def _blocks(
    calls: dict[str, Callable[[], Any]],
    blocks: int,
    per_block: int,
    context: Callable[[str], AbstractContextManager] = lambda _name: contextlib.nullcontext(),
) -> dict[str, list[float]]:
    """Per backend, each block's median call time in ms, the backends' order rotated every block;
    ``context(name)`` is entered around each of that backend's blocks."""
    names = list(calls)
    medians: dict[str, list[float]] = {n: [] for n in names}
    for b in range(blocks):
        k = b % len(names)
        for name in names[k:] + names[:k]:
            call = calls[name]
            times = []
            with context(name):
                for _ in range(per_block):
                    t0 = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - t0)
            medians[name].append(statistics.median(times) * 1e3)
    return medians


def _table(medians: dict[str, list[float]]) -> str:
    names = list(medians)
    ref = medians[names[0]]
    rows = [
        f"| backend | median of block medians ms | min block ms | x {names[0]}, median of blocks | p10-p90 |",
        "|---|--:|--:|--:|--:|",
    ]
    for name in names:
        ms = medians[name]
        ratios = [a / r for a, r in zip(ms, ref, strict=True)]
        deciles = statistics.quantiles(ratios, n=10) if len(ratios) > 1 else ratios * 9
        rows.append(
            f"| {name} | {statistics.median(ms):.4g} | {min(ms):.4g} | {statistics.median(ratios):.3f} | "
            f"{deciles[0]:.3f}-{deciles[-1]:.3f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    from benchmarks import worker

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="one of bert, gpt2, resnet50, mlp, probe")
    parser.add_argument("--backends", required=True, help="comma-separated, the first is the reference")
    parser.add_argument("--blocks", type=int, default=40, help="blocks per backend (default 40)")
    parser.add_argument("--calls", type=int, default=10, help="calls per block (default 10)")
    parser.add_argument("--warmup", type=int, default=10, help="calls per backend before timing (default 10)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the bench's)")
    parser.add_argument("--out", help="also write the table (markdown) here")
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in worker.BACKENDS]
    if unknown or len(backends) < 2:
        parser.error(f"need two or more backends; unknown {unknown}; valid: {', '.join(worker.BACKENDS)}")

    import torch

    from benchmarks.bench import machine_class, machine_info

    torch.set_num_threads(args.threads or worker.NUM_THREADS)
    model, inputs = worker.build(args.model)
    calls: dict[str, Any] = {}
    for name in backends:
        t0 = time.perf_counter()
        call, _hooks = worker.setup(name, model, inputs, "", {}, args.model)
        with worker.call_context(name):
            for _ in range(args.warmup):
                call()
        print(f"{name}: built and warmed in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        calls[name] = call
    medians = _blocks(calls, args.blocks, args.calls, worker.call_context)
    info = machine_info()
    head = (
        f"`{args.model}`, {args.blocks} blocks of {args.calls} calls per backend, interleaved in one process, "
        f"{torch.get_num_threads()} threads. Machine class {machine_class(info)}; CPU: {info.get('cpu')}; "
        f"ISA: {info.get('isa')}; torch {info.get('torch')}, openvino {info.get('openvino')}, "
        f"fxvino {info.get('fxvino_commit')}"
    )
    text = head + "\n\n" + _table(medians) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
