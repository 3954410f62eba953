"""What PyTorch work right before a compiled call costs, and what ``OMP_WAIT_POLICY`` changes.

PyTorch's parallel ops run on GNU OpenMP threads that keep spinning for a few milliseconds after
each parallel region. OpenVINO runs its inference on its own (TBB) threads. On a machine with as
many cores as threads, an inference that starts while the OpenMP threads still spin shares its
cores with them, and waits for its slowest thread. This measures, per backend, a model call
alone, a PyTorch preprocessing step alone (a parallel normalize of the input), and the two back
to back, in a fresh process for each environment (libgomp reads its wait policy when it loads):

    python -m benchmarks.mixed_work                     # ResNet-50, bf16 and f32
    python -m benchmarks.mixed_work --precision bf16 --rounds 3
    python -m benchmarks.mixed_work --generate small --rounds 3   # decode, vocabulary 151,936

The penalty is ``(preprocess + call) - preprocess - call``: the cost of the order alone; the row
"fxvino, preprocess on one thread" preprocesses as ``fxvino.serving`` decodes requests (on the
calling thread alone), its penalty counting that slower preprocess too. With
``--generate``, each process times fxvino's greedy decode of a Qwen2 with random weights and
Qwen's vocabulary instead: transformers copies the last position's logits after every step, a
parallel PyTorch op for a vocabulary above 32,768 entries, right before the next step's inference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks.bench import machine_info

RESULT = "MIXED_RESULT "
# Longer than libgomp's and TBB's spin before sleeping, so each step starts with idle threads.
SETTLE_S = 0.02
DEFAULT_ENVS = ["OMP_WAIT_POLICY=PASSIVE", "GOMP_SPINCOUNT=10000"]
# Qwen2 shapes for ``--generate`` (hidden size, layers): a small probe, and Qwen2.5-0.5B's.
GENERATE_SIZES = {"small": (512, 4), "0.5b": (896, 24)}


def worker(model_name: str, precision: str, calls: int) -> dict[str, dict[str, float]]:
    import openvino as ov
    import torch

    import fxvino  # noqa: F401
    from benchmarks.worker import build
    from fxvino.runtime.torch_threads import one_thread_here

    torch.set_num_threads(2)
    model, args = build(model_name)
    (x,) = args
    raw = torch.rand(x.shape) * 255
    mean, std = (
        torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1),
        torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1),
    )
    with torch.no_grad():
        fx = torch.compile(model, backend="fxvino", options={"precision": precision})
        fx(x)
        native = ov.Core().compile_model(
            ov.convert_model(model, example_input=args),
            "CPU",
            {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY"},
        )

        def preprocess() -> torch.Tensor:
            return (raw / 255 - mean) / std  # a parallel region: the input has > 32768 elements

        backends = {"fxvino": lambda t: fx(t), "native_ov": lambda t: native([t.numpy()])}
        if precision == "f32":
            backends["eager"] = lambda t: model(t)
        steps = {}
        for name, call in backends.items():
            steps[f"{name}: call"] = lambda call=call: call(x)
            steps[f"{name}: preprocess + call"] = lambda call=call: call(preprocess())
        steps["preprocess"] = preprocess

        def preprocess_on_one_thread() -> torch.Tensor:  # what fxvino.serving's handlers do
            with one_thread_here():
                return preprocess()

        steps["fxvino, preprocess on one thread: call"] = steps["fxvino: call"]
        steps["fxvino, preprocess on one thread: preprocess + call"] = lambda: fx(preprocess_on_one_thread())
        times: dict[str, list[float]] = {k: [] for k in steps}
        for step in steps.values():
            for _ in range(3):
                step()
        for _ in range(calls):  # interleaved: every step once per round
            for name, step in steps.items():
                time.sleep(SETTLE_S)  # the previous step's threads stop spinning
                t0 = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - t0)
    return {k: {"median_ms": statistics.median(v) * 1e3, "min_ms": min(v) * 1e3} for k, v in times.items()}


def generate_worker(size: str, calls: int) -> dict[str, dict[str, float]]:
    """fxvino's greedy decode, ms per token: (36 new tokens - 4 new tokens) / 32, per round."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    import fxvino  # noqa: F401

    torch.set_num_threads(2)
    torch.manual_seed(0)
    hidden, layers = GENERATE_SIZES[size]
    config = Qwen2Config(
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(config).eval()
    model.forward = torch.compile(model.forward, backend="fxvino")
    ids = torch.randint(0, config.vocab_size, (1, 16))

    def generate(n: int) -> None:
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)

    generate(8)
    per_token = []
    for _ in range(calls):
        time.sleep(SETTLE_S)
        t0 = time.perf_counter()
        generate(4)
        t1 = time.perf_counter()
        generate(36)
        per_token.append(((time.perf_counter() - t1) - (t1 - t0)) / 32)
    return {"decode": {"median_ms": statistics.median(per_token) * 1e3, "min_ms": min(per_token) * 1e3}}


def _run_worker(args: list[str], extra: dict[str, str]) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.mixed_work", *args]
    out = subprocess.run(cmd, env={**os.environ, **extra}, capture_output=True, text=True, check=True).stdout
    return json.loads(next(ln for ln in out.splitlines() if ln.startswith(RESULT))[len(RESULT) :])


def _generate_main(size: str, envs: dict[str, dict[str, str]], rounds: int, calls: int) -> None:
    runs: dict[str, list[dict]] = {env: [] for env in envs}
    for _ in range(rounds):
        for env, extra in envs.items():  # alternated, so drift hits both
            runs[env].append(_run_worker(["--generate-worker", size, "--calls", str(calls)], extra))
    hidden, layers = GENERATE_SIZES[size]
    print(f"\n## fxvino greedy decode, Qwen2 {hidden} wide, {layers} layers, vocabulary 151,936 (ms/token)\n")
    print("| environment | each process's median (min) |")
    print("|---|---|")
    for env, results in runs.items():
        cells = ", ".join(f"{r['decode']['median_ms']:.2f} ({r['decode']['min_ms']:.2f})" for r in results)
        print(f"| {env} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50", help="a model of fxvino.tools.zoo taking one image tensor")
    parser.add_argument("--precision", choices=["f32", "bf16", "both"], default="both")
    parser.add_argument("--calls", type=int, default=60, help="interleaved rounds per process")
    parser.add_argument("--rounds", type=int, default=2, help="fresh processes per environment")
    parser.add_argument(
        "--env",
        action="append",
        metavar="NAME=VALUE",
        help=f"an environment to compare with the default one (repeatable; default: {', '.join(DEFAULT_ENVS)})",
    )
    parser.add_argument(
        "--generate", choices=list(GENERATE_SIZES), help="time fxvino's decode of a Qwen2 of this size instead"
    )
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "PRECISION"), help=argparse.SUPPRESS)
    parser.add_argument("--generate-worker", choices=list(GENERATE_SIZES), help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.worker:
        print(RESULT + json.dumps(worker(a.worker[0], a.worker[1], a.calls)), flush=True)
        return
    if a.generate_worker:
        print(RESULT + json.dumps(generate_worker(a.generate_worker, a.calls)), flush=True)
        return
    m = machine_info()
    print(f"# {m.get('cpu')}, {m.get('logical_cores')} logical cores; ISA: {m.get('isa')}")
    print(f"# fxvino at {m.get('fxvino_commit')}, torch {m.get('torch')}, openvino {m.get('openvino')}")
    envs = {"default": {}} | {e: dict([e.split("=", 1)]) for e in a.env or DEFAULT_ENVS}
    if a.generate:
        _generate_main(a.generate, envs, a.rounds, min(a.calls, 5))
        return
    precisions = ["bf16", "f32"] if a.precision == "both" else [a.precision]
    for precision in precisions:
        runs: dict[str, list[dict]] = {env: [] for env in envs}
        for _ in range(a.rounds):
            for env, extra in envs.items():  # alternated, so drift hits both
                runs[env].append(_run_worker(["--worker", a.model, precision, "--calls", str(a.calls)], extra))
        print(f"\n## {a.model} {precision}: medians over {a.rounds} processes of each one's median (ms)\n")
        print("| environment | backend | call | preprocess + call | penalty of the order (range) | × the two apart |")
        print("|---|---|--:|--:|--:|--:|")
        for env, results in runs.items():

            def med(key: str, results: list[dict] = results) -> float:
                return statistics.median(r[key]["median_ms"] for r in results)

            pre = med("preprocess")
            for backend in [k.split(":")[0] for k in results[0] if k.endswith(": call")]:
                call, both = med(f"{backend}: call"), med(f"{backend}: preprocess + call")
                # per process, so that one disturbed process moves the range, not every figure
                penalties = sorted(
                    r[f"{backend}: preprocess + call"]["median_ms"]
                    - r["preprocess"]["median_ms"]
                    - r[f"{backend}: call"]["median_ms"]
                    for r in results
                )
                spread = f"{statistics.median(penalties):+.2f} ({penalties[0]:+.2f} to {penalties[-1]:+.2f})"
                print(f"| {env} | {backend} | {call:.2f} | {both:.2f} | {spread} | {both / (pre + call):.2f} |")
            print(f"| {env} | preprocess alone | {pre:.3f} | | | |")


if __name__ == "__main__":
    main()
