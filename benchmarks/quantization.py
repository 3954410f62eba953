"""int8 side by side: latency and accuracy of quantized ResNet-50 and BERT-base under fxvino,
Inductor, the OpenVINO wheel's backend and native OpenVINO (NNCF on ``ov.convert_model``).

    python -m benchmarks.quantization                        # resnet50 b1/b8 and bert seq 128
    python -m benchmarks.quantization --models resnet50 --batches 1 --rounds 1 --calls 5
    make bench-quantization

Contenders (each measurement in a fresh process; rounds interleaved, order reversed every other
round; the table shows medians, and minima, over rounds of each process's median call):

- ``fxvino_f32``: the float model under fxvino (the baseline int8 must beat).
- ``fxvino_int8``: PT2E with the stock ``X86InductorQuantizer`` (``fold_quantize=True``), then fxvino.
- ``fxvino_int8_7bit``: the same with 7-bit activations (``reduce_range=True``, which cannot saturate
  on CPUs without VNNI), then fxvino.
- ``fxvino_nncf``: ``nncf.quantize`` of the exported model, then fxvino.
- ``inductor_int8``: the same PT2E graph under Inductor with freezing (PyTorch's own int8 path).
- ``openvino_int8``: the same PT2E graph under the OpenVINO wheel's ``backend="openvino"``.
- ``native_int8``: ``nncf.quantize`` of ``ov.convert_model(model)``, compiled by OpenVINO directly.

Every contender calibrates on the same 8 random batches. Accuracy is measured over
``--accuracy-inputs`` random inputs: cosine similarity of the output against the float model and
(for fxvino's and Inductor's rows) against the quantized model run eagerly, and for ResNet-50
top-1 agreement with both. The machine's ISA is in the header: VNNI/AMX decide int8 speed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULT = "QUANT-RESULT "
CONTENDERS = (
    "fxvino_f32",
    "fxvino_int8",
    "fxvino_int8_7bit",
    "fxvino_nncf",
    "inductor_int8",
    "openvino_int8",
    "native_int8",
)
MODELS = ("resnet50", "bert")


# --------------------------------------------------------------------------- worker (one contender)


def _inputs(model: str, batch: int, seed: int) -> tuple[Any, ...]:
    import torch

    g = torch.Generator().manual_seed(seed)
    if model == "resnet50":
        return (torch.randn(batch, 3, 224, 224, generator=g),)
    return (torch.randint(0, 30522, (batch, 128), generator=g),)


def _pt2e(model: Any, example: tuple, calibration: list[tuple], reduce_range: bool = False) -> Any:
    import torch
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from fxvino.quantization import ready_for_quantizer

    exported = ready_for_quantizer(torch.export.export(model, example).module())
    config = xiq.get_default_x86_inductor_quantization_config(reduce_range=reduce_range)
    prepared = prepare_pt2e(exported, xiq.X86InductorQuantizer().set_global(config))
    for batch in calibration:
        prepared(*batch)
    return convert_pt2e(prepared, fold_quantize=True)


def _nncf_fx(model: Any, name: str, example: tuple, calibration: list[tuple]) -> Any:
    import nncf
    import torch

    from fxvino.quantization import remove_dead_code

    exported = torch.export.export(model, example).module()
    remove_dead_code(exported)  # NNCF fails on the unused pooler weights of BERT's last hidden state
    kind = {"model_type": nncf.ModelType.TRANSFORMER} if name == "bert" else {}
    return nncf.quantize(exported, nncf.Dataset([b[0] for b in calibration]), subset_size=len(calibration), **kind)


def _native(model: Any, name: str, example: tuple, calibration: list[tuple]) -> Any:
    import nncf
    import openvino as ov

    ov_model = ov.convert_model(model, example_input=example[0])
    kind = {"model_type": nncf.ModelType.TRANSFORMER} if name == "bert" else {}
    data = nncf.Dataset([b[0].numpy() for b in calibration])
    quantized = nncf.quantize(ov_model, data, subset_size=len(calibration), **kind)
    # fxvino's defaults: f32 where a layer is not int8 (OpenVINO would pick bf16 on AVX512-BF16/AMX).
    compiled = ov.Core().compile_model(
        quantized, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    )

    def run(x: Any) -> Any:
        import torch

        return torch.from_numpy(compiled(x.numpy())[0].copy())

    return run


def _build(contender: str, name: str, batch: int) -> tuple[Any, Any, Any]:
    """(callable under test, its eager quantized reference or None, the float model)."""
    import torch

    from fxvino.tools import zoo

    model, _ = zoo.comparable(name)
    example = _inputs(name, batch, 0)
    calibration = [_inputs(name, batch, 100 + i) for i in range(8)]
    if contender == "fxvino_f32":
        return torch.compile(model, backend="fxvino"), None, model
    if contender == "native_int8":
        return _native(model, name, example, calibration), None, model
    if contender == "fxvino_nncf":
        quantized = _nncf_fx(model, name, example, calibration)
        return torch.compile(quantized, backend="fxvino"), quantized, model
    quantized = _pt2e(model, example, calibration, reduce_range=contender == "fxvino_int8_7bit")
    if contender in ("fxvino_int8", "fxvino_int8_7bit"):
        return torch.compile(quantized, backend="fxvino"), quantized, model
    if contender == "openvino_int8":
        import openvino.torch  # noqa: F401 - registers backend="openvino"

        return torch.compile(quantized, backend="openvino"), quantized, model
    torch._inductor.config.freezing = True
    return torch.compile(quantized), quantized, model


def _cosine(a: Any, b: Any) -> float:
    import torch

    return torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0).item()


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    x = _inputs(args.model, args.batch, 0)
    t0 = time.perf_counter()
    with torch.no_grad():
        run, reference, float_model = _build(args.worker, args.model, args.batch)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        run(*x)
        first_s = time.perf_counter() - t0
        times = []
        for _ in range(args.calls):
            t0 = time.perf_counter()
            run(*x)
            times.append(time.perf_counter() - t0)
        cos_f32, cos_q, top_f32, top_q = [], [], [], []
        for i in range(args.accuracy_inputs):
            xi = _inputs(args.model, 1 if args.model == "resnet50" else args.batch, 1000 + i)
            if xi[0].shape != x[0].shape:  # compiled for another batch: stay on its shape
                xi = _inputs(args.model, args.batch, 1000 + i)
            out, ref = run(*xi), float_model(*xi)
            cos_f32.append(_cosine(out, ref))
            top_f32.append((out.argmax(-1) == ref.argmax(-1)).float().mean().item())
            if reference is not None:
                sim = reference(*xi)
                cos_q.append(_cosine(out, sim))
                top_q.append((out.argmax(-1) == sim.argmax(-1)).float().mean().item())
    row: dict[str, Any] = {
        "contender": args.worker,
        "model": args.model,
        "batch": args.batch,
        "build_s": build_s,
        "first_call_s": first_s,
        "median_ms": 1e3 * statistics.median(times),
        "min_ms": 1e3 * min(times),
        "cos_vs_f32": min(cos_f32) if cos_f32 else None,
    }
    if cos_q:
        row["cos_vs_quantized_eager"] = min(cos_q)
    if args.model == "resnet50" and top_f32:
        row["top1_vs_f32"] = statistics.mean(top_f32)
        if top_q:
            row["top1_vs_quantized_eager"] = statistics.mean(top_q)
    return row


# --------------------------------------------------------------------------- driver


def _run(contender: str, model: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", contender, "--model", model]
    cmd += ["--batch", str(batch), "--calls", str(args.calls), "--accuracy-inputs", str(args.accuracy_inputs)]
    env = dict(os.environ, PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"contender": contender, "error": f"timed out after {args.timeout:.0f}s"}
    for line in done.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    tail = (done.stderr or done.stdout).strip().splitlines()[-2:]
    return {"contender": contender, "error": " | ".join(tail) or f"exit {done.returncode}"}


def _fmt(v: float | None, spec: str) -> str:
    return "—" if v is None else format(v, spec)


def _table(results: dict[tuple[str, int, str], list[dict]], cases: list[tuple[str, int]], contenders: list[str]) -> str:
    lines = [
        "| model | batch | contender | median ms | min ms | first call s | cos vs f32 (min)"
        " | cos vs quantized eager (min) | top-1 vs f32 | top-1 vs quantized eager |",
        "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for model, batch in cases:
        for c in contenders:
            rows = [r for r in results.get((model, batch, c), []) if "error" not in r]
            if not rows:
                errors = [r["error"] for r in results.get((model, batch, c), [])]
                lines.append(f"| {model} | {batch} | {c} | error: {(errors or ['not run'])[0][:120]} |||||||")
                continue
            med = statistics.median(r["median_ms"] for r in rows)
            low = min(r["min_ms"] for r in rows)
            first = statistics.median(r["first_call_s"] for r in rows)
            last = rows[-1]
            accuracy = [
                _fmt(last.get("cos_vs_f32"), ".5f"),
                _fmt(last.get("cos_vs_quantized_eager"), ".5f"),
                _fmt(last.get("top1_vs_f32"), ".0%"),
                _fmt(last.get("top1_vs_quantized_eager"), ".0%"),
            ]
            timing = f"| {model} | {batch} | {c} | {med:.2f} | {low:.2f} | {first:.1f} | "
            lines.append(timing + " | ".join(accuracy) + " |")
    return "\n".join(lines)


def _ratios(results: dict, cases: list[tuple[str, int]]) -> list[str]:
    def med(model: str, batch: int, c: str) -> float | None:
        rows = [r["median_ms"] for r in results.get((model, batch, c), []) if "median_ms" in r]
        return statistics.median(rows) if rows else None

    out = []
    for model, batch in cases:
        ours = med(model, batch, "fxvino_int8")
        for other in ("inductor_int8", "native_int8", "fxvino_f32", "openvino_int8"):
            theirs = med(model, batch, other)
            if ours and theirs:
                out.append(f"- {model} b{batch}: fxvino_int8 / {other} = {ours / theirs:.2f}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"any of {', '.join(MODELS)}")
    parser.add_argument("--batches", default="1,8", help="ResNet-50 batch sizes (BERT runs batch 1)")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help=f"any of {', '.join(CONTENDERS)}")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20, help="timed calls per process")
    parser.add_argument("--accuracy-inputs", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", default=None, help="also write the markdown here")
    parser.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--model", choices=MODELS, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(RESULT + json.dumps(worker(args)), flush=True)
        return 0

    from benchmarks.bench import machine_info

    def listed(text: str, valid: tuple[str, ...], what: str) -> list[str]:
        items = [s.strip() for s in text.split(",") if s.strip()]
        unknown = sorted(set(items) - set(valid))
        if unknown:
            parser.error(f"unknown {what} {', '.join(unknown)}; valid: {', '.join(valid)}")
        return items

    models = listed(args.models, MODELS, "model(s)")
    contenders = listed(args.contenders, CONTENDERS, "contender(s)")
    try:
        batches = [int(b) for b in args.batches.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--batches wants integers separated by commas, got {args.batches!r}")
    cases = [(m, b) for m in models for b in (batches if m == "resnet50" else [1])]
    info = machine_info()
    header = (
        f"machine: {info.get('cpu')} | ISA: {info.get('isa') or 'no AVX2'} | {info.get('logical_cores')} logical cores"
        f" | torch {info.get('torch')} | openvino {info.get('openvino')} | fxvino {info.get('fxvino_commit')}\n"
        f"random weights; {args.rounds} rounds x {args.calls} timed calls; accuracy over {args.accuracy_inputs} inputs"
    )
    print(header, flush=True)
    results: dict[tuple[str, int, str], list[dict]] = {}
    for rnd in range(args.rounds):
        order = contenders if rnd % 2 == 0 else contenders[::-1]
        for model, batch in cases:
            for c in order:
                t0 = time.perf_counter()
                row = _run(c, model, batch, args)
                results.setdefault((model, batch, c), []).append(row)
                what = row.get("error") or f"{row['median_ms']:.2f} ms (min {row['min_ms']:.2f})"
                print(f"round {rnd + 1} {model} b{batch} {c:14} {what} ({time.perf_counter() - t0:.0f}s)", flush=True)
    text = header + "\n\n" + _table(results, cases, contenders) + "\n\n" + "\n".join(_ratios(results, cases))
    print("\n" + text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
