"""Text generation side by side: prefill, decode ms/token, peak RSS and first-call time of a Llama
model under eager PyTorch, Inductor, the OpenVINO wheel's backend, optimum-intel and fxvino.

    python -m benchmarks.generate                       # ~1.1B Llama, prompt 512, 128 new tokens
    python -m benchmarks.generate --size small --rounds 3 --prompt 128
    make bench-generate                                 # builds optimum-intel's own venv first

The weights are random, made once from a config and saved with ``save_pretrained`` (under
``--cache``) so that every contender loads the same checkpoint. Each measurement runs in a fresh
process; rounds are interleaved (order reversed every other round) and the table shows medians
(and minima) over rounds. optimum-intel pins another transformers release, so it runs from its
own venv (``--optimum-python``, default ``.venv-optimum/bin/python``) with torch 2.13.0; it is
skipped, and said so, when that venv is missing.

Decode time per token is ``(t(N new tokens) - t(1 new token)) / (N - 1)`` measured inside one
process on warm compiled models, so prefill, tokenizer-free input preparation and generate()'s
own overhead per call cancel out. bf16 rows run only on CPUs with bf16 kernels (AMX or
AVX512-BF16), unless ``--precision bf16`` asks for them anyway.
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
RESULT = "GENERATE-RESULT "
CONTENDERS = (
    "eager",
    "inductor",
    "inductor_autocast",  # f32 weights, Inductor+freezing, generate() under autocast to the precision
    "openvino",
    "optimum",
    "fxvino",
    "fxvino_static",
    "fxvino_dynamic",
    "optimum_int8",  # optimum-intel's int8 weight compression (load_in_8bit=True)
    "fxvino_int8wo",  # torchao Int8WeightOnlyConfig, then fxvino
    "optimum_int4",  # optimum-intel's int4 weight compression (symmetric, group 128)
    "fxvino_int4wo",  # torchao IntxWeightOnlyConfig(int4, group 128), then fxvino (i4 constants)
    "fxvino_int8wo_static",  # the same with a StaticCache
    "fxvino_int4wo_static",
    "fxvino_shared",  # share_weights=True: prefill and decode graphs in one model, whatever their costs
    "fxvino_shared_static",
    "fxvino_apart",  # share_weights=False: each graph its own compiled model (the default is "auto")
    "fxvino_apart_static",
    "fxvino_keep_pages",  # page_out_weights=False: PyTorch's mapped weights stay resident after compiling
    # PyTorch's guard filter for module trees (docs/performance/call-path.md): Dynamo's guards on
    # every module attribute and weight are most of the work around a quantized decode step.
    "fxvino_static_nnfilter",
    "fxvino_int8wo_static_nnfilter",
    "fxvino_int4wo_static_nnfilter",
)
DEFAULT_CONTENDERS = ("eager", "inductor", "openvino", "optimum", "fxvino")
SIZES: dict[str, dict[str, int]] = {
    # TinyLlama-1.1B's shape: 22 layers, 32 query / 4 KV heads, 5632-wide MLP (1.1B parameters).
    "1b": dict(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4
    ),
    # The smaller probe: ~122M parameters read per token.
    "small": dict(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4
    ),
    # SmolLM2-135M's shape (vocabulary aside): 30 narrow layers, the decode step bound by per-node
    # cost rather than by weight traffic, as small models on CPUs are.
    "135m": dict(
        hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3
    ),
    "tiny": dict(
        hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    ),
}


# --------------------------------------------------------------------------- worker (one contender)


def _checkpoint(path: Path, size: str) -> Path:
    """A random-weight Llama of ``size`` saved once (f32 safetensors)."""
    if (path / "config.json").exists():
        return path
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32000, max_position_embeddings=4096, tie_word_embeddings=False, **SIZES[size])
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # random init's logits are nearly flat: sharpen them so greedy tokens are stable
        model.lm_head.weight.mul_(8.0)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    print(f"saved a random {size} Llama ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters) to {path}")
    return path


def _load(contender: str, path: Path, precision: str):
    """The model of one contender, ready for generate()."""
    import torch

    dtype = torch.bfloat16 if precision == "bf16" and contender != "inductor_autocast" else torch.float32
    if contender.startswith("optimum"):
        from optimum.intel import OVModelForCausalLM

        hint = {"INFERENCE_PRECISION_HINT": "bf16" if precision == "bf16" else "f32"}
        int8 = contender == "optimum_int8"
        if contender == "optimum_int4":
            from optimum.intel import OVWeightQuantizationConfig

            int4 = OVWeightQuantizationConfig(bits=4, sym=True, group_size=128)
            return OVModelForCausalLM.from_pretrained(path, export=True, ov_config=hint, quantization_config=int4)
        return OVModelForCausalLM.from_pretrained(path, export=True, ov_config=hint, load_in_8bit=int8)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    if contender.startswith("inductor"):
        import torch._inductor.config as inductor_config

        inductor_config.freezing = True
        model.forward = torch.compile(model.forward)
    elif contender == "openvino":
        import openvino.torch  # noqa: F401 - registers backend="openvino"

        model.forward = torch.compile(model.forward, backend="openvino")
    elif contender.startswith("fxvino"):
        import fxvino  # noqa: F401

        if contender.startswith("fxvino_int8wo"):
            from torchao.quantization import Int8WeightOnlyConfig, quantize_

            quantize_(model, Int8WeightOnlyConfig())
        elif contender.startswith("fxvino_int4wo"):
            from torchao.quantization import IntxWeightOnlyConfig, PerGroup, quantize_

            quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(128)))

        dynamic = True if contender == "fxvino_dynamic" else None  # every size dynamic from the first call
        options: dict[str, Any] = {}
        if contender.startswith(("fxvino_shared", "fxvino_apart")):
            options = {"share_weights": contender.startswith("fxvino_shared")}
        if contender == "fxvino_keep_pages":
            options = {"page_out_weights": False}
        if contender.endswith("_nnfilter"):
            options = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
        model.forward = torch.compile(model.forward, backend="fxvino", dynamic=dynamic, options=options)
    return model


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float | None:
    """Resident memory now: what a server running the model keeps after its first calls."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return None


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    prompt = torch.randint(3, 32000, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(prompt)
    t0 = time.perf_counter()
    model = _load(args.worker, Path(args.path), args.precision)
    load_s = time.perf_counter() - t0

    def generate(new: int) -> tuple[float, Any]:
        kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
        if "_static" in args.worker:  # a StaticCache, updated in place by the compiled graph
            kwargs["cache_implementation"] = "static"
        autocast = args.worker == "inductor_autocast" and args.precision == "bf16"
        start = time.perf_counter()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = model.generate(prompt, attention_mask=mask, **kwargs)
        return time.perf_counter() - start, out

    first_s, out = generate(args.new)
    tokens = out[0, args.prompt :].tolist()
    prefill, full = [], []
    for _ in range(args.repeats):
        prefill.append(generate(1)[0])
        full.append(generate(args.new)[0])
    decode = [(f - p) / (args.new - 1) for f, p in zip(full, prefill, strict=True)]
    return {
        "contender": args.worker,
        "precision": args.precision,
        "load_s": load_s,
        "first_call_s": first_s,
        "prefill_ms": 1e3 * statistics.median(prefill),
        "decode_ms": 1e3 * statistics.median(decode),
        "decode_min_ms": 1e3 * min(decode),
        "peak_rss_mb": _peak_rss_mb(),
        "rss_after_mb": _rss_mb(),
        "tokens": tokens,
    }


# --------------------------------------------------------------------------- driver


def _python_for(contender: str, args: argparse.Namespace) -> str | None:
    if not contender.startswith("optimum"):
        return sys.executable
    python = Path(args.optimum_python)
    return str(python) if python.exists() else None


def _run(contender: str, precision: str, args: argparse.Namespace, path: Path) -> dict[str, Any]:
    python = _python_for(contender, args)
    if python is None:
        missing = f"no {args.optimum_python} (make venv-optimum)"
        return {"contender": contender, "precision": precision, "error": missing}
    cmd = [python, str(Path(__file__).resolve()), "--worker", contender, "--path", str(path)]
    cmd += ["--precision", precision, "--prompt", str(args.prompt), "--new", str(args.new)]
    cmd += ["--repeats", str(args.repeats)]
    env = dict(os.environ, PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"contender": contender, "precision": precision, "error": f"timed out after {args.timeout:.0f}s"}
    for line in done.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    return {"contender": contender, "precision": precision, "error": " | ".join(tail) or f"exit {done.returncode}"}


def _median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def _fmt(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _table(results: dict[tuple[str, str], list[dict]], contenders: list[str], precisions: list[str]) -> str:
    lines = [
        "| precision | contender | prefill ms | decode ms/token (median / min) | tokens/s | peak RSS MB"
        " | RSS after MB | first call s | load s | tokens = eager's |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for precision in precisions:
        eager = next((r for r in results.get(("eager", precision), []) if "tokens" in r), None)
        for c in contenders:
            rows = [r for r in results.get((c, precision), []) if "error" not in r]
            if not rows:
                errors = {r.get("error", "") for r in results.get((c, precision), [])}
                lines.append(f"| {precision} | {c} | failed: {'; '.join(sorted(errors))[:160]} ||||||||| ")
                continue
            decode = _median(rows, "decode_ms")
            pairs = zip(rows[0]["tokens"], eager["tokens"], strict=True) if eager else ()
            same = "—" if eager is None else str(sum(a == b for a, b in pairs))
            lines.append(
                f"| {precision} | {c} | {_fmt(_median(rows, 'prefill_ms'))} | {_fmt(decode, 2)} / "
                f"{_fmt(min(r['decode_min_ms'] for r in rows), 2)} | {_fmt(1e3 / decode if decode else None)} | "
                f"{_fmt(_median(rows, 'peak_rss_mb'), 0)} | {_fmt(_median(rows, 'rss_after_mb'), 0)} | "
                f"{_fmt(_median(rows, 'first_call_s'))} | "
                f"{_fmt(_median(rows, 'load_s'))} | {same}/{len(rows[0]['tokens'])} |"
            )
    return "\n".join(lines)


def _anchors(contender: str) -> tuple[str, ...]:
    """The contenders an fxvino contender is compared with: same weights, same precision."""
    for bits in ("int4", "int8"):
        if bits in contender:
            return (f"optimum_{bits}",)
    return ("eager", "inductor", "inductor_autocast", "openvino", "optimum")


def _ratios(results: dict, precisions: list[str]) -> list[str]:
    out = []
    for precision in precisions:
        for contender in CONTENDERS:
            fx = [r for r in results.get((contender, precision), []) if "error" not in r]
            if not contender.startswith("fxvino") or not fx:
                continue
            for other in _anchors(contender):
                ref = [r for r in results.get((other, precision), []) if "error" not in r]
                if ref:
                    d = _median(fx, "decode_ms") / _median(ref, "decode_ms")
                    p = _median(fx, "prefill_ms") / _median(ref, "prefill_ms")
                    rss = _median(fx, "peak_rss_mb") / _median(ref, "peak_rss_mb")
                    line = f"{precision}: {contender} / {other}: decode {d:.2f}x, prefill {p:.2f}x, peak RSS {rss:.2f}x"
                    after, ref_after = _median(fx, "rss_after_mb"), _median(ref, "rss_after_mb")
                    if after and ref_after:
                        line += f", RSS after {after / ref_after:.2f}x"
                    if len(fx) == len(ref) > 1:  # the same rounds: a neighbour's burst hits one round's pair
                        pairs = [a["decode_ms"] / b["decode_ms"] for a, b in zip(fx, ref, strict=True)]
                        each = ", ".join(f"{r:.2f}" for r in pairs)
                        line += f"; decode per round {each} (median {statistics.median(pairs):.2f}x)"
                    out.append(line)
    return out


def _has_bf16_kernels() -> bool:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "amx_bf16" in flags or "avx512_bf16" in flags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="1b")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="timed generations per process")
    parser.add_argument("--contenders", default=",".join(DEFAULT_CONTENDERS), help=f"any of {', '.join(CONTENDERS)}")
    parser.add_argument("--precision", default=None, help="f32,bf16 (default: bf16 where the CPU has its kernels)")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "fxvino-bench"))
    parser.add_argument("--optimum-python", default=str(REPO / ".venv-optimum" / "bin" / "python"))
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--out", default=None, help="also write the markdown here")
    parser.add_argument("--worker", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(RESULT + json.dumps(worker(args)), flush=True)
        return 0

    from benchmarks.bench import machine_info

    contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown:
        parser.error(f"unknown contender(s) {', '.join(unknown)}; valid: {', '.join(CONTENDERS)}")
    precisions = (args.precision or ("f32,bf16" if _has_bf16_kernels() else "f32")).split(",")
    if args.new < 2:
        parser.error("--new must be at least 2 (decode time is measured between 1 and N new tokens)")
    info = machine_info()
    header = (
        f"machine: {info.get('cpu')} | ISA: {info.get('isa') or 'no AVX2'} | {info.get('logical_cores')} logical cores"
        f" | torch {info.get('torch')} | openvino {info.get('openvino')} | transformers {info.get('transformers')}"
        f" | fxvino {info.get('fxvino_commit')}\n"
        f"model: random Llama '{args.size}' {SIZES[args.size]} | prompt {args.prompt} | {args.new} new tokens"
        f" | batch 1 | greedy | {args.rounds} rounds x {args.repeats} timed generations"
    )
    print(header, flush=True)
    path = _checkpoint(Path(args.cache) / f"llama-{args.size}", args.size)
    results: dict[tuple[str, str], list[dict]] = {}
    for rnd in range(args.rounds):
        order = contenders if rnd % 2 == 0 else contenders[::-1]
        for precision in precisions:
            for c in order:
                t0 = time.perf_counter()
                row = _run(c, precision, args, path)
                results.setdefault((c, precision), []).append(row)
                what = row.get("error") or f"decode {row['decode_ms']:.2f} ms/token, prefill {row['prefill_ms']:.0f} ms"
                print(f"round {rnd + 1} {precision} {c:9} {what} ({time.perf_counter() - t0:.0f}s)", flush=True)
    text = header + "\n\n" + _table(results, contenders, precisions) + "\n\n" + "\n".join(_ratios(results, precisions))
    print("\n" + text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
