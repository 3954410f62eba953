"""Training step time side by side: forward + backward + AdamW step, and peak RSS, under eager
PyTorch, Inductor, the OpenVINO wheel's backend (``aot_autograd``) and fxvino (``aot_autograd``).

    python -m benchmarks.train                          # BERT-base s128 b8, GPT-2 small s128 b4, ResNet-50 b8,
                                                        # a gpt-oss-like MoE s128 b4 (8 experts, top 2)
    python -m benchmarks.train --size tiny --steps 3 --rounds 1     # a smoke check (seconds per worker)
    python -m benchmarks.train --models bert --contenders eager,fxvino --rounds 3

Every (model, contender, round) runs in a fresh process (``--worker``), so no compile cache, Dynamo
state or memory of one contender reaches another; rounds are interleaved, the order reversed every
other round, and the table shows medians over rounds. Weights are random (configs only, nothing is
downloaded); dropout stays at the configs' defaults, as in real fine-tuning.

Per step the worker times the forward (loss computed), the backward and the optimizer (step and
zero_grad) separately, after ``--warmup`` steps (the first includes compilation: "first step").
Then, for fxvino only, a few more steps run with the runtime instrumented: the time inside
OpenVINO's ``infer`` against the time of whole partition calls; the difference is the transfer
between PyTorch and OpenVINO (binding or copying inputs, copying outputs into torch tensors). Peak
RSS is the process's ``ru_maxrss`` at the end: model, optimizer state, compiled graphs and
activations.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULT = "TRAIN-RESULT "
CONTENDERS = ("eager", "inductor", "openvino", "fxvino")
MODELS = ("bert", "gpt2", "resnet50", "moe")
# (batch, sequence length or image side) per model and size.
SHAPES = {
    "full": {"bert": (8, 128), "gpt2": (4, 128), "resnet50": (8, 224), "moe": (4, 128)},
    "tiny": {"bert": (2, 16), "gpt2": (2, 16), "resnet50": (2, 32), "moe": (2, 16)},
}


# --------------------------------------------------------------------------- worker (one contender)


def _model(name: str, size: str):
    """(model in train mode, batch, loss function) with random weights."""
    import torch

    torch.manual_seed(0)
    batch, length = SHAPES[size][name]
    g = torch.Generator().manual_seed(1)
    if name == "bert":
        from transformers import BertConfig, BertForSequenceClassification

        small = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
        cfg = BertConfig(num_labels=2, problem_type="single_label_classification", **(small if size == "tiny" else {}))
        ids = torch.randint(0, cfg.vocab_size, (batch, length), generator=g)
        labels = torch.randint(0, 2, (batch,), generator=g)
        return (
            BertForSequenceClassification(cfg).train(),
            (ids, labels),
            lambda m, b: m(input_ids=b[0], labels=b[1]).loss,
        )
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        small = dict(n_embd=64, n_layer=2, n_head=2)
        cfg = GPT2Config(**(small if size == "tiny" else {}))
        ids = torch.randint(0, cfg.vocab_size, (batch, length), generator=g)
        model = GPT2LMHeadModel(cfg).train()
        model.loss_type = "ForCausalLM"  # else transformers logs a warning inside forward: a graph break
        return model, (ids,), lambda m, b: m(input_ids=b[0], labels=b[0]).loss
    if name == "moe":
        return _moe(size, batch, length, g)
    from transformers import ResNetConfig, ResNetForImageClassification

    small = dict(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])
    cfg = ResNetConfig(problem_type="single_label_classification", **(small if size == "tiny" else {}))  # ResNet-50
    pixels = torch.randn(batch, 3, length, length, generator=g)
    labels = torch.randint(0, cfg.num_labels, (batch,), generator=g)
    return (
        ResNetForImageClassification(cfg).train(),
        (pixels, labels),
        lambda m, b: m(pixel_values=b[0], labels=b[1]).loss,
    )


def _moe(size: str, batch: int, length: int, g):
    """gpt-oss's layout scaled to GPT-2 small's width: 8 experts, top 2, biased experts with clamped
    SwiGLU, attention sinks, sliding and full attention alternating. transformers runs the experts
    through its ``grouped_mm_fallback`` custom op: an expert loop in eager and under Inductor, one
    batched product over the experts' runs of rows per projection on OpenVINO (``lowering/ops/moe.py``),
    forward and backward."""
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    if size == "tiny":  # a small vocabulary too, or the embeddings' AdamW update is most of the step
        dims = dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, head_dim=16)
        dims["vocab_size"] = 1000
    else:
        dims = dict(hidden_size=768, intermediate_size=768, num_hidden_layers=6, num_attention_heads=12, head_dim=64)
        dims["vocab_size"] = 32000
    cfg = GptOssConfig(
        num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2, sliding_window=64,
        layer_types=["sliding_attention", "full_attention"] * (dims["num_hidden_layers"] // 2),
        max_position_embeddings=max(length, 128), rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        **dims,
    )  # fmt: skip
    ids = torch.randint(0, cfg.vocab_size, (batch, length), generator=g)
    model = GptOssForCausalLM(cfg).train()
    model.loss_type = "ForCausalLM"
    return model, (ids,), lambda m, b: m(input_ids=b[0], labels=b[0]).loss


def _compile(model, contender: str):
    import torch

    if contender == "eager":
        return model
    if contender == "inductor":
        return torch.compile(model, backend="inductor")
    if contender == "openvino":
        import openvino.torch  # noqa: F401  registers backend="openvino"

        return torch.compile(model, backend="openvino", options={"aot_autograd": True})
    return torch.compile(model, backend="fxvino", options={"aot_autograd": True})


class _RuntimeTimer:
    """Seconds inside OpenVINO's infer and inside whole partition calls (fxvino's runtime)."""

    def __init__(self) -> None:
        from fxvino.runtime import compiled_partition as runtime

        self.runtime, self.infer_s, self.call_s = runtime, 0.0, 0.0
        self._infer, self._call = runtime._infer, runtime.CompiledPartition.__call__

    def __enter__(self) -> _RuntimeTimer:
        infer, call = self._infer, self._call

        def timed_infer(*a: Any) -> Any:
            t = time.perf_counter()
            try:
                return infer(*a)
            finally:
                self.infer_s += time.perf_counter() - t

        def timed_call(part: Any, *a: Any) -> Any:
            t = time.perf_counter()
            try:
                return call(part, *a)
            finally:
                self.call_s += time.perf_counter() - t

        self.runtime._infer, self.runtime.CompiledPartition.__call__ = timed_infer, timed_call
        return self

    def __exit__(self, *exc: Any) -> None:
        self.runtime._infer, self.runtime.CompiledPartition.__call__ = self._infer, self._call


def worker(model_name: str, contender: str, size: str, steps: int, warmup: int, threads: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    model, batch, loss_fn = _model(model_name, size)
    fn = _compile(model, contender)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    report = None
    if contender == "fxvino":
        import fxvino

        collector = fxvino.collect_reports()
        report = collector.__enter__()

    def step() -> tuple[float, float, float]:
        t0 = time.perf_counter()
        loss = loss_fn(fn, batch)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return t1 - t0, t2 - t1, time.perf_counter() - t2

    t = time.perf_counter()
    step()
    first = time.perf_counter() - t
    for _ in range(warmup - 1):
        step()
    fwd, bwd, opt_s = zip(*(step() for _ in range(steps)), strict=True)
    result: dict[str, Any] = {
        "first_step_s": first,
        "forward_ms": 1e3 * statistics.median(fwd),
        "backward_ms": 1e3 * statistics.median(bwd),
        "optimizer_ms": 1e3 * statistics.median(opt_s),
        "step_ms": 1e3 * statistics.median(f + b + o for f, b, o in zip(fwd, bwd, opt_s, strict=True)),
    }
    if report is not None:
        probe = max(2, steps // 2)
        with _RuntimeTimer() as timer:
            for _ in range(probe):
                step()
        result["ov_infer_ms"] = 1e3 * timer.infer_s / probe
        result["transfer_ms"] = 1e3 * (timer.call_s - timer.infer_s) / probe
        result["graphs"] = len(report.graphs)
        result["torch_ops"] = sum(report.torch_ops.values())
        result["fallbacks"] = len(report.fallbacks)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


# --------------------------------------------------------------------------- parent (side by side)


def _run_worker(args: argparse.Namespace, model: str, contender: str) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "benchmarks.train", "--worker", "--models", model, "--contenders", contender,
        "--size", args.size, "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), str(REPO), env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    return {"error": f"exit {proc.returncode}: {_error_line(proc.stderr)[:200]}"}


def _error_line(stderr: str) -> str:
    """The last line naming an exception (Dynamo ends its tracebacks with advice, not the error)."""
    lines = stderr.strip().splitlines() or ["no output"]
    errors = [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception|Unsupported)\b", ln.strip())]
    return (errors or lines)[-1].strip()


def _median(rounds: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rounds if key in r]
    return statistics.median(values) if values else None


def _table(results: dict[tuple[str, str], list[dict[str, Any]]], args: argparse.Namespace) -> str:
    def fmt(v: float | None, spec: str = ".1f") -> str:
        return "-" if v is None else format(v, spec)

    from benchmarks.bench import machine_info

    m = machine_info()
    lines = [
        f"Training step (forward + backward + AdamW), size `{args.size}`, {args.threads} threads, "
        f"medians of {args.rounds} interleaved round(s) x {args.steps} steps. CPU: {m.get('cpu')}; "
        f"ISA: {m.get('isa') or 'no AVX2'}; torch {m.get('torch')}, openvino {m.get('openvino')}, "
        f"fxvino {m.get('fxvino_commit')}.",
        "",
        "| model | contender | step ms | / eager | / inductor | forward | backward | optimizer "
        "| OV infer | transfers | first step s | peak RSS MB | RSS / eager | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model in args.models:
        eager = _median(results.get((model, "eager"), []), "step_ms")
        inductor = _median(results.get((model, "inductor"), []), "step_ms")
        eager_rss = _median(results.get((model, "eager"), []), "peak_rss_mb")
        for contender in args.contenders:
            rounds = results.get((model, contender), [])
            ok = [r for r in rounds if "error" not in r]
            step, rss = _median(ok, "step_ms"), _median(ok, "peak_rss_mb")
            note = "; ".join(sorted({r["error"] for r in rounds if "error" in r}))
            if ok and "torch_ops" in ok[0]:
                note = (
                    note
                    or f"{ok[0]['graphs']} graphs, {ok[0]['torch_ops']} ops in PyTorch, {ok[0]['fallbacks']} fallbacks"
                )
            cells = [
                model, contender, fmt(step),
                fmt(step / eager if step and eager else None, ".2f"),
                fmt(step / inductor if step and inductor else None, ".2f"),
                fmt(_median(ok, "forward_ms")), fmt(_median(ok, "backward_ms")), fmt(_median(ok, "optimizer_ms")),
                fmt(_median(ok, "ov_infer_ms")), fmt(_median(ok, "transfer_ms")), fmt(_median(ok, "first_step_s")),
                fmt(rss, ".0f"), fmt(rss / eager_rss if rss and eager_rss else None, ".2f"), note,
            ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--contenders", default=",".join(CONTENDERS))
    p.add_argument("--size", choices=tuple(SHAPES), default="full")
    p.add_argument("--steps", type=int, default=10, help="timed steps per worker")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (the first one compiles)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--out", type=Path, default=None, help="markdown table (and .json beside it)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.models, args.contenders = args.models.split(","), args.contenders.split(",")
    for name in args.models:
        if name not in MODELS:
            p.error(f"unknown model {name!r}; valid: {', '.join(MODELS)}")
    for name in args.contenders:
        if name not in CONTENDERS:
            p.error(f"unknown contender {name!r}; valid: {', '.join(CONTENDERS)}")
    if args.worker:
        result = worker(args.models[0], args.contenders[0], args.size, args.steps, max(1, args.warmup), args.threads)
        print(RESULT + json.dumps(result), flush=True)
        return
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        order = args.contenders if r % 2 == 0 else args.contenders[::-1]
        for model in args.models:
            for contender in order:
                res = _run_worker(args, model, contender)
                results.setdefault((model, contender), []).append(res)
                print(f"round {r + 1} {model} {contender}: {res}", file=sys.stderr, flush=True)
    table = _table(results, args)
    print(table)
    if args.out:
        args.out.write_text(table)
        raw = {f"{m}/{c}": v for (m, c), v in results.items()}
        args.out.with_suffix(".json").write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
