"""LLMs for OpenVINO GenAI: fxvino's ``export-llm`` against optimum-intel's ``optimum-cli export openvino``.

    .venv/bin/python -m benchmarks.export_llm                       # coverage of 12 archs + timing of 3
    .venv/bin/python -m benchmarks.export_llm --coverage-only
    .venv/bin/python -m benchmarks.export_llm --timing llama --rounds 5 --out /tmp/llm.md

Needs ``make venv-optimum`` (optimum-intel 2.2 pins another transformers, so it has its own venv)
and OpenVINO GenAI in the project venv (the ``export`` extra).

**Coverage**: every decoder architecture of ``tests/test_generate.py`` (the model suite's small
configs, random weights, a BPE tokenizer trained offline) is saved with ``save_pretrained`` and
exported by both tools at f32; each directory is run by ``openvino_genai.LLMPipeline`` (greedy,
16 new tokens, f32 inference and KV cache) and its tokens compared with eager ``generate()``.

**Timing**: larger configs of a few architectures (``BENCH_CONFIGS``: ~100M parameters, a 32k
vocabulary) exported by both; the two pipelines live in one process and generate alternately
(``--rounds`` rounds of a 128-token prompt and 64 new tokens, then ``TTFT_ROUNDS`` times as many of the
prompt and one token), and GenAI's own perf metrics give the time per output token (TPOT) of the
former and the first-token latency (TTFT) of the latter. Settings (``SETTINGS``),
each applied to both IRs alike: f32 inference and KV cache (the setting whose tokens equal
eager's), and the device's default precision (bf16 where the CPU has bf16 kernels) with a u8 KV
cache, each on GenAI's stateful backend (SDPA over the IR's state) and on its default one
(continuous batching with paged attention, which GenAI makes of either IR; sliding-window models
of ours stay on the stateful one, ``export/llm/paged.py``).
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OPTIMUM_CLI = REPO / ".venv-optimum" / "bin" / "optimum-cli"
RESULT = "EXPORT_LLM_RESULT "
NEW_TOKENS = 16
TTFT_ROUNDS = 4  # first-token measurements per generation round
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
SETTINGS = {
    "f32, stateful backend": {**F32, "ATTENTION_BACKEND": "SDPA"},  # GenAI's SDPA over the IR's own state
    "f32, default backend": F32,  # continuous batching with paged attention, where GenAI can rewrite the IR
    "bf16/u8 KV, stateful backend": {"KV_CACHE_PRECISION": "u8", "ATTENTION_BACKEND": "SDPA"},
    "bf16/u8 KV, default backend": {"KV_CACHE_PRECISION": "u8"},  # what LLMPipeline(path, "CPU") runs
}

# ~100M-parameter configs for timing (the model suite's are 2 layers of 64 and time only overhead).
BENCH_CONFIGS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=1024),
    ),
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
             num_key_value_heads=2, vocab_size=32000, max_position_embeddings=1024),
    ),
    "gpt2": (
        "GPT2Config",
        "GPT2LMHeadModel",
        dict(n_embd=768, n_layer=8, n_head=12, vocab_size=32000, n_positions=1024),
    ),
}  # fmt: skip


def _small(name: str) -> Any:
    """The model suite's config for ``name`` (as tests/test_export_llm.py uses it)."""
    import torch

    from benchmarks import models

    torch.manual_seed(0)
    model, _ = models.BY_NAME[name].build()
    model.config.max_position_embeddings = 1024
    torch.manual_seed(0)
    return type(model)(model.config).eval()


def _bench(name: str) -> Any:
    import torch
    import transformers

    config_cls, model_cls, cfg = BENCH_CONFIGS[name]
    config = getattr(transformers, config_cls)(bos_token_id=1, eos_token_id=2, pad_token_id=0, **cfg)
    torch.manual_seed(0)
    return getattr(transformers, model_cls)(config).eval()


def _export_both(model: Any, tokenizer: Any, root: Path) -> dict[str, Any]:
    """``save_pretrained`` into ``root/hf``, then ``root/fxvino`` and ``root/optimum``; seconds and errors."""
    from benchmarks.worker import first_line
    from fxvino.export.llm import export_llm

    hf = root / "hf"
    model.save_pretrained(hf)
    tokenizer.save_pretrained(hf)
    row: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        export_llm(model, tokenizer, root / "fxvino", progress=False)
        row["fxvino_s"] = round(time.perf_counter() - t0, 1)
    except Exception as e:  # noqa: BLE001 - the row says why
        row["fxvino_error"] = first_line(e)
    t0 = time.perf_counter()
    cmd = [str(OPTIMUM_CLI), "export", "openvino", "-m", str(hf), "--task", "text-generation-with-past"]
    cmd += ["--weight-format", "fp32", str(root / "optimum")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0 or not (root / "optimum" / "openvino_model.xml").is_file():
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        errors = [ln for ln in lines if "Error" in ln or "error" in ln] or lines or ["(no output)"]
        row["optimum_error"] = errors[-1].strip()[:200]
    else:
        row["optimum_s"] = round(time.perf_counter() - t0, 1)
        for name in ("openvino_tokenizer.xml", "openvino_tokenizer.bin", "openvino_detokenizer.xml",
                     "openvino_detokenizer.bin"):  # fmt: skip
            if not (root / "optimum" / name).exists():  # the same tokenizer IRs for both, when it wrote none
                shutil.copy(root / "fxvino" / name, root / "optimum" / name)
    return row


def _abba(pipes: dict[str, Any], k: int) -> list[tuple[str, Any]]:
    """The pipelines in turn, the order reversed every other round: whichever runs first in a pair
    measured up to 7% slower or faster (first tokens of ~15 ms under paged attention)."""
    items = list(pipes.items())
    return items if k % 2 == 0 else items[::-1]


def _greedy(genai: Any, new: int) -> Any:
    return genai.GenerationConfig(max_new_tokens=new, min_new_tokens=new, ignore_eos=True, do_sample=False)


def _tokens(pipe: Any, ids: Any, new: int) -> list[int]:
    import openvino as ov
    import openvino_genai as genai

    return list(pipe.generate(ov.Tensor(ids.numpy()), _greedy(genai, new)).tokens[0])


def coverage_one(name: str) -> dict[str, Any]:
    import openvino_genai as genai
    import torch

    from fxvino.export.llm.tokenizer import train_bpe

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    model = _small(name)
    tokenizer = train_bpe(1000)
    ids = torch.randint(3, 1000, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    expected = out[0, ids.shape[1] :].tolist()
    row: dict[str, Any] = {"model": name}
    with tempfile.TemporaryDirectory(prefix="fxvino-llm-") as tmp:
        row |= _export_both(model, tokenizer, Path(tmp))
        for tool in ("fxvino", "optimum"):
            if f"{tool}_error" in row:
                continue
            try:
                pipe = genai.LLMPipeline(str(Path(tmp) / tool), "CPU", **F32)
                row[f"{tool}_equal"] = _tokens(pipe, ids, NEW_TOKENS) == expected
            except Exception as e:  # noqa: BLE001
                row[f"{tool}_error"] = f"LLMPipeline: {str(e).strip().splitlines()[-1][:160]}"
    return row


def timing_one(name: str, rounds: int, prompt: int, new: int) -> dict[str, Any]:
    import openvino as ov
    import openvino_genai as genai
    import torch

    from fxvino.export.llm.tokenizer import train_bpe

    model = _bench(name)
    params = sum(p.numel() for p in model.parameters())
    tokenizer = train_bpe(1000)
    ids = torch.randint(3, 1000, (1, prompt), generator=torch.Generator().manual_seed(0))
    row: dict[str, Any] = {"model": name, "params_m": round(params / 1e6, 1)}
    with tempfile.TemporaryDirectory(prefix="fxvino-llm-") as tmp:
        row |= _export_both(model, tokenizer, Path(tmp))
        del model
        if "fxvino_error" in row or "optimum_error" in row:
            return row
        for setting, props in SETTINGS.items():
            ttft: dict[str, list[float]] = {"fxvino": [], "optimum": []}
            tpot: dict[str, list[float]] = {"fxvino": [], "optimum": []}
            same = True
            first: list[int] | None = None
            # Two halves, the pipelines created in one order and then the other: of two pipelines
            # over copies of one IR, the one created first measured 2-10% slower here.
            for order in (("fxvino", "optimum"), ("optimum", "fxvino")):
                pipes = {tool: genai.LLMPipeline(str(Path(tmp) / tool), "CPU", **props) for tool in order}
                for pipe in pipes.values():  # warm-up: first-inference paths
                    _tokens(pipe, ids, 4)
                for k in range(rounds):  # decode speed: whole generations
                    for tool, pipe in _abba(pipes, k):
                        result = pipe.generate(ov.Tensor(ids.numpy()), _greedy(genai, new))
                        tpot[tool].append(result.perf_metrics.get_tpot().mean)
                        tokens = list(result.tokens[0])
                        if first is None:
                            first = tokens
                        same = same and tokens == first
                for k in range(TTFT_ROUNDS * rounds):  # first token: a prompt and one more token, many times
                    for tool, pipe in _abba(pipes, k):  # (a first token of ~15 ms varies by several ms)
                        metrics = pipe.generate(ov.Tensor(ids.numpy()), _greedy(genai, 2)).perf_metrics
                        ttft[tool].append(metrics.get_ttft().mean)
                del pipes
            row[setting] = {"ttft": ttft, "tpot": tpot, "same_tokens": same}
    return row


def _child(args: list[str], timeout: float) -> dict[str, Any]:
    from benchmarks.export import run_child

    return run_child("benchmarks.export_llm", args, timeout, RESULT)


def _cell(row: dict[str, Any], tool: str) -> str:
    if f"{tool}_error" in row:
        return "fails"
    if f"{tool}_equal" not in row:
        return "-"
    return "yes" if row[f"{tool}_equal"] else "exports, tokens differ"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", help="comma-separated architectures for coverage (default: test_generate's)")
    parser.add_argument("--timing", default=",".join(BENCH_CONFIGS), help="architectures to time ('' for none)")
    parser.add_argument("--coverage-only", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child-coverage", help=argparse.SUPPRESS)
    parser.add_argument("--child-timing", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_coverage:
        print(RESULT + json.dumps(coverage_one(args.child_coverage)), flush=True)
        return 0
    if args.child_timing:
        row = timing_one(args.child_timing, args.rounds, args.prompt, args.new)
        print(RESULT + json.dumps(row), flush=True)
        return 0
    if not OPTIMUM_CLI.exists():
        raise SystemExit(f"{OPTIMUM_CLI} is missing: run `make venv-optimum` first")
    from benchmarks.models import _isa

    sys.path.insert(0, str(REPO / "tests"))
    from test_generate import ARCHS

    lines = [
        "# LLMs for OpenVINO GenAI: fxvino export-llm against optimum-intel",
        "",
        f"Machine: {os.cpu_count()} cores, {_isa()}. optimum-intel 2.2.0 (`optimum-cli export openvino "
        "--task text-generation-with-past --weight-format fp32`, its own venv); both IRs run by "
        "`openvino_genai.LLMPipeline` in one process.",
        "",
        "## Architectures exported (greedy tokens against eager `generate()`, f32)",
        "",
        "| architecture | fxvino | optimum-intel | optimum-intel's error |",
        "|---|---|---|---|",
    ]
    archs = args.archs.split(",") if args.archs else ARCHS
    for name in archs:
        row = {"model": name} | _child(["--child-coverage", name], timeout=900)
        print(f"{name:10s} fxvino {_cell(row, 'fxvino'):24s} optimum {_cell(row, 'optimum')}"
              + (f"  [{row.get('error') or row.get('fxvino_error') or row.get('optimum_error')}]"
                 if any(k.endswith("error") for k in row) else ""), flush=True)  # fmt: skip
        why = str(row.get("optimum_error") or row.get("error") or "").replace("|", "/")
        lines.append(f"| {name} | {_cell(row, 'fxvino')} | {_cell(row, 'optimum')} | {why} |")
    if not args.coverage_only and args.timing:
        lines += [
            "",
            f"## Speed (medians: TPOT of 2x{args.rounds} alternating generations of {args.new} tokens, TTFT of "
            f"2x{TTFT_ROUNDS * args.rounds} alternating first tokens, the pipelines created in both orders; "
            f"prompt {args.prompt} tokens)",
            "",
            "| model | setting | TTFT fxvino ms | TTFT optimum ms | ratio | TPOT fxvino ms | TPOT optimum ms "
            "| ratio | same tokens |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name in args.timing.split(","):
            cmd = ["--child-timing", name, "--rounds", str(args.rounds), "--prompt", str(args.prompt)]
            row = _child([*cmd, "--new", str(args.new)], timeout=3600)
            if "error" in row or "fxvino_error" in row or "optimum_error" in row:
                why = row.get("error") or row.get("fxvino_error") or row.get("optimum_error")
                lines.append(f"| {name} | - | {why} |")
                print(f"{name}: {why}", flush=True)
                continue
            for setting in SETTINGS:
                r = row[setting]
                ft, ot = statistics.median(r["ttft"]["fxvino"]), statistics.median(r["ttft"]["optimum"])
                fp, op = statistics.median(r["tpot"]["fxvino"]), statistics.median(r["tpot"]["optimum"])
                line = (
                    f"| {name} ({row['params_m']}M) | {setting} | {ft:.1f} | {ot:.1f} | {ft / ot:.2f} | {fp:.2f} "
                    f"| {op:.2f} | {fp / op:.2f} | {'yes' if r['same_tokens'] else 'no'} |"
                )
                lines.append(line)
                print(line, flush=True)
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
