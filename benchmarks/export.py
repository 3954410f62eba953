"""Export to OpenVINO IR: which models each exporter handles, and what the saved IR costs to run.

    .venv/bin/python -m benchmarks.export --coverage            # the model suite, ~15 min on 2 cores
    .venv/bin/python -m benchmarks.export --coverage --models bert,gpt2,resnet
    .venv/bin/python -m benchmarks.export --speed               # bert, gpt2, resnet50, mlp (real sizes)

**Coverage** runs every architecture of ``benchmarks.models`` (configs with random weights) through
three exporters, each model in its own process, and judges each result against eager on the same
inputs (float32, max |out - eager| / max |eager| <= 1e-4, on the tensor the model suite judges):

- ``fxvino``: ``fxvino.export(model, (), inputs)``, run by the exported model itself;
- ``ov(module)``: ``ov.convert_model(model, example_input=inputs)``, OpenVINO's own PyTorch frontend
  (TorchScript tracing);
- ``ov(program)``: ``ov.convert_model(torch.export.export(model, (), inputs))``, the same frontend
  on the program fxvino starts from.

OpenVINO's outputs are matched leniently: any output with the judged tensor's shape counts, the
closest one wins (their output names do not say which field is which).

**Speed** (fresh processes, interleaved rounds): the per-call time of the IR loaded by
``fxvino.load`` against ``torch.compile(backend="fxvino")`` on the same model, timed alternately in
one process; and the time to the first result of a new process: ``fxvino.load`` + first call
against ``torch.compile`` + first call on a warm model cache (import and model building not timed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULT = "EXPORT_RESULT "
TOLERANCE = 1e-4
EXPORTERS = ("fxvino", "ov(module)", "ov(program)")


# --------------------------------------------------------------------------- coverage


def _first_line(e: BaseException) -> str:
    from benchmarks.worker import first_line

    return first_line(e)[:160]


def _rel_err(actual: Any, expected: Any) -> float:
    import torch

    actual = torch.as_tensor(actual).to(expected.dtype)
    scale = expected.abs().max().item() or 1.0
    return (actual - expected).abs().max().item() / scale


def _closest(outputs: list[Any], expected: Any) -> float:
    """The smallest error over OpenVINO's outputs with the judged tensor's shape."""
    errs = [_rel_err(o, expected) for o in outputs if tuple(o.shape) == tuple(expected.shape)]
    if not errs:
        raise ValueError(f"no output of shape {tuple(expected.shape)}")
    return min(errs)


def coverage_one(name: str) -> dict[str, Any]:
    """One model through the three exporters, in this process."""
    import openvino as ov
    import torch
    import torch.utils._pytree as pytree

    import fxvino
    from benchmarks.models import BY_NAME, _main_output

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    spec = BY_NAME[name]
    row: dict[str, Any] = {"model": name, "family": spec.family}
    torch.manual_seed(0)
    try:
        model, inputs = spec.build()
    except ImportError as e:
        return row | {"skipped": f"{e.name or e} is not installed"}
    model.eval()
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    with torch.no_grad(), torch._dynamo.config.patch(dict(spec.dynamo_config)):
        expected = _main_output(model(**inputs), spec.output).float()
        arrays = {k: v.numpy() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        try:
            t0 = time.perf_counter()
            exported = fxvino.export(model, (), inputs)
            row["fxvino_s"] = round(time.perf_counter() - t0, 2)
            row["fxvino"] = _rel_err(_main_output(exported(**inputs), spec.output), expected)
        except Exception as e:  # noqa: BLE001 - the row records why
            row["fxvino"] = _first_line(e)
        try:
            ov_model = ov.convert_model(model, example_input=inputs)
            result = ov.Core().compile_model(ov_model, "CPU", config)(arrays)
            row["ov(module)"] = _closest(list(result.values()), expected)
        except Exception as e:  # noqa: BLE001
            row["ov(module)"] = _first_line(e)
        try:
            program = torch.export.export(model, (), inputs, strict=False)
            row["torch.export"] = True
            kwargs_spec = program.call_spec.in_spec.children_specs[1]
            ordered = {k: inputs[k] for k in kwargs_spec.context}
            flat = [a.numpy() for a in pytree.tree_leaves(((), ordered)) if isinstance(a, torch.Tensor)]
            ov_model = ov.convert_model(program)
            result = ov.Core().compile_model(ov_model, "CPU", config)(flat)
            row["ov(program)"] = _closest(list(result.values()), expected)
        except Exception as e:  # noqa: BLE001
            row.setdefault("torch.export", False)
            row["ov(program)"] = _first_line(e)
    return row


def _ok(value: Any) -> bool:
    return isinstance(value, float) and value <= TOLERANCE


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "yes" if value <= TOLERANCE else f"differs ({value:.1e})"
    return "fails" if value is not None else "-"


def run_child(module: str, args: list[str], timeout: float, prefix: str) -> dict[str, Any]:
    """``python -m module *args`` in a fresh process: its last ``prefix`` line as JSON, or
    ``{"error": ...}`` when it crashed, failed or timed out (one model's crash costs one row)."""
    cmd = [sys.executable, "-m", module, *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(prefix)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1][:200]
        return {"error": f"exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1][len(prefix) :])


def _child(args: list[str], timeout: float) -> dict[str, Any]:
    return run_child("benchmarks.export", args, timeout, RESULT)


def coverage(names: list[str], out: Path | None) -> int:
    rows = []
    for name in names:
        row = {"model": name} | _child(["--child-coverage", name], timeout=600)
        rows.append(row)
        cells = "  ".join(f"{k} {_cell(row.get(k))}" for k in EXPORTERS)
        print(f"{name:28s} {cells}" + (f"  [{row['error']}]" if "error" in row else ""), flush=True)
    judged = [r for r in rows if "skipped" not in r]
    captured = [r for r in judged if r.get("torch.export")]
    lines = [
        "# Export coverage: the model suite through three exporters",
        "",
        f"Machine: {_machine()}. Each model in its own process; judged against eager (float32, "
        f"relative error <= {TOLERANCE:g} on the model suite's tensor).",
        "",
        "| exporter | models equal to eager | of those torch.export captures |",
        "|---|---|---|",
    ]
    for k in EXPORTERS:
        n, m = sum(_ok(r.get(k)) for r in judged), sum(_ok(r.get(k)) for r in captured)
        lines.append(f"| {k} | {n}/{len(judged)} | {m}/{len(captured)} |")
    lines += ["", "| model | family | " + " | ".join(EXPORTERS) + " | why (first failure) |", "|---" * 6 + "|"]
    for r in rows:
        if "skipped" in r:
            continue
        why = r.get("error") or next((r[k] for k in EXPORTERS if isinstance(r.get(k), str)), "")
        cells = " | ".join(_cell(r.get(k)) for k in EXPORTERS)
        lines.append(f"| {r['model']} | {r.get('family', '')} | {cells} | {str(why).replace('|', '/')[:160]} |")
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if out is not None:
        out.write_text(text)
    return 0


# --------------------------------------------------------------------------- speed


def speed_steady(name: str, calls: int) -> dict[str, Any]:
    """Per-call seconds of the loaded IR and of torch.compile, alternating, in this process."""
    import torch

    import fxvino
    from fxvino.tools import zoo

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    model, args = zoo.build(name)
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        fxvino.export(model, args).save(tmp)
        loaded = fxvino.load(tmp)
        compiled = torch.compile(model, backend="fxvino")
        expected = model(*args)
        a, b = loaded(*args), compiled(*args)
        err = (zoo_first(a) - zoo_first(expected)).abs().max().item()
        for _ in range(2):
            loaded(*args)
            compiled(*args)
        lt, ct = [], []
        gc.disable()
        try:
            for _ in range(calls):
                t = time.perf_counter()
                loaded(*args)
                lt.append(time.perf_counter() - t)
                t = time.perf_counter()
                compiled(*args)
                ct.append(time.perf_counter() - t)
        finally:
            gc.enable()
        del b
    return {"loaded": lt, "compiled": ct, "max_abs_err": err}


def zoo_first(out: Any) -> Any:
    """The first tensor of a model output (a tuple or a transformers output)."""
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    return out[0] if isinstance(out, (tuple, list)) else out


def speed_start(name: str, kind: str, directory: str) -> dict[str, Any]:
    """Seconds from nothing compiled to the first result in this (fresh) process."""
    import torch

    import fxvino
    from fxvino.tools import zoo

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    model, args = zoo.build(name)
    with torch.no_grad():
        if kind == "prepare":  # not timed: the IR and a warm cache for the others
            fxvino.export(model, args).save(Path(directory) / "ir")
            options = {"model_caching": True, "cache_dir": str(Path(directory) / "cache"), "cache_size": None}
            torch.compile(model, backend="fxvino", options=options)(*args)
            return {}
        t0 = time.perf_counter()
        if kind == "load":
            fxvino.load(Path(directory) / "ir")(*args)
        else:
            options = {"model_caching": True, "cache_dir": str(Path(directory) / "cache"), "cache_size": None}
            torch.compile(model, backend="fxvino", options=options)(*args)
        return {"first": time.perf_counter() - t0}


def speed(names: list[str], rounds: int, calls: int, out: Path | None) -> int:
    lines = [
        "# Export speed: the saved IR against torch.compile(backend='fxvino')",
        "",
        f"Machine: {_machine()}. Steady: medians (mins) of {calls} alternating calls per round, "
        f"{rounds} rounds in fresh processes. First result: a fresh process, model built, then "
        "`fxvino.load` + first call against `torch.compile` + first call on a warm model cache.",
        "",
        "| model | loaded IR ms | torch.compile ms | loaded/compiled | first result: load s | warm cache s "
        "| load/warm | max abs err |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        lt, ct, starts, errs = [], [], {"load": [], "warm": []}, []
        for rnd in range(rounds):
            r = _child(["--child-steady", name, str(calls)], timeout=1200)
            if "error" in r:
                raise RuntimeError(f"{name}: {r['error']}")
            lt += r["loaded"]
            ct += r["compiled"]
            errs.append(r["max_abs_err"])
            with tempfile.TemporaryDirectory(prefix="fxvino-export-") as tmp:
                prep = _child(["--child-start", name, "prepare", tmp], timeout=1200)
                if "error" in prep:
                    raise RuntimeError(f"{name}: {prep['error']}")
                for kind in ("load", "warm"):
                    s = _child(["--child-start", name, kind, tmp], timeout=1200)
                    if "error" in s:
                        raise RuntimeError(f"{name} {kind}: {s['error']}")
                    starts[kind].append(s["first"])
            print(
                f"{name} round {rnd + 1}: loaded {1e3 * statistics.median(r['loaded']):.3f} ms, compiled "
                f"{1e3 * statistics.median(r['compiled']):.3f} ms; first result load {starts['load'][-1]:.2f} s, "
                f"warm {starts['warm'][-1]:.2f} s",
                flush=True,
            )
        ml, mc = statistics.median(lt), statistics.median(ct)
        sl, sw = statistics.median(starts["load"]), statistics.median(starts["warm"])
        lines.append(
            f"| {name} | {1e3 * ml:.3f} ({1e3 * min(lt):.3f}) | {1e3 * mc:.3f} ({1e3 * min(ct):.3f}) | {ml / mc:.2f} "
            f"| {sl:.2f} | {sw:.2f} | {sl / sw:.2f} | {max(errs):.1e} |"
        )
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if out is not None:
        out.write_text(text)
    return 0


def _machine() -> str:
    from benchmarks.models import _isa

    return f"{os.cpu_count()} cores, {_isa()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coverage", action="store_true", help="the model suite through three exporters")
    parser.add_argument("--speed", action="store_true", help="the saved IR against torch.compile")
    parser.add_argument("--models", help="comma-separated names (benchmarks.models for --coverage, zoo for --speed)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    parser.add_argument("--child-coverage", help=argparse.SUPPRESS)
    parser.add_argument("--child-steady", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--child-start", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_coverage:
        print(RESULT + json.dumps(coverage_one(args.child_coverage)), flush=True)
        return 0
    if args.child_steady:
        print(RESULT + json.dumps(speed_steady(args.child_steady[0], int(args.child_steady[1]))), flush=True)
        return 0
    if args.child_start:
        print(RESULT + json.dumps(speed_start(*args.child_start)), flush=True)
        return 0
    if args.coverage:
        from benchmarks.models import SPECS

        names = args.models.split(",") if args.models else [s.name for s in SPECS]
        return coverage(names, args.out)
    if args.speed:
        names = args.models.split(",") if args.models else ["mlp", "resnet50", "bert", "gpt2"]
        return speed(names, args.rounds, args.calls, args.out)
    parser.error("give --coverage or --speed")
    return 2


if __name__ == "__main__":
    sys.exit(main())
