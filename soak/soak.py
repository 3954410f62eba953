"""Soak tests of fxvino (outside CI; see soak/README.md). Each prints its figures.

python -m soak.soak memory  [--model bert --calls 10000]   # RSS flat after warm-up
python -m soak.soak threads [--threads 8 --calls 1000]     # all correct, two models interleaved
python -m soak.soak reset   [--model bert --rounds 3]      # reset frees compiled models
python -m soak.soak all
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import threading
import time
import weakref

import psutil
import torch

import fxvino
from fxvino.tools import zoo

MiB = 2**20


def _rss() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / MiB


def _small_bert() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return zoo.build("bert", seq=32, num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=256)


def _build(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    return _small_bert() if name == "bert-tiny" else zoo.build(name)


def _first(out):
    return out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", out)


def memory(model_name: str, calls: int) -> bool:
    """RSS after warm-up vs after ``calls`` calls; sampled every 10% to show the trend."""
    model, inputs = _build(model_name)
    compiled = torch.compile(model, backend="fxvino")
    warmup = max(50, calls // 20)
    with torch.no_grad():
        for _ in range(warmup):
            compiled(*inputs)
        base = _rss()
        samples = []
        t0 = time.perf_counter()
        for i in range(calls):
            compiled(*inputs)
            if (i + 1) % max(1, calls // 10) == 0:
                samples.append(_rss())
        dt = time.perf_counter() - t0
    growth = samples[-1] - base
    slope = (samples[-1] - samples[len(samples) // 2]) / max(1, calls // 2) * 1000
    print(f"[memory] {model_name}: {calls} calls in {dt:.1f}s ({dt / calls * 1e3:.2f} ms/call)")
    print(f"[memory] RSS after {warmup} warm-up calls {base:.1f} MiB; after the run {samples[-1]:.1f} MiB")
    print(f"[memory] growth {growth:+.1f} MiB; second half {slope:+.3f} MiB per 1000 calls")
    print(f"[memory] samples every {calls // 10} calls: " + " ".join(f"{s:.0f}" for s in samples))
    ok = growth < 16 and abs(slope) < 1.0
    print(f"[memory] {'OK' if ok else 'FAIL'} (bound: < 16 MiB growth, < 1 MiB per 1000 calls late in the run)")
    return ok


def threads(n_threads: int, calls: int) -> bool:
    """``n_threads`` threads x ``calls`` calls, alternating two compiled models; every result checked."""
    (m1, (x1,)), (m2, (x2,)) = _small_bert(), zoo.build("mlp")
    c1, c2 = torch.compile(m1, backend="fxvino"), torch.compile(m2, backend="fxvino")
    g = torch.Generator().manual_seed(0)
    in1 = [torch.randint(0, 1000, x1.shape, generator=g) for _ in range(8)]
    in2 = [torch.randn(x2.shape, generator=g) for _ in range(8)]
    with torch.no_grad():
        ref1 = [_first(m1(x)) for x in in1]
        ref2 = [m2(x) for x in in2]
        c1(in1[0]), c2(in2[0])
    wrong: list[str] = []
    latencies: list[float] = []
    lock = threading.Lock()

    def work(t: int) -> None:
        mine = []
        with torch.no_grad():
            for i in range(calls):
                j = (t + i) % 8
                s = time.perf_counter()
                if i % 2:
                    ok = torch.allclose(_first(c1(in1[j])), ref1[j], rtol=1e-3, atol=1e-4)
                else:
                    ok = torch.allclose(c2(in2[j]), ref2[j], rtol=1e-3, atol=1e-4)
                mine.append(time.perf_counter() - s)
                if not ok:
                    with lock:
                        wrong.append(f"thread {t} call {i}")
        with lock:
            latencies.extend(mine)

    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    dt = time.perf_counter() - t0
    total = n_threads * calls
    print(f"[threads] {n_threads} threads x {calls} calls (bert-tiny and mlp interleaved) in {dt:.1f}s")
    print(
        f"[threads] {total - len(wrong)}/{total} correct; median call {statistics.median(latencies) * 1e3:.2f} ms, "
        f"max {max(latencies) * 1e3:.1f} ms; {total / dt:.0f} calls/s"
    )
    ok = not wrong and len(latencies) == total
    print(f"[threads] {'OK' if ok else 'FAIL: ' + ', '.join(wrong[:5])}")
    return ok


def reset(model_name: str, rounds: int) -> bool:
    """Compile, run, drop, reset — ``rounds`` times; RSS must come back and models must die."""
    from fxvino.runtime.compiled_partition import CompiledPartition

    refs: list[weakref.ref] = []
    init = CompiledPartition.__init__

    def tracking(self, *a, **k):
        init(self, *a, **k)
        refs.append(weakref.ref(self))

    CompiledPartition.__init__ = tracking  # type: ignore[method-assign]
    model, inputs = _build(model_name)
    base = _rss()
    print(f"[reset] {model_name}: RSS with the model built {base:.0f} MiB")
    after = []
    for r in range(rounds):
        compiled = torch.compile(model, backend="fxvino")
        with torch.no_grad():
            compiled(*inputs)
        peak = _rss()
        del compiled
        fxvino.reset()
        after.append(_rss())
        alive = sum(ref() is not None for ref in refs)
        print(f"[reset] round {r + 1}: compiled {peak:.0f} MiB -> after reset {after[-1]:.0f} MiB; alive {alive}")
    CompiledPartition.__init__ = init  # type: ignore[method-assign]
    drift = after[-1] - after[0]
    ok = all(ref() is None for ref in refs) and drift < 64
    print(f"[reset] drift over rounds {drift:+.0f} MiB; {'OK' if ok else 'FAIL'} (bound: no survivors, < 64 MiB)")
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="fxvino soak tests")
    p.add_argument("which", choices=["memory", "threads", "reset", "all"])
    p.add_argument("--model", default="bert", help="zoo model or bert-tiny (memory, reset)")
    p.add_argument("--calls", type=int, default=None, help="memory: total calls (10000); threads: per thread (1000)")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args(argv)
    torch.set_num_threads(2)
    results = []
    if a.which in ("memory", "all"):
        results.append(memory(a.model, a.calls or 10000))
    if a.which in ("threads", "all"):
        results.append(threads(a.threads, a.calls or 1000))
    if a.which in ("reset", "all"):
        results.append(reset(a.model, a.rounds))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
