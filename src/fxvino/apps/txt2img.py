"""A small text-to-image web UI running a diffusers pipeline through fxvino.

    python -m fxvino.apps.txt2img --model PATH [--device CPU] [--precision f32] [--model-cache]
    python -m fxvino.apps.txt2img --model PATH --prompt "a cat" --out cat.png   # no UI, one image

``PATH`` is a diffusers pipeline directory (``save_pretrained``) or a Stable Diffusion 1.x
single-file checkpoint (``.safetensors``/``.ckpt``, loaded offline by
:func:`fxvino.diffusion.load_single_file`; ``--config DIR`` names the diffusers config directory
it needs when none is beside the file or in the Hugging Face cache). The pipeline is compiled once with
:func:`fxvino.compile_pipeline`: size, batch, scheduler and LoRA changes do not recompile per
request (see docs/user-guide/diffusion.md). Needs the ``app`` extra (gradio).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# Schedulers offered by name (diffusers class names, and the extra config some of them need).
SCHEDULERS: dict[str, tuple[str, dict[str, Any]]] = {
    "euler": ("EulerDiscreteScheduler", {}),
    "euler_a": ("EulerAncestralDiscreteScheduler", {}),
    "dpm++": ("DPMSolverMultistepScheduler", {}),
    "dpm++_karras": ("DPMSolverMultistepScheduler", {"use_karras_sigmas": True}),
    "ddim": ("DDIMScheduler", {}),
    "pndm": ("PNDMScheduler", {}),
    "lms": ("LMSDiscreteScheduler", {}),
}
SIZE_MULTIPLE = 8
MAX_SIDE = 2048


class InputError(ValueError):
    """A request the UI and the command line refuse, with a message saying what is valid."""


def check_request(width: int, height: int, steps: int, scheduler: str) -> None:
    for name, value in (("width", width), ("height", height)):
        if value is None or int(value) != value or value <= 0 or value % SIZE_MULTIPLE:
            near = max(SIZE_MULTIPLE, round((value or 0) / SIZE_MULTIPLE) * SIZE_MULTIPLE)
            raise InputError(
                f"{name} must be a positive multiple of {SIZE_MULTIPLE} (the VAE and UNet halve it "
                f"three times), got {value}; e.g. {near}"
            )
        if value > MAX_SIDE:
            raise InputError(f"{name} must be at most {MAX_SIDE}, got {value}")
    if steps is None or int(steps) != steps or not 1 <= steps <= 200:
        raise InputError(f"steps must be an integer from 1 to 200, got {steps}")
    if scheduler not in SCHEDULERS:
        raise InputError(f"unknown scheduler {scheduler!r}; valid: {', '.join(SCHEDULERS)}")


def load_pipeline(path: str | os.PathLike, config: str | os.PathLike | None = None) -> Any:
    """The pipeline saved at ``path``: a diffusers directory, or a single checkpoint file with
    ``config`` its diffusers config directory (None: looked for beside the file and in the Hugging
    Face cache; nothing is downloaded)."""
    import diffusers

    from fxvino.diffusion import CheckpointError, load_single_file

    p = Path(path)
    if not p.exists():
        raise InputError(
            f"model path {str(p)!r} does not exist: give a diffusers pipeline directory or a checkpoint file"
        )
    if p.is_dir():
        if config is not None:
            raise InputError(
                f"--config is for a checkpoint file; {str(p)!r} is a directory, which holds its own configs"
            )
        if not (p / "model_index.json").exists():
            raise InputError(f"{str(p)!r} is not a diffusers pipeline directory (no model_index.json)")
        return diffusers.DiffusionPipeline.from_pretrained(p, safety_checker=None)
    try:
        pipe = load_single_file(p, config)
    except CheckpointError as e:
        raise InputError(str(e)) from e
    if not isinstance(pipe, diffusers.StableDiffusionPipeline):
        raise InputError(
            f"{str(p)!r} is a {type(pipe).__name__} checkpoint: this app generates from text only; give a "
            "text-to-image checkpoint"
        )
    return pipe


class Generator:
    """The compiled pipeline and its LoRA state; one request at a time (a lock: one pipeline)."""

    def __init__(
        self,
        model: str | os.PathLike,
        options: dict[str, Any] | None = None,
        config: str | os.PathLike | None = None,
    ) -> None:
        import fxvino

        self.model = str(model)
        self.pipe = load_pipeline(model, config)
        self.pipe.set_progress_bar_config(disable=True)
        fxvino.compile_pipeline(self.pipe, options=options)
        self.scheduler_config = dict(self.pipe.scheduler.config)
        self.lora: str | None = None
        self.lock = threading.Lock()

    def _set_scheduler(self, name: str) -> None:
        import diffusers

        cls_name, extra = SCHEDULERS[name]
        self.pipe.scheduler = getattr(diffusers, cls_name).from_config(self.scheduler_config, **extra)

    def _set_lora(self, lora: str | None, scale: float) -> None:
        lora = (lora or "").strip() or None
        if lora is not None and not Path(lora).exists():
            raise InputError(
                f"LoRA path {lora!r} does not exist: give a directory or .safetensors file of LoRA weights"
            )
        if lora != self.lora and self.lora is not None:
            self.pipe.unload_lora_weights()
            self.lora = None
        if lora is not None:
            if lora != self.lora:
                self.pipe.load_lora_weights(lora, adapter_name="ui")
                self.lora = lora
            self.pipe.set_adapters(["ui"], adapter_weights=[float(scale)])

    def __call__(
        self,
        prompt: str,
        negative_prompt: str = "",
        steps: int = 20,
        width: int = 512,
        height: int = 512,
        seed: int = 0,
        scheduler: str = "euler",
        lora: str | None = None,
        lora_scale: float = 1.0,
        guidance_scale: float = 7.5,
        on_step: Callable[[int, int], None] | None = None,
    ) -> tuple[Any, dict[str, float]]:
        check_request(width, height, steps, scheduler)
        with self.lock, torch.no_grad():
            self._set_scheduler(scheduler)
            self._set_lora(lora, lora_scale)
            times: list[float] = []

            def step_end(pipe: Any, i: int, t: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
                times.append(time.perf_counter())
                if on_step is not None:
                    on_step(i + 1, int(steps))
                return kwargs

            start = time.perf_counter()
            image = self.pipe(
                prompt=prompt,
                negative_prompt=negative_prompt or None,
                num_inference_steps=int(steps),
                width=int(width),
                height=int(height),
                guidance_scale=float(guidance_scale),
                generator=torch.Generator().manual_seed(int(seed)),
                callback_on_step_end=step_end,
            ).images[0]
            end = time.perf_counter()
        per_step = [b - a for a, b in zip([start, *times], times, strict=False)]
        timing = {
            "total_s": end - start,
            "first_step_s": per_step[0] if per_step else 0.0,
            "step_s": sorted(per_step[1:])[len(per_step[1:]) // 2] if len(per_step) > 1 else float("nan"),
            "decode_s": end - times[-1] if times else float("nan"),
        }
        return image, timing


def describe(timing: dict[str, float], steps: int) -> str:
    return (
        f"{timing['total_s']:.2f} s total for {steps} steps: text encoding and first step "
        f"{timing['first_step_s']:.2f} s (includes any compile), then {timing['step_s']:.3f} s/step (median), "
        f"VAE decode {timing['decode_s']:.2f} s"
    )


def build_ui(generator: Generator) -> Any:
    import gradio as gr

    def generate(prompt, negative, steps, width, height, seed, scheduler, lora, lora_scale, progress=gr.Progress()):  # noqa: B008 - gradio's progress idiom
        progress(0, desc="starting")
        try:
            image, timing = generator(
                prompt,
                negative,
                steps,
                width,
                height,
                seed,
                scheduler,
                lora,
                lora_scale,
                on_step=lambda i, n: progress((i, n), desc=f"step {i}/{n}"),
            )
        except InputError as e:
            raise gr.Error(str(e)) from e
        return image, describe(timing, int(steps))

    with gr.Blocks(title="fxvino txt2img") as ui:
        gr.Markdown(f"### fxvino text-to-image\nModel: `{generator.model}` (OpenVINO through fxvino)")
        with gr.Row():
            with gr.Column():
                prompt = gr.Textbox(label="Prompt", value="a photo of a cat", elem_id="prompt")
                negative = gr.Textbox(label="Negative prompt", elem_id="negative")
                with gr.Row():
                    steps = gr.Number(label="Steps", value=20, precision=0, elem_id="steps")
                    seed = gr.Number(label="Seed", value=0, precision=0, elem_id="seed")
                with gr.Row():
                    width = gr.Number(label="Width", value=512, precision=0, elem_id="width")
                    height = gr.Number(label="Height", value=512, precision=0, elem_id="height")
                scheduler = gr.Dropdown(
                    label="Scheduler",
                    choices=list(SCHEDULERS),
                    value="euler",
                    allow_custom_value=True,
                    elem_id="scheduler",
                )
                with gr.Row():
                    lora = gr.Textbox(label="LoRA path (optional)", elem_id="lora")
                    lora_scale = gr.Number(label="LoRA scale", value=1.0, elem_id="lora_scale")
                button = gr.Button("Generate", variant="primary", elem_id="generate")
            with gr.Column():
                image = gr.Image(label="Image", type="pil", elem_id="image")
                info = gr.Markdown(elem_id="info")
        button.click(
            generate, [prompt, negative, steps, width, height, seed, scheduler, lora, lora_scale], [image, info]
        )
    return ui


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m fxvino.apps.txt2img", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="diffusers pipeline directory or checkpoint file")
    parser.add_argument(
        "--config",
        help="diffusers config directory for a checkpoint file (default: the file's own directory, a directory "
        "named after it, or the Hugging Face cache; never downloaded)",
    )
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--precision", default="f32", choices=["f32", "bf16", "f16"])
    parser.add_argument("--model-cache", action="store_true", help="fxvino model_caching (fast restarts)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7860)
    one = parser.add_argument_group("one image without the UI")
    one.add_argument("--prompt")
    one.add_argument("--negative-prompt", default="")
    one.add_argument("--out", default="image.png")
    one.add_argument("--steps", type=int, default=20)
    one.add_argument("--width", type=int, default=512)
    one.add_argument("--height", type=int, default=512)
    one.add_argument("--seed", type=int, default=0)
    one.add_argument("--scheduler", default="euler")
    one.add_argument("--lora")
    one.add_argument("--lora-scale", type=float, default=1.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    options = {"device": args.device, "precision": args.precision, "model_caching": args.model_cache}
    try:
        if args.prompt is not None:  # refuse bad input before the (slow) model load
            check_request(args.width, args.height, args.steps, args.scheduler)
        generator = Generator(args.model, options, args.config)
        if args.prompt is None:
            os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
            build_ui(generator).launch(server_name=args.host, server_port=args.port, share=False)
            return 0
        image, timing = generator(
            args.prompt,
            args.negative_prompt,
            args.steps,
            args.width,
            args.height,
            args.seed,
            args.scheduler,
            args.lora,
            args.lora_scale,
            on_step=lambda i, n: print(f"step {i}/{n}", file=sys.stderr, flush=True),
        )
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    image.save(args.out)
    print(f"{args.out}: {describe(timing, args.steps)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
