"""Text-to-image with a diffusers pipeline on fxvino: compile once, then images at several sizes
and with a LoRA, printing the compiles each call added and its time.

    python examples/diffusion.py /path/to/pipeline --prompt "a lighthouse at dusk"
    python examples/diffusion.py tiny            # a random-weight tiny SD pipeline (no download)
    python examples/diffusion.py tiny --lora DIR # also: load_lora_weights, fuse, unload

Images are written as ``out-<width>x<height>-<n>.png``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch

import fxvino


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a diffusers pipeline directory, or 'tiny' for random weights")
    parser.add_argument("--prompt", default="a photo of a cat")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--sizes", default="512x512,640x512,512x768", help="WxH list (tiny: use e.g. 64x64,96x64)")
    parser.add_argument("--lora", help="a LoRA to load after the first sizes (directory or .safetensors)")
    parser.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    args = parser.parse_args(argv)
    if args.model == "tiny":
        from fxvino.diffusion import random_pipelines as rp

        pipe = rp.sd_pipeline(tempfile.mkdtemp())
        if args.sizes == parser.get_default("sizes"):
            args.sizes = "64x64,96x64,48x80"
    else:
        from diffusers import DiffusionPipeline

        pipe = DiffusionPipeline.from_pretrained(args.model)
    fxvino.compile_pipeline(pipe, options={"precision": args.precision})
    runs: list[tuple[str, object]] = [(s, None) for s in args.sizes.split(",")]
    if args.lora:
        first = args.sizes.split(",")[0]
        runs += [
            (first, lambda p: p.load_lora_weights(args.lora, adapter_name="lora")),
            (first, lambda p: p.fuse_lora()),
            (first, lambda p: p.unload_lora_weights()),
        ]
    for n, (size, change) in enumerate(runs):
        if change is not None:
            change(pipe)
        w, h = (int(v) for v in size.split("x"))
        start = time.perf_counter()
        with fxvino.collect_reports() as report, torch.no_grad():
            image = pipe(args.prompt, width=w, height=h, num_inference_steps=args.steps,
                         generator=torch.Generator().manual_seed(0)).images[0]  # fmt: skip
        took = time.perf_counter() - start
        image.save(f"out-{w}x{h}-{n}.png")
        on_torch = sum(sum(g.torch_ops.values()) for g in report.graphs)
        print(f"{size}: {took:.1f} s, {len(report.graphs)} graph(s) compiled, {on_torch} op(s) in PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
