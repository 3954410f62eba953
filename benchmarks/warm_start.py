"""Warm start: time to the first result with fxvino's model cache, against ``aot_eager``.

    python -m benchmarks.warm_start                       # bert and resnet50, 3 rounds
    python -m benchmarks.warm_start --models mlp --rounds 1

Every measurement runs in a fresh process (``--worker``), timing ``torch.compile(...)`` plus
the first call under ``torch.no_grad()`` (building the model is not timed):

- ``aot_eager``: Dynamo + AOTAutograd tracing and an eager run, the floor no backend skips;
- ``cold``: fxvino with ``model_caching=True`` and an empty cache directory (lowers,
  compiles, stores the entry);
- ``warm``: fxvino in a new process on the directory the cold run filled.

Rounds are interleaved (aot_eager, cold, warm, then again) because the machine's load
drifts; medians are printed with the ratios warm/aot_eager and cold/aot_eager. The warm
worker also prints where its time went (cache key, i.e. hashing weights; checking and
importing the entry; the rest is tracing, partitioning and the first inference).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULT = "WARM_START_RESULT "


def worker(model_name: str, kind: str, cache_dir: str) -> None:
    import torch

    from fxvino.cache import store as cache
    from fxvino.tools import zoo

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    model, inputs = zoo.build(model_name)
    t0 = time.perf_counter()
    if kind == "aot_eager":
        compiled = torch.compile(model, backend="aot_eager")
    else:
        compiled = torch.compile(
            model, backend="fxvino", options={"model_caching": True, "cache_dir": cache_dir, "cache_size": None}
        )
    with torch.no_grad():
        out = compiled(*inputs)
    first = time.perf_counter() - t0
    with torch.no_grad():
        ref = model(*inputs)
    o = out[0] if isinstance(out, tuple) else getattr(out, "last_hidden_state", out)
    r = ref[0] if isinstance(ref, tuple) else getattr(ref, "last_hidden_state", ref)
    result = {"first": first, "max_abs_err": float((o - r).abs().max())}
    if kind != "aot_eager":
        st = cache.cache_for(Path(cache_dir)).stats
        result |= {"hits": st.hits, "stores": st.stores, "key_s": st.key_seconds, "load_s": st.load_seconds}
        result |= {"store_s": st.store_seconds}
    print(RESULT + json.dumps(result), flush=True)


def run_one(model_name: str, kind: str, cache_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.warm_start", "--worker", model_name, kind, str(cache_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent)
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    raise RuntimeError(f"{model_name}/{kind} worker failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,resnet50", help="comma-separated fxvino.tools.zoo names")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs=3, metavar=("MODEL", "KIND", "CACHE_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(*args.worker)
        return 0
    rows = []
    for model_name in args.models.split(","):
        times: dict[str, list[float]] = {"aot_eager": [], "cold": [], "warm": []}
        details: list[dict] = []
        for rnd in range(args.rounds):
            tmp = Path(tempfile.mkdtemp(prefix="fxvino-warm-"))
            try:
                load = os.getloadavg()[0]
                a = run_one(model_name, "aot_eager", tmp)
                c = run_one(model_name, "cold", tmp)
                w = run_one(model_name, "warm", tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            if c["stores"] < 1 or w["hits"] < 1:
                raise RuntimeError(f"{model_name}: the warm run did not hit the cache (cold {c}, warm {w})")
            times["aot_eager"].append(a["first"])
            times["cold"].append(c["first"])
            times["warm"].append(w["first"])
            details.append(w)
            print(
                f"{model_name} round {rnd + 1}: aot_eager {a['first']:.2f}s  cold {c['first']:.2f}s  "
                f"warm {w['first']:.2f}s (key {w['key_s']:.2f}s, load {w['load_s']:.2f}s; cold store "
                f"{c['store_s']:.2f}s)  warm/aot_eager {w['first'] / a['first']:.2f}  load avg {load:.1f}",
                flush=True,
            )
        med = {k: statistics.median(v) for k, v in times.items()}
        key_s = statistics.median(d["key_s"] for d in details)
        load_s = statistics.median(d["load_s"] for d in details)
        rows.append((model_name, med, key_s, load_s))
    print()
    print(
        f"{'model':10s} {'aot_eager':>10s} {'cold':>8s} {'warm':>8s} {'warm/aot':>9s} {'cold/aot':>9s}  warm: key, load"
    )
    for model_name, med, key_s, load_s in rows:
        print(
            f"{model_name:10s} {med['aot_eager']:9.2f}s {med['cold']:7.2f}s {med['warm']:7.2f}s "
            f"{med['warm'] / med['aot_eager']:9.2f} {med['cold'] / med['aot_eager']:9.2f}  {key_s:.2f}s, {load_s:.2f}s"
        )
    print(f"(medians of {args.rounds} interleaved rounds, each run a fresh process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
