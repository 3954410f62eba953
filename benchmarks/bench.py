"""Side-by-side latency, cold-compile and accuracy benchmark of fxvino (see benchmarks/README.md).

    python -m benchmarks.bench                      # everything, 2 interleaved rounds
    python -m benchmarks.bench --quick              # mlp + probe, 1 round (~2 minutes)
    python -m benchmarks.bench --models bert --backends fxvino,native_ov --repeats 3

Every (model, backend) measurement runs in a fresh ``python -m benchmarks.worker`` process
(with its own empty Inductor cache directory and working directory), so nothing compiled or
allocated by one backend helps or hurts another. Rounds are interleaved: every pair is
measured once, then again (backend order reversed on odd rounds), and the table shows medians
over rounds.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.worker import BACKENDS, MODELS, RESULT_PREFIX, _cpu_ticks

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
OV_WHEEL_BACKENDS = ("openvino", "openvino_bf16")
QUICK_MODELS = ("mlp", "probe")


# --------------------------------------------------------------------------- machine


# (vendor, family) -> [(first model, last model, name)]. Flags do not tell these apart, and their
# speed differs where it matters: Zen 4 runs each 512-bit instruction as two 256-bit halves, Zen 5
# does not, so OpenVINO's AVX-512 kernels ran ~2x faster on a Zen 5 EPYC than on a Zen 4 one while
# PyTorch's MKL (AVX2 on AMD) barely changed (benchmarks/diffusion_results.md, 2026-11-25).
_UARCH: dict[tuple[str, int], list[tuple[int, int, str]]] = {
    ("AuthenticAMD", 0x17): [(0x00, 0x2F, "zen"), (0x30, 0xFF, "zen2")],
    ("AuthenticAMD", 0x19): [(0x00, 0x0F, "zen3"), (0x10, 0x1F, "zen4"), (0x20, 0x5F, "zen3"), (0x60, 0xAF, "zen4")],
    ("AuthenticAMD", 0x1A): [(0x00, 0xFF, "zen5")],
    ("GenuineIntel", 6): [
        (0x55, 0x55, "skylake-sp"), (0x6A, 0x6C, "icelake-sp"), (0x8F, 0x8F, "sapphirerapids"),
        (0xCF, 0xCF, "emeraldrapids"), (0xAD, 0xAE, "graniterapids"),
    ],
}  # fmt: skip


def microarchitecture(vendor: str, family: int, model: int) -> str | None:
    """The core generation of a CPU from its cpuid family and model, or None when not in the table."""
    return next((name for lo, hi, name in _UARCH.get((vendor, family), []) if lo <= model <= hi), None)


def interleaved_times(contenders: dict[str, Any], *args: Any, rounds: int, calls: int = 5) -> dict[str, list[float]]:
    """Seconds per call of each contender on ``args``: ``rounds`` rounds of ``calls`` calls each,
    the contenders taking turns, each round starting on idle threads."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, fn in contenders.items():
            time.sleep(0.02)  # past libgomp's and TBB's spin: each contender starts on idle threads
            for _ in range(calls):
                t0 = time.perf_counter()
                fn(*args)
                times[name].append(time.perf_counter() - t0)
    return times


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"cpu": platform.processor() or "unknown", "logical_cores": os.cpu_count()}
    try:
        text = Path("/proc/cpuinfo").read_text()
        first = dict(
            (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in text.split("\n\n")[0].splitlines())
        )
        info["cpu"] = first.get("model name", info["cpu"])
        if first.get("cpu family", "").isdigit() and first.get("model", "").isdigit():
            family, model = int(first["cpu family"]), int(first["model"])
            info["cpuid"] = f"family {family:#x} model {model:#x}"
            uarch = microarchitecture(first.get("vendor_id", ""), family, model)
            if uarch:
                info["uarch"] = uarch
                info["cpu"] += f" ({uarch})"
        flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
        info["isa"] = ", ".join(f for f in _ISA if f in flags)
        seen = _cpuid_isa(flags)
        if seen != info["isa"]:  # an emulated CPU (qemu-x86_64 -cpu Haswell)
            info["host_isa"], info["isa"] = info["isa"], seen
        phys = {ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("core id")}
        if phys:
            info["physical_cores"] = len(phys)
    except OSError:
        pass
    try:
        mem_kb = int(
            next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")).split()[1]
        )
        info["memory_gb"] = round(mem_kb / 1024 / 1024, 1)
    except (OSError, StopIteration, ValueError):
        pass
    for pkg in ("torch", "openvino", "transformers", "numpy"):
        try:
            info[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            info[pkg] = "not installed"
    info["python"] = platform.python_version()
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "src"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        info["fxvino_commit"] = (head or "unknown") + (" + uncommitted changes in src/" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        info["fxvino_commit"] = "unknown"
    return info


_ISA = ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile")


# What each of ``_ISA`` needs of ``fxvino.devices.cpuid_features()``'s names.
_NEEDS = {"avx2": {"avx2"}, "avx_vnni": {"vnni"}, "avx512f": {"avx512f"}, "avx512_vnni": {"avx512f", "vnni"}}
_NEEDS |= {"avx512_bf16": {"avx512_bf16"}} | {f: {"amx_tile"} for f in ("amx_bf16", "amx_int8", "amx_tile")}


def _cpuid_isa(flags: list[str]) -> str:
    """Those of ``flags`` (``/proc/cpuinfo``'s) that the CPUID instruction gives this process,
    which is what the kernels are picked by: ``/proc/cpuinfo`` names the host's, also under an
    emulator, where an emulated Haswell's accuracy run was labelled a Zen 5's."""
    from fxvino.devices import cpuid_features

    seen = cpuid_features()
    return ", ".join(f for f in _ISA if f in flags and _NEEDS[f] <= seen)


def machine_class(machine: dict[str, Any]) -> str:
    """A file-name slug for the kind of CPU a run measured (vendor, core generation when known, and
    the ISA tier that decides f32/bf16/int8 speed): runs on different classes are kept side by side,
    never overwritten."""
    cpu = str(machine.get("cpu", "")).lower()
    vendor = "intel" if "intel" in cpu else "amd" if "amd" in cpu else "cpu"
    if machine.get("host_isa"):  # the CPU is an emulator's, not the host's model
        vendor = "emulated"
    elif machine.get("uarch"):
        vendor += f"-{machine['uarch']}"
    isa = set(str(machine.get("isa", "")).replace(" ", "").split(","))
    if isa & {"amx_tile", "amx_bf16", "amx_int8"}:
        tier = "amx"
    elif "avx512f" in isa:
        tier = "-".join(["avx512"] + [x for x in ("vnni", "bf16") if f"avx512_{x}" in isa])
    else:
        tier = "avx2-vnni" if "avx_vnni" in isa else "avx2"
    return f"{vendor}-{tier}"


# --------------------------------------------------------------------------- running workers


def other_load(seconds: float = 1.0) -> float | None:
    """CPU cores used by other processes over the next ``seconds`` (this process is idle)."""
    b0, o0 = _cpu_ticks()
    time.sleep(seconds)
    b1, o1 = _cpu_ticks()
    if not b1:
        return None
    return max(0.0, ((b1 - b0) - (o1 - o0)) / os.sysconf("SC_CLK_TCK") / seconds)


def wait_for_quiet(max_wait: float, threshold: float = 0.5) -> float:
    """Wait (up to ``max_wait`` s) until other processes use less than ``threshold`` cores."""
    if max_wait <= 0:
        return 0.0
    t0 = time.perf_counter()
    announced = False
    while True:
        load = other_load(1.0)
        waited = time.perf_counter() - t0
        if load is None or load < threshold or waited >= max_wait:
            return waited
        if not announced:
            print(
                f"(machine busy: {load:.1f} cores used by others; waiting up to {max_wait:.0f}s)", end=" ", flush=True
            )
            announced = True
        time.sleep(4.0)


def run_worker(
    model: str,
    backend: str,
    extra: list[str],
    *,
    target_s: float,
    timeout_s: float,
    log_path: Path | None,
    extra_common: list[str] = (),
) -> dict[str, Any]:
    """One fresh worker process; always returns a result dict (errors included)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"fxvino-bench-{model}-{backend}-"))
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["OMP_NUM_THREADS"] = "2"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / "inductor")  # cold Inductor compile every time
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.worker",
        "--model",
        model,
        "--backend",
        backend,
        "--target-seconds",
        str(target_s),
        *extra_common,
        *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker we started, and its compiler children
        out, err = proc.communicate()
        timed_out = True
    except BaseException:  # Ctrl-C / SIGTERM of the driver: do not leave the worker running
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    wall = time.perf_counter() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(
            f"$ {shlex.join(cmd)}\n# exit {proc.returncode}, {wall:.1f}s\n--- stdout\n{out}\n--- stderr\n{err}"
        )

    result = None
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
            break
    if result is None:
        if timed_out:
            error = f"timeout after {timeout_s:.0f}s"
        else:
            tail = [ln for ln in err.strip().splitlines() if ln.strip()]
            error = f"worker exited with code {proc.returncode}" + (f": {tail[-1][:200]}" if tail else "")
        result = {"model": model, "backend": backend, "ok": False, "error": error, "notes": []}
    result["wall_s"] = wall
    result["cmd"] = shlex.join(cmd)
    return result


def describe(res: dict[str, Any]) -> str:
    if not res.get("ok"):
        return f"FAILED: {res.get('error')}"
    ms = res["median_ms"]
    lat = f"{ms * 1000:.1f} us" if ms < 0.1 else f"{ms:.3g} ms"
    err = res.get("max_abs_err")
    err_s = "n/a" if err is None else f"{err:.2g}"
    bg = res.get("other_cpu_cores")
    bg_s = f", other load {bg:.1f} cores" if bg is not None and bg >= 0.2 else ""
    att = f", {res['attempts']} attempts" if res.get("attempts", 1) > 1 else ""
    return f"median {lat} ({res['calls']} calls{att}), first call {res['first_call_s']:.2f}s, max abs err {err_s}{bg_s}"


# --------------------------------------------------------------------------- aggregation


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("ok")]
    agg: dict[str, Any] = {"rounds": len(runs), "ok_rounds": len(ok), "notes": []}
    if not ok:
        agg["error"] = runs[-1].get("error") or "failed"
        for r in runs:
            for n in r.get("notes", []):
                if n not in agg["notes"]:
                    agg["notes"].append(n)
        return agg
    agg["median_ms"] = statistics.median(r["median_ms"] for r in ok)
    agg["min_ms"] = min(r["min_ms"] for r in ok)
    agg["first_call_s"] = statistics.median(r["first_call_s"] for r in ok)
    errs = [r["max_abs_err"] for r in ok if r.get("max_abs_err") is not None]
    agg["max_abs_err"] = max(errs) if errs else None
    agg["ref_max_abs"] = ok[0].get("ref_max_abs")
    agg["peak_rss_mb"] = max(r.get("peak_rss_mb", 0) for r in ok)
    bgs = [r["other_cpu_cores"] for r in ok if r.get("other_cpu_cores") is not None]
    agg["other_cpu_cores"] = max(bgs) if bgs else None
    agg["round_medians_ms"] = [r["median_ms"] for r in ok]
    agg["ov_fell_back"] = any(r.get("ov_fell_back") for r in ok)
    for key in ("bare_infer_ms", "bare_tiny_infer_ms"):
        values = [r[key] for r in ok if r.get(key) is not None]
        if values:
            agg[key] = statistics.median(values)
    bindings = {r["thread_binding"] for r in ok if r.get("thread_binding")}
    if bindings:
        agg["thread_binding"] = " / ".join(sorted(bindings))
    affinity = [r["affinity_us"] for r in ok if r.get("affinity_us")]
    if affinity:
        agg["affinity_us"] = {k: statistics.median(a[k] for a in affinity if k in a) for k in affinity[0]}
    for r in ok:
        for n in r.get("notes", []):
            if n not in agg["notes"]:
                agg["notes"].append(n)
    if len(ok) < len(runs):
        bad = next(r for r in runs if not r.get("ok"))
        agg["notes"].append(f"failed in {len(runs) - len(ok)} of {len(runs)} rounds: {bad.get('error')}")
    return agg


def precision_refs(backend: str) -> tuple[str, str]:
    suffix = "_bf16" if backend.endswith("_bf16") else ""
    return "native_ov" + suffix, "inductor_freeze" + suffix


def first_call_ratio(a: dict, b: dict) -> float | None:
    if not a.get("first_call_s") or not b.get("first_call_s"):
        return None
    return a["first_call_s"] / b["first_call_s"]


def ratio(table: dict, model: str, a: str, b: str) -> float | None:
    ra, rb = table.get((model, a)), table.get((model, b))
    if not ra or not rb or "median_ms" not in ra or "median_ms" not in rb:
        return None
    return ra["median_ms"] / rb["median_ms"]


# --------------------------------------------------------------------------- output


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    if ms < 0.1:
        return f"{ms:.4f}"
    if ms < 1:
        return f"{ms:.3f}"
    if ms < 10:
        return f"{ms:.2f}"
    if ms < 100:
        return f"{ms:.1f}"
    return f"{ms:.0f}"


def fmt_s(s: float | None) -> str:
    if s is None:
        return "—"
    return f"{s:.3f}" if s < 0.1 else f"{s:.2f}" if s < 10 else f"{s:.1f}"


def fmt_err(e: float | None) -> str:
    return "—" if e is None else "0" if e == 0 else f"{e:.1e}"


def fmt_ratio(r: float | None) -> str:
    return "—" if r is None else f"{r:.2f}×"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def write_json(path: Path, meta: dict, runs: dict, table: dict) -> None:
    """Every round's raw result plus the aggregate table, for --from-json and later analysis."""
    data = {
        "meta": meta,
        "runs": [r for rs in runs.values() for r in rs],
        "aggregate": [{"model": k[0], "backend": k[1], **v} for k, v in table.items()],
    }
    path.write_text(json.dumps(data, indent=1, default=str))


def write_markdown(path: Path, table: dict, models: list[str], backends: list[str], meta: dict) -> None:
    m = meta["machine"]
    lines = [
        "# fxvino benchmark results",
        "",
        f"- date: {meta['date']}",
        f"- machine: {m.get('cpu')}, {m.get('logical_cores')} logical cores"
        + (f" ({m['physical_cores']} physical)" if "physical_cores" in m else "")
        + (f", {m['memory_gb']} GB" if "memory_gb" in m else "")
        + (f"; ISA: {m['isa']}" if m.get("isa") else "")
        + (f" (emulated; the host's: {m['host_isa']})" if m.get("host_isa") else ""),
        f"- software: torch {m.get('torch')}, openvino {m.get('openvino')}, transformers {m.get('transformers')}, "
        f"numpy {m.get('numpy')}, Python {m.get('python')}; fxvino at {m.get('fxvino_commit')}",
        f"- settings: batch as built by `fxvino.tools.zoo`, 2 threads (`torch.set_num_threads(2)`, OMP_NUM_THREADS=2), "
        f"{meta['rounds']} interleaved round(s), timed loop ~{meta['target_s']:g} s per measurement "
        f"(at least 10 calls); every measurement in a fresh process with an empty Inductor cache; "
        f"waited up to {meta.get('quiet_wait', 0):g} s for a quiet machine before each worker, "
        f"timed loop retried up to {meta.get('max_attempts', 1)} time(s) while other processes used > 0.25 cores",
        f"- command: `{meta['command']}`",
        f"- total wall time: {meta['wall_min']:.1f} min",
    ]
    for mg in meta.get("merged", []):
        at = f" (fxvino at {mg['fxvino_commit']})" if mg.get("fxvino_commit") else ""
        lines.append(
            f"- re-measured on {mg['date']}{at} with `{mg['command']}` and merged in: {', '.join(mg['pairs'])}"
        )
    lines += [
        "",
        "Latency is the median over rounds of each round's median per-call latency (lower is better). "
        "Ratios are this row's latency divided by the same-precision reference "
        "(`native_ov`/`inductor_freeze` for f32 rows, `native_ov_bf16`/`inductor_freeze_bf16` for bf16 rows): "
        "below 1.00× is faster than the reference. First call = Dynamo + compile + first inference in a fresh "
        "process (for native_ov: convert_model + compile_model + first inference). Max abs err is against "
        "eager float32 on the same input (`last_hidden_state` for transformers models). "
        "Other load = CPU cores used by other processes while the timed loop ran (worst round; "
        "the machine has 2 cores, so anything above ~0.2 inflates the median — compare min ms too). "
        "See benchmarks/README.md.",
    ]
    loads = [a.get("other_cpu_cores") for a in table.values() if a.get("other_cpu_cores") is not None]
    busy = sum(x >= 0.5 for x in loads)
    if busy:
        lines += [
            "",
            f"**Warning: {busy} of {len(loads)} measurements ran while other processes used 0.5 cores or more "
            '(column "other load"). On this 2-core machine that inflates latencies several-fold, and more for '
            "PyTorch's OpenMP backends (eager, aot_eager, Inductor) than for OpenVINO's, so those latencies and "
            "ratios are not reliable; accuracy, failures, fallbacks and paths are. Re-run on a quiet machine.**",
        ]
    lines += [
        "",
        "## Latency, cold start, accuracy",
        "",
        "| model | backend | median ms | min ms | first-call s | max abs err | × native_ov | × inductor_freeze "
        "| peak MB | other load | notes |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for model in models:
        for backend in backends:
            agg = table.get((model, backend))
            if agg is None:
                continue
            nat, ind = precision_refs(backend)
            notes = list(agg.get("notes", []))
            bg = agg.get("other_cpu_cores")
            if "error" in agg:
                lines.append(
                    f"| {model} | {backend} | **failed** | | | | | | | | {cell(agg['error'])}"
                    + (f"; {cell('; '.join(notes))}" if notes else "")
                    + " |"
                )
                continue
            name = f"{backend} †" if agg.get("ov_fell_back") else backend
            lines.append(
                f"| {model} | {name} | {fmt_ms(agg['median_ms'])} | {fmt_ms(agg['min_ms'])} | "
                f"{fmt_s(agg['first_call_s'])} | {fmt_err(agg['max_abs_err'])} | "
                f"{fmt_ratio(ratio(table, model, backend, nat))} | {fmt_ratio(ratio(table, model, backend, ind))} | "
                f"{agg.get('peak_rss_mb', 0):.0f} | {'—' if bg is None else f'{bg:.1f}'} | {cell('; '.join(notes))} |"
            )

    if any(agg.get("ov_fell_back") for agg in table.values()):
        lines += [
            "",
            "† The OpenVINO wheel's backend fell back silently on both of its paths (to PyTorch or Inductor): "
            "this latency is not OpenVINO's (see notes).",
        ]

    lines += ["", "## fxvino against the references (latency ratio, below 1.00× = fxvino faster)", ""]
    lines += ratio_table(table, models)

    if "probe" in models:
        lines += [
            "",
            "## Per-call overhead (probe: `torch.relu(x) + 1` on 16 floats)",
            "",
            "| backend | median µs per call | min µs | first-call s |",
            "|---|--:|--:|--:|",
        ]
        for backend in backends:
            agg = table.get(("probe", backend))
            if agg is None:
                continue
            if "error" in agg:
                lines.append(f"| {backend} | **failed** | | {cell(agg['error'])} |")
            else:
                lines.append(
                    f"| {backend} | {agg['median_ms'] * 1000:.1f} | {agg['min_ms'] * 1000:.1f} | "
                    f"{fmt_s(agg['first_call_s'])} |"
                )
        fx, eager = table.get(("probe", "fxvino")), table.get(("probe", "eager"))
        if fx and eager and "median_ms" in fx and "median_ms" in eager:
            lines += [
                "",
                f"fxvino per-call overhead above eager: {(fx['median_ms'] - eager['median_ms']) * 1000:.1f} µs "
                f"(median), {(fx['min_ms'] - eager['min_ms']) * 1000:.1f} µs (min).",
            ]
            dynamo = table.get(("probe", "dynamo_eager"))
            if dynamo and "median_ms" in dynamo:
                lines.append(
                    f'Dynamo alone (`backend="eager"`, the floor of every torch.compile backend) costs '
                    f"{(dynamo['median_ms'] - eager['median_ms']) * 1000:.1f} µs above eager; fxvino's own part "
                    "(AOTAutograd graph, OpenVINO infer, copies) "
                    f"{(fx['median_ms'] - dynamo['median_ms']) * 1000:.1f} µs."
                )
        native = table.get(("probe", "native_ov")) or {}
        if "bare_infer_ms" in native:  # what of that part is OpenVINO's, whoever calls it
            lines += [
                "",
                "OpenVINO's own inference of the probe (its binding's `infer`, no Python wrapper, "
                f"native_ov's compiled model): {native['bare_infer_ms'] * 1000:.1f} µs.",
            ]
        if "bare_tiny_infer_ms" in native:
            lines.append(
                "The same with the properties fxvino gives a graph this small (one thread, no pinning): "
                f"{native['bare_tiny_infer_ms'] * 1000:.1f} µs."
            )
        affinity = native.get("affinity_us") or {}
        if "syscalls" in affinity:
            line = (
                "The affinity calls the plugin makes around every inference (one get, two sets): "
                f"{affinity['syscalls']:.1f} µs"
            )
            if "migration" in affinity:  # absent with one CPU
                line += (
                    "; moving the calling thread to another CPU, as a pinned inference does when the "
                    f"thread is elsewhere: {affinity['migration']:.1f} µs"
                )
            lines.append(line + ".")
        if fx and fx.get("thread_binding"):  # utils/thread_binding.py
            binding = fx["thread_binding"]
            lines.append(f"In fxvino's process, oneTBB's thread binding around each inference was {binding}.")

    lines += ["", f"Raw per-round results: `{meta['json_name']}`; worker logs: `benchmarks/logs/`.", ""]
    path.write_text("\n".join(lines))


def ratio_table(table: dict, models: list[str]) -> list[str]:
    """The headline ratios, one row per model (the run's own page and the index both show it)."""
    lines = [
        "| model | fxvino / native_ov | fxvino / inductor_freeze | fxvino_bf16 / native_ov_bf16 "
        "| fxvino_bf16 / inductor_freeze_bf16 | fxvino_autocast_bf16 / fxvino_bf16 | fxvino / eager "
        "| fxvino first call s | aot_eager first call s (tracing floor) | first call / aot_eager |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for model in models:
        fx, ae = table.get((model, "fxvino")) or {}, table.get((model, "aot_eager")) or {}
        lines.append(
            f"| {model} | {fmt_ratio(ratio(table, model, 'fxvino', 'native_ov'))} | "
            f"{fmt_ratio(ratio(table, model, 'fxvino', 'inductor_freeze'))} | "
            f"{fmt_ratio(ratio(table, model, 'fxvino_bf16', 'native_ov_bf16'))} | "
            f"{fmt_ratio(ratio(table, model, 'fxvino_bf16', 'inductor_freeze_bf16'))} | "
            f"{fmt_ratio(ratio(table, model, 'fxvino_autocast_bf16', 'fxvino_bf16'))} | "
            f"{fmt_ratio(ratio(table, model, 'fxvino', 'eager'))} | "
            f"{fmt_s(fx.get('first_call_s'))} | {fmt_s(ae.get('first_call_s'))} | "
            f"{fmt_ratio(first_call_ratio(fx, ae))} |"
        )
    return lines


def write_index(folder: Path) -> Path:
    """``results.md``: one section per machine class measured (every ``results-<class>.json`` in
    ``folder``), each with the run's headline ratios and a link to its full page."""
    lines = [
        "# fxvino benchmark results, one section per machine class",
        "",
        "Each class (CPU vendor, core generation, and the ISA tier that decides f32/bf16/int8 speed: AMX,",
        "AVX-512 with or without VNNI/BF16, AVX2) keeps its own last full run, `results-<class>.md`,",
        "written by `python -m benchmarks.bench` on such a machine; this page is rebuilt after every full",
        "run. Classes without a generation were measured before it was recorded (see benchmarks/README.md).",
        "bf16 rows mean something only where the CPU has bf16 kernels (AMX or AVX512-BF16).",
    ]
    for raw in sorted(folder.glob("results-*.json")):
        if raw.stem == "results-quick":
            continue
        data = json.loads(raw.read_text())
        meta, m = data["meta"], data["meta"]["machine"]
        table = {(a["model"], a["backend"]): a for a in data["aggregate"]}
        models = [x for x in MODELS if any(k[0] == x for k in table)]
        page = raw.with_suffix(".md").name
        lines += [
            "",
            f"## {machine_class(m)}: {m.get('cpu')}",
            "",
            f"ISA: {m.get('isa') or 'unknown'}; {m.get('logical_cores')} logical cores; {meta['date'][:10]}, "
            f"{meta['rounds']} round(s), fxvino at {m.get('fxvino_commit')}. Full table: [{page}]({page}).",
            "",
        ]
        lines += ratio_table(table, models)
        fx, dyn = table.get(("probe", "fxvino")), table.get(("probe", "dynamo_eager"))
        if fx and dyn and "median_ms" in fx and "median_ms" in dyn:
            lines += [
                "",
                f"Per-call overhead above Dynamo alone (probe): {(fx['median_ms'] - dyn['median_ms']) * 1000:.1f} µs.",
            ]
    index = folder / "results.md"
    index.write_text("\n".join(lines) + "\n")
    return index


def write_chart(path: Path, table: dict, models: list[str], backends: list[str], meta: dict) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no chart written"

    big = [m for m in models if m != "probe"]
    panels = ([("latency per call (ms, log scale)", big, 1.0)] if big else []) + (
        [("probe: per-call overhead (µs, log scale)", ["probe"], 1000.0)] if "probe" in models else []
    )
    widths = [max(len(p[1]), 1) * 2 + 1 for p in panels]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(sum(widths) * 1.1 + 2, 5.5), gridspec_kw={"width_ratios": widths}, squeeze=False
    )
    colors = plt.get_cmap("tab10" if len(backends) <= 10 else "tab20")
    n = len(backends)
    width = 0.8 / n
    for ax, (title, ms, scale) in zip(axes[0], panels, strict=True):
        for j, backend in enumerate(backends):
            xs, ys, fell = [], [], []
            for i, model in enumerate(ms):
                agg = table.get((model, backend))
                x = i - 0.4 + width * (j + 0.5)
                if agg and "median_ms" in agg:
                    xs.append(x)
                    ys.append(agg["median_ms"] * scale)
                    fell.append(bool(agg.get("ov_fell_back")))
                elif agg:
                    ax.annotate(
                        "✗",
                        (x, 0),
                        xycoords=("data", "axes fraction"),
                        ha="center",
                        va="bottom",
                        color=colors(j),
                        fontsize=9,
                    )
            bars = ax.bar(xs, ys, width, label=backend, color=colors(j))
            for bar, y, fb in zip(bars, ys, fell, strict=True):
                if fb:  # not really on OpenVINO
                    bar.set_hatch("////")
                    bar.set_edgecolor("white")
                ax.annotate(
                    f"{y:.3g}" if y < 1000 else f"{y:.0f}",
                    (bar.get_x() + bar.get_width() / 2, y),
                    ha="center",
                    va="bottom",
                    rotation=90,
                    fontsize=6,
                    xytext=(0, 1),
                    textcoords="offset points",
                )
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks(range(len(ms)))
        ax.set_xticklabels(ms)
        ax.set_title(title)
        ax.margins(y=0.15)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    m = meta["machine"]
    fig.suptitle(
        f"fxvino benchmark {meta['date'][:10]}: {m.get('cpu')}, 2 threads, torch {m.get('torch')}, "
        f"openvino {m.get('openvino')} (✗ = failed, hatched = fell back, not on OpenVINO)",
        fontsize=10,
    )
    loads = [a.get("other_cpu_cores") for a in table.values() if a.get("other_cpu_cores") is not None]
    busy = sum(x >= 0.5 for x in loads)
    if busy:
        fig.text(
            0.5,
            0.005,
            f"warning: {busy} of {len(loads)} measurements ran while other processes used "
            "≥ 0.5 of the 2 cores: latencies are inflated and not comparable",
            ha="center",
            fontsize=9,
            color="firebrick",
        )
    fig.tight_layout(rect=(0, 0.03 if busy else 0, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


# --------------------------------------------------------------------------- main


def rerender(raws: list[Path], out: Path | None) -> int:
    """Re-render from raw JSON; with several files, a later file's (model, backend) pairs replace
    the earlier ones (re-measure a subset, then merge it into the full run)."""
    datas = [json.loads(raw.read_text()) for raw in raws]
    meta = dict(datas[0]["meta"])
    out = out or raws[0].with_suffix(".md")
    out = out if out.is_absolute() else Path.cwd() / out
    runs: dict[tuple[str, str], list[dict]] = {}
    merged = list(meta.get("merged", []))
    for i, data in enumerate(datas):
        these: dict[tuple[str, str], list[dict]] = {}
        for r in data["runs"]:
            these.setdefault((r["model"], r["backend"]), []).append(r)
        runs.update(these)
        if i:
            merged.append(
                {
                    "date": data["meta"]["date"],
                    "command": data["meta"]["command"],
                    "fxvino_commit": data["meta"].get("machine", {}).get("fxvino_commit"),
                    "pairs": sorted(f"{m}/{b}" for m, b in these),
                }
            )
    meta["merged"] = merged
    meta["json_name"] = out.with_suffix(".json").name
    models = [m for m in MODELS if any(k[0] == m for k in runs)]
    backends = [b for b in BACKENDS if any(k[1] == b for k in runs)]
    table = {key: aggregate(rs) for key, rs in runs.items()}
    if len(datas) > 1:
        write_json(out.with_suffix(".json"), meta, runs, table)
    write_markdown(out, table, models, backends, meta)
    warn = write_chart(out.with_suffix(".png"), table, models, backends, meta)
    print(f"wrote {out}" + (f" (warning: {warn})" if warn else f" and {out.with_suffix('.png')}"))
    return 0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def parse_list(text: str, valid: tuple[str, ...], what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in valid]
    if bad or not items:
        raise SystemExit(f"unknown {what} {', '.join(bad) or '(none given)'}; valid: {', '.join(valid)}")
    return items


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench", description=__doc__.splitlines()[0])
    p.add_argument("--models", help=f"comma-separated, default all: {','.join(MODELS)}")
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated, default all: %(default)s")
    p.add_argument("--repeats", type=int, help="interleaved rounds (fresh process each); default 2, 1 with --quick")
    p.add_argument("--quick", action="store_true", help="smoke check: mlp and probe, 1 round, short timed loops")
    p.add_argument(
        "--out",
        type=Path,
        help="markdown output (default benchmarks/results-<machine class>.md, e.g. "
        "results-amd-zen4-avx512-vnni-bf16.md; "
        "benchmarks/results-quick.md with --quick); the chart and the raw JSON go next to it",
    )
    p.add_argument("--target-seconds", type=float, help="timed loop length per measurement (default 2, 0.5 quick)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before a worker is killed (default 1800)")
    p.add_argument(
        "--quiet-wait",
        type=float,
        help="before each worker, wait up to this many seconds for other processes to use < 0.5 "
        "cores (default 20; 0 with --quick; 0 disables)",
    )
    p.add_argument(
        "--max-attempts",
        type=int,
        help="per worker, re-run a timed loop disturbed by other processes up to this many times "
        "(default 3; 1 with --quick)",
    )
    p.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        metavar="RESULTS_JSON",
        help="do not measure: re-render the markdown and chart from a previous run's raw JSON; with several "
        "files, later files' (model, backend) pairs replace earlier ones (written to --out, default next to the "
        "first file)",
    )
    p.add_argument(
        "--index", action="store_true", help="do not measure: rebuild benchmarks/results.md from the runs there"
    )
    a = p.parse_args(argv)
    # SIGTERM ends the run like Ctrl-C does, so the running worker is killed rather than orphaned.
    signal.signal(signal.SIGTERM, _interrupt)
    if a.from_json:
        return rerender(a.from_json, a.out)

    models = parse_list(a.models, MODELS, "model") if a.models else list(QUICK_MODELS if a.quick else MODELS)
    backends = parse_list(a.backends, BACKENDS, "backend")
    rounds = a.repeats if a.repeats is not None else (1 if a.quick else 2)
    if rounds < 1:
        raise SystemExit("--repeats must be at least 1")
    quiet_wait = a.quiet_wait if a.quiet_wait is not None else (0.0 if a.quick else 20.0)
    max_attempts = a.max_attempts if a.max_attempts is not None else (1 if a.quick else 3)
    target_s = a.target_seconds if a.target_seconds is not None else (0.5 if a.quick else 2.0)
    if a.index:
        print(f"wrote {write_index(HERE)}")
        return 0
    out = a.out or (HERE / ("results-quick.md" if a.quick else f"results-{machine_class(machine_info())}.md"))
    out = out if out.is_absolute() else Path.cwd() / out
    out.parent.mkdir(parents=True, exist_ok=True)
    png, raw = out.with_suffix(".png"), out.with_suffix(".json")
    logs = HERE / "logs"

    meta = {
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine_info(),
        "rounds": rounds,
        "target_s": target_s,
        "quiet_wait": quiet_wait,
        "max_attempts": max_attempts,
        "command": "python -m benchmarks.bench " + shlex.join(sys.argv[1:] if argv is None else argv),
        "json_name": raw.name,
    }
    mi = meta["machine"]
    print(
        f"fxvino benchmark: {len(models)} model(s) x {len(backends)} backend(s) x {rounds} round(s) "
        f"on {mi.get('cpu')} ({mi.get('logical_cores')} cores), torch {mi.get('torch')}, "
        f"openvino {mi.get('openvino')}",
        flush=True,
    )

    plan = []
    for r in range(rounds):
        order = backends if r % 2 == 0 else backends[::-1]
        plan += [(r, model, backend) for model in models for backend in order]

    runs: dict[tuple[str, str], list[dict]] = {}
    ov_path: dict[tuple[str, str], tuple[str, str | None]] = {}  # -> (path, why default was not used)
    t_start = time.perf_counter()
    for i, (r, model, backend) in enumerate(plan, 1):
        elapsed = time.perf_counter() - t_start
        eta = f", ~{elapsed / (i - 1) * (len(plan) - i + 1) / 60:.0f} min left" if i > 1 else ""
        print(
            f"[{i}/{len(plan)}] round {r + 1}/{rounds}  {model:<8} {backend:<21} ({elapsed / 60:.1f} min{eta}) ...",
            end=" ",
            flush=True,
        )
        kw = {"target_s": target_s, "timeout_s": a.timeout, "extra_common": ["--max-attempts", str(max_attempts)]}
        waited = wait_for_quiet(quiet_wait)
        log = logs / f"r{r + 1}-{model}-{backend}.log"
        if backend in OV_WHEEL_BACKENDS:
            key = (model, backend)
            if key not in ov_path:
                res = run_worker(model, backend, ["--ov-path", "default", "--abort-on-fallback"], log_path=log, **kw)
                if res.get("ok") and not res.get("ov_fell_back"):
                    ov_path[key] = ("default", None)
                else:
                    why = res.get("error") or "failed"
                    print(f"default path failed ({why[:100]}); retrying with aot_autograd ...", end=" ", flush=True)
                    ov_path[key] = ("aot_autograd", why)
                    res = run_worker(
                        model,
                        backend,
                        ["--ov-path", "aot_autograd"],
                        log_path=log.with_name(log.stem + "-aot.log"),
                        **kw,
                    )
            else:
                path = ov_path[key][0]
                res = run_worker(model, backend, ["--ov-path", path], log_path=log, **kw)
            path, why = ov_path[key]
            if why is None:
                note = "path: default"
            elif res.get("ov_fell_back") and res.get("ov_fallback_msg") == why:
                note = "path: aot_autograd (the default path fell back the same way)"
            else:
                note = f"path: aot_autograd (default path: {why[:90]})"
            res.setdefault("notes", []).insert(0, note)
        else:
            res = run_worker(model, backend, [], log_path=log, **kw)
        res["round"] = r + 1
        res["waited_for_quiet_s"] = round(waited, 1)
        runs.setdefault((model, backend), []).append(res)
        print(describe(res) + f" [{res['wall_s']:.0f}s]", flush=True)

    meta["wall_min"] = (time.perf_counter() - t_start) / 60
    table = {key: aggregate(rs) for key, rs in runs.items()}
    write_json(raw, meta, runs, table)
    write_markdown(out, table, models, backends, meta)
    warn = write_chart(png, table, models, backends, meta)
    print(f"\ndone in {meta['wall_min']:.1f} min: wrote {out}" + ("" if warn else f", {png}") + f", {raw}")
    if warn:
        print("warning: " + warn)
    if out.parent == HERE and not a.quick:
        print(f"rebuilt {write_index(HERE)}")
    print()
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
