"""Stable Diffusion side by side: seconds per denoising step (UNet, batch 2 for classifier-free
guidance), VAE decode seconds, first image (compile + first step + first decode; cold and with
fxvino's model cache) and peak RSS, under eager PyTorch, Inductor, the OpenVINO wheel's
``backend="openvino"``, native OpenVINO (``ov.convert_model`` of the same UNet and VAE decoder)
and fxvino; float32 and bfloat16. ``traced_eager`` (Dynamo and AOTAutograd tracing with
fxvino's decompositions, then eager execution) gives "eager's first image plus tracing", the
anchor for the warm-start goal.

    python -m benchmarks.diffusion                          # SD 1.5 UNet/VAE (random weights), 64x64 latents
    python -m benchmarks.diffusion --size tiny --steps 2 --rounds 1 --precision f32   # proves it runs
    make bench-diffusion

The random-weight UNet and VAE are made once from configs and saved with ``save_pretrained``
(under ``--cache``) so that every contender loads the same weights. Each measurement is a fresh
process; rounds are interleaved (order reversed every other round); the table shows medians.
``fxvino_warm`` runs with ``model_caching`` after a priming process filled the cache: its first
image is a warm start; its rows also show where the cache's time went (``cache`` in the JSON
lines: weights key, blob check, import, and whether a graph was set aside because its hits cost
more than compiling it). ``fxvino_keep_pages`` is fxvino with ``page_out_weights=False``: PyTorch's
mapped weights stay resident beside OpenVINO's copy. ``--profile PATH`` writes a cProfile of each
worker's first image to ``PATH.<contender>.<precision>.prof``.

bf16 means: eager and Inductor under CPU autocast, OpenVINO (wheel, native, fxvino) with
``INFERENCE_PRECISION_HINT=bf16``; without AMX/AVX512-BF16 OpenVINO computes in f32 (the
machine's ISA is recorded in the output).
"""

from __future__ import annotations

import argparse
import contextlib
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
RESULT = "DIFFUSION-RESULT "
# traced_eager: Dynamo and AOTAutograd trace as fxvino does, then PyTorch runs the traced graph.
# Its first image is "eager's first image plus tracing", the anchor of the warm-start goal.
CONTENDERS = ("eager", "traced_eager", "inductor", "openvino", "native", "fxvino", "fxvino_warm", "fxvino_keep_pages")


def _checkpoint(cache: Path, size: str) -> Path:
    path = cache / f"sd-{size}"
    if not (path / "unet" / "config.json").exists():
        from fxvino.diffusion import random_pipelines as rp

        pipe = rp.sd_pipeline(cache / "build", size=size)
        pipe.unet.save_pretrained(path / "unet")
        pipe.vae.save_pretrained(path / "vae")
    return path


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class _Decoder:
    """What a pipeline runs to decode: ``vae.decode(z).sample``, as a module for conversions."""

    def __init__(self, vae: Any) -> None:
        import torch

        class M(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.vae = vae

            def forward(self, z: torch.Tensor) -> torch.Tensor:
                return self.vae.decode(z, return_dict=False)[0]

        self.module = M().eval()


def _traced_eager() -> Any:
    """A backend that traces exactly as fxvino does (Dynamo, AOTAutograd with fxvino's
    decomposition table, the cyclic GC paused) and then runs the ATen graph in PyTorch.

    PyTorch's own ``aot_eager`` cannot serve: its traced VAE decoder calls ``native_group_norm`` on
    a tensor that is not contiguous at run time (eager's ``group_norm`` makes it contiguous first)
    and raises. fxvino's capture makes each group norm's input contiguous, and so does this.
    """
    import gc

    import torch
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from fxvino.capture.decompositions import decomposition_table
    from fxvino.options import Options
    from fxvino.utils.fx import contiguous_group_norm_inputs

    def run_in_pytorch(gm: torch.fx.GraphModule, _example: Any) -> Any:
        contiguous_group_norm_inputs(gm)
        return make_boxed_func(gm.forward)

    table = decomposition_table(Options.parse())
    trace = aot_autograd(fw_compiler=run_in_pytorch, inference_compiler=run_in_pytorch, decompositions=table)

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        gc.disable()
        try:
            return trace(gm, example_inputs)
        finally:
            gc.enable()

    return backend


def _native(module: Any, example: tuple, precision: str) -> Any:
    import openvino as ov
    import torch

    with torch.no_grad():
        model = ov.convert_model(module, example_input=example)
    config = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY"}
    compiled = ov.Core().compile_model(model, "CPU", config)
    request = compiled.create_infer_request()

    def run(*args: torch.Tensor) -> torch.Tensor:
        request.infer([a.numpy() for a in args], share_inputs=True)
        return torch.from_numpy(request.get_output_tensor(0).data.copy())

    return run


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from diffusers import AutoencoderKL, UNet2DConditionModel

    torch.set_num_threads(args.threads)
    path = Path(args.checkpoint)
    unet = UNet2DConditionModel.from_pretrained(path / "unet").eval()
    vae = AutoencoderKL.from_pretrained(path / "vae").eval()
    h = w = args.latent
    g = torch.Generator().manual_seed(0)
    latents = torch.randn(2, 4, h, w, generator=g)
    text = torch.randn(2, 77, unet.config.cross_attention_dim, generator=g)
    t = torch.tensor(999.0)
    z = torch.randn(1, 4, h, w, generator=g)
    decoder = _Decoder(vae).module
    c, p = args.contender, args.precision
    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if p == "bf16" and c in ("eager", "traced_eager", "inductor")
        else contextlib.nullcontext()
    )
    profile = None
    if args.profile:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    start = time.perf_counter()
    if c == "native":
        step_fn = _native(unet, (latents, t, text), p)
        decode_fn = _native(decoder, (z,), p)
        step = lambda: step_fn(latents, t, text)  # noqa: E731
        decode = lambda: decode_fn(z)  # noqa: E731
    else:
        if c == "traced_eager":
            backend = _traced_eager()
            unet_c, dec_c = torch.compile(unet, backend=backend), torch.compile(decoder, backend=backend)
        elif c == "inductor":
            import torch._inductor.config as inductor_config

            inductor_config.freezing = True
            unet_c, dec_c = torch.compile(unet), torch.compile(decoder)
        elif c == "openvino":
            import openvino.torch  # noqa: F401 - registers backend="openvino"

            opts = {"config": {"INFERENCE_PRECISION_HINT": p}}
            unet_c = torch.compile(unet, backend="openvino", options=opts)
            dec_c = torch.compile(decoder, backend="openvino", options=opts)
        elif c.startswith("fxvino"):
            opts = {"precision": p}
            if c == "fxvino_warm":
                opts |= {"model_caching": True, "cache_dir": args.fxvino_cache}
            if c == "fxvino_keep_pages":  # PyTorch's mapped weights stay resident (weight_pages.py)
                opts |= {"page_out_weights": False}
            unet_c = torch.compile(unet, backend="fxvino", options=opts)
            dec_c = torch.compile(decoder, backend="fxvino", options=opts)
        else:
            unet_c, dec_c = unet, decoder
        step = lambda: unet_c(latents, t, encoder_hidden_states=text, return_dict=False)[0]  # noqa: E731
        decode = lambda: dec_c(z)  # noqa: E731
    with torch.no_grad(), autocast:
        step()
        decode()
        first = time.perf_counter() - start
        if profile is not None:
            profile.disable()
            profile.dump_stats(f"{args.profile}.{c}.{p}.prof")
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        decodes = []
        for _ in range(max(1, args.steps // 4)):
            t0 = time.perf_counter()
            decode()
            decodes.append(time.perf_counter() - t0)
    result = {
        "contender": c,
        "precision": p,
        "step_s": statistics.median(times),
        "decode_s": statistics.median(decodes),
        "first_image_s": first,
        "peak_rss_mb": _peak_rss_mb(),
    }
    # Whole-process CPU and faults: a first image whose system time or major faults jump was
    # reclaiming memory or reading from disk (the page cache did not hold the weights or blob).
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    result["rusage"] = {
        "user_s": round(ru.ru_utime, 1),
        "sys_s": round(ru.ru_stime, 1),
        "major_faults": ru.ru_majflt,
        "minor_faults": ru.ru_minflt,
    }
    if c == "fxvino_warm":
        from fxvino.cache.store import cache_for

        st = cache_for(Path(args.fxvino_cache)).stats
        # getattr: the fields newer than the cache itself read 0 when measuring an older commit.
        counts = ("hits", "stores", "aside", "slow_hits", "set_aside", "crc_skipped")
        result["cache"] = {k: getattr(st, k, 0) for k in counts}
        seconds = ("key", "verify", "import", "load", "store")
        result["cache"] |= {f"{k}_s": round(getattr(st, f"{k}_seconds", 0.0), 2) for k in seconds}
    return result


def _run(contender: str, precision: str, args: argparse.Namespace, checkpoint: Path, cache: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.diffusion", "--worker", "--contender", contender, "--precision",
           precision, "--checkpoint", str(checkpoint), "--latent", str(args.latent), "--steps", str(args.steps),
           "--threads", str(args.threads), "--fxvino-cache", cache]  # fmt: skip
    if args.profile:
        cmd += ["--profile", args.profile]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ}, timeout=args.timeout)
    for line in done.stdout.splitlines():
        if line.startswith(RESULT):
            return json.loads(line[len(RESULT) :])
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"contender": contender, "precision": precision, "error": tail[0][:200]}


def _table(results: dict[tuple[str, str], list[dict]], contenders: list[str], precisions: list[str]) -> str:
    rows = [
        "| contender | precision | s/step | VAE decode s | first image s | peak RSS MB |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for p in precisions:
        for c in contenders:
            runs = [r for r in results.get((c, p), []) if "error" not in r]
            if not runs:
                errs = [r.get("error", "") for r in results.get((c, p), [])]
                rows.append(f"| {c} | {p} | failed: {errs[0] if errs else 'not run'} | | | |")
                continue
            med = {
                k: statistics.median(r[k] for r in runs) for k in ("step_s", "decode_s", "first_image_s", "peak_rss_mb")
            }
            rows.append(
                f"| {c} | {p} | {med['step_s']:.3f} | {med['decode_s']:.3f} | {med['first_image_s']:.1f} | "
                f"{med['peak_rss_mb']:,.0f} |"
            )
    return "\n".join(rows) + _first_image_ratios(results, precisions)


def _first_image_ratios(results: dict[tuple[str, str], list[dict]], precisions: list[str]) -> str:
    """fxvino's first image (cold and warm) over eager's plus tracing (traced_eager), per precision."""
    lines = []
    for p in precisions:
        anchor = [r["first_image_s"] for r in results.get(("traced_eager", p), []) if "error" not in r]
        if not anchor:
            continue
        for c in ("fxvino", "fxvino_warm"):
            runs = [r["first_image_s"] for r in results.get((c, p), []) if "error" not in r]
            if runs:
                ratio = statistics.median(runs) / statistics.median(anchor)
                lines.append(f"- {p}: {c} first image / traced_eager's (eager's plus tracing): {ratio:.2f}x")
    return ("\n\n" + "\n".join(lines)) if lines else ""


def _cache_lines(results: dict[tuple[str, str], list[dict]]) -> str:
    """Where the warm runs' cache time went, run by run (medians would hide a set-aside run)."""
    lines = []
    for (c, p), runs in results.items():
        for r in runs:
            if c == "fxvino_warm" and "cache" in r:
                k = r["cache"]
                lines.append(
                    f"- fxvino_warm {p}: first image {r['first_image_s']:.1f} s; hits {k['hits']}, set aside "
                    f"{k['aside']} (newly {k['set_aside']}), crc32 passes skipped {k['crc_skipped']}; weights key "
                    f"{k['key_s']:.2f} s, blob check {k['verify_s']:.2f} s, import {k['import_s']:.2f} s "
                    f"load after the key {k['load_s']:.2f} s"
                )
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="sd15", choices=["sd15", "tiny"])
    parser.add_argument("--latent", type=int, default=64, help="latent side (64: 512x512 images)")
    parser.add_argument("--steps", type=int, default=8, help="timed UNet steps per process")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--precision", action="append", choices=["f32", "bf16"], help="default: both")
    parser.add_argument("--contender", action="append", choices=CONTENDERS, help="default: all")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "fxvino-bench-diffusion"))
    parser.add_argument("--out", help="also write the table (markdown) here")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--profile", metavar="PATH", help="cProfile each worker's first image to PATH.<contender>...")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--fxvino-cache", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.contender = args.contender[0] if isinstance(args.contender, list) else args.contender
        args.precision = args.precision[0] if isinstance(args.precision, list) else args.precision
        print(RESULT + json.dumps(worker(args)), flush=True)
        return 0
    from benchmarks.bench import machine_info

    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    checkpoint = _checkpoint(cache, args.size)
    contenders, precisions = args.contender or list(CONTENDERS), args.precision or ["f32", "bf16"]
    results: dict[tuple[str, str], list[dict]] = {}
    for p in precisions:
        fx_cache = tempfile.mkdtemp(prefix="fxvino-cache-", dir=cache)
        if "fxvino_warm" in contenders:  # priming: fills the model cache; its figures are the cold ones
            _run("fxvino_warm", p, args, checkpoint, fx_cache)
        for r in range(args.rounds):
            order = contenders if r % 2 == 0 else contenders[::-1]
            for c in order:
                res = _run(c, p, args, checkpoint, fx_cache)
                results.setdefault((c, p), []).append(res)
                print(json.dumps(res), file=sys.stderr, flush=True)
    info = machine_info()
    head = (
        f"SD UNet/VAE `{args.size}` (random weights), {args.latent}x{args.latent} latents, UNet batch 2, "
        f"{args.threads} threads, {args.rounds} rounds (medians). CPU: {info.get('cpu')}; ISA: {info.get('isa')}; "
        f"torch {info.get('torch')}, openvino {info.get('openvino')}, fxvino {info.get('fxvino_commit')}"
    )
    text = head + "\n\n" + _table(results, contenders, precisions) + "\n" + _cache_lines(results)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
