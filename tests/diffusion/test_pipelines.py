"""Whole diffusers pipelines through ``fxvino.compile_pipeline``: images equal eager's for the same
seed, every component fully on OpenVINO, and resolution/batch changes compile each component at
most once more."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import DDIMScheduler, DPMSolverMultistepScheduler, EulerDiscreteScheduler
from diffusion_helpers import TOLERANCE, check_report, compiles_per_frame, images

import fxvino
from fxvino.diffusion import compiled_components
from fxvino.diffusion import random_pipelines as rp

SCHEDULERS = {"euler": EulerDiscreteScheduler, "dpm++": DPMSolverMultistepScheduler, "ddim": DDIMScheduler}


def _equal_after_compile(pipe, calls: list[dict]) -> fxvino.Report:
    """Eager images of each call, then the same calls compiled: equal, all on OpenVINO."""
    expected = [images(pipe, **kw) for kw in calls]
    fxvino.compile_pipeline(pipe)
    with fxvino.collect_reports() as report:
        got = [images(pipe, **kw) for kw in calls]
    for kw, e, g in zip(calls, expected, got, strict=True):
        assert g.shape == e.shape
        assert np.abs(g - e).max() <= TOLERANCE, (kw, np.abs(g - e).max())
        assert g.std() > 0.01, "a blank image proves nothing"
    check_report(report)
    return report


def test_txt2img_equals_eager_with_euler_dpmpp_ddim(tmp_path):
    pipe = rp.sd_pipeline(tmp_path)
    base = pipe.scheduler.config
    kw = {
        "prompt": "a photo of a cat",
        "negative_prompt": "blurry",
        "height": 64,
        "width": 64,
        "num_inference_steps": 3,
    }
    expected = {}
    for name, cls in SCHEDULERS.items():
        pipe.scheduler = cls.from_config(base)
        expected[name] = images(pipe, **kw)
    fxvino.compile_pipeline(pipe)
    assert compiled_components(pipe) == {"unet", "vae", "text_encoder"}
    with fxvino.collect_reports() as report:
        for name, cls in SCHEDULERS.items():
            pipe.scheduler = cls.from_config(base)
            got = images(pipe, **kw)
            assert np.abs(got - expected[name]).max() <= TOLERANCE, (name, np.abs(got - expected[name]).max())
    check_report(report)
    frames = compiles_per_frame(report)
    assert len(frames) == 3, f"one graph per component (text encoder, UNet, VAE decode): {report}"


def test_sizes_and_batches_add_at_most_one_compile_per_component(tmp_path):
    """64x64 -> 96x96 -> 80x48 -> two images -> three 48x96 images (latents at half size): the first
    call compiles static graphs, the first other size one dynamic graph per component, then nothing."""
    _sizes_add_one_compile(rp.sd_pipeline(tmp_path), components=3)


@pytest.mark.heavy
def test_sdxl_sizes_and_batches_add_at_most_one_compile_per_component(tmp_path):
    _sizes_add_one_compile(rp.sdxl_pipeline(tmp_path), components=4)


def _sizes_add_one_compile(pipe, components: int) -> None:
    expected = images(pipe, prompt="a cat", height=80, width=48, num_images_per_prompt=2)
    fxvino.compile_pipeline(pipe)
    with fxvino.collect_reports() as first:
        images(pipe, prompt="a cat", height=64, width=64)
    initial = compiles_per_frame(first)
    assert len(initial) == components and set(initial.values()) == {1}, str(first)
    with fxvino.collect_reports() as later:
        images(pipe, prompt="a cat", height=96, width=96)
        got = images(pipe, prompt="a cat", height=80, width=48, num_images_per_prompt=2)
        images(pipe, prompt="a cat", height=48, width=96, num_images_per_prompt=3)
        images(pipe, prompt="a cat", height=64, width=64)
    added = compiles_per_frame(later)
    assert set(added) <= set(initial), f"a size change compiled a new frame: {later}"
    assert all(n <= 1 for n in added.values()), f"more than one compile per component: {added}\n{later}"
    check_report(later)
    assert np.abs(got - expected).max() <= TOLERANCE


@pytest.mark.heavy
def test_sdxl_equals_eager(tmp_path):
    pipe = rp.sdxl_pipeline(tmp_path)
    _equal_after_compile(pipe, [{"prompt": "a cat", "height": 64, "width": 64}])
    assert compiled_components(pipe) == {"unet", "vae", "text_encoder", "text_encoder_2"}


@pytest.mark.heavy
def test_pixart_transformer_pipeline_equals_eager(tmp_path):
    pipe = rp.pixart_pipeline(tmp_path)
    _equal_after_compile(pipe, [{"prompt": "a cat", "height": 32, "width": 32, "use_resolution_binning": False}])
    assert compiled_components(pipe) == {"transformer", "vae", "text_encoder"}


def _init_image(seed: int = 3, size: int = 64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, 3, size, size, generator=g)


@pytest.mark.heavy
def test_img2img_equals_eager(tmp_path):
    pipe = rp.sd_pipeline(tmp_path, kind="img2img")
    _equal_after_compile(pipe, [{"prompt": "a cat", "image": _init_image(), "strength": 0.8, "num_inference_steps": 4}])


@pytest.mark.heavy
def test_inpainting_equals_eager(tmp_path):
    pipe = rp.sd_pipeline(tmp_path, kind="inpaint")
    mask = torch.zeros(1, 1, 64, 64)
    mask[..., 16:48, 16:48] = 1
    call = {"prompt": "a cat", "image": _init_image(), "mask_image": mask, "height": 64, "width": 64}
    _equal_after_compile(pipe, [call])


@pytest.mark.heavy
def test_controlnet_equals_eager(tmp_path):
    pipe = rp.controlnet_pipeline(tmp_path)
    _equal_after_compile(pipe, [{"prompt": "a cat", "image": _init_image(5), "height": 64, "width": 64}])
    assert "controlnet" in compiled_components(pipe)


@pytest.mark.heavy
def test_saved_pipeline_reloads_with_from_pretrained(tmp_path):
    """A user's own checkpoint directory: save_pretrained, from_pretrained(path), compile, same images."""
    from diffusers import StableDiffusionPipeline

    original = rp.sd_pipeline(tmp_path / "build")
    expected = images(original, prompt="a cat", height=64, width=64)
    fxvino.compile_pipeline(original)  # a compiled pipeline saves plain weights
    images(original, prompt="a cat", height=64, width=64)
    original.save_pretrained(tmp_path / "model")
    pipe = StableDiffusionPipeline.from_pretrained(tmp_path / "model", safety_checker=None)
    fxvino.compile_pipeline(pipe)
    with fxvino.collect_reports() as report:
        got = images(pipe, prompt="a cat", height=64, width=64)
    assert np.abs(got - expected).max() <= TOLERANCE
    check_report(report)


def test_pipeline_whose_every_partition_fails_at_run_time_gives_eager_images(tmp_path, monkeypatch):
    """OpenVINO raising on every call: each component runs its traced graph in PyTorch, reported,
    and the images are eager's. (The VAE decoder's traced group norms meet a tensor that is not
    contiguous at run time, on which PyTorch's own traced graph raises.)"""
    from fxvino.runtime import compiled_partition as runtime

    pipe = rp.sd_pipeline(tmp_path)
    call = {"prompt": "a cat", "height": 64, "width": 64, "num_inference_steps": 2}
    expected = images(pipe, **call)
    fxvino.compile_pipeline(pipe)

    def fail(self, *args):
        raise RuntimeError("inference exploded")

    monkeypatch.setattr(runtime.CompiledPartition, "__call__", fail)
    with fxvino.collect_reports() as report:
        got = images(pipe, **call)
    assert np.abs(got - expected).max() <= TOLERANCE
    ran_eagerly = {f.ran_on for f in report.fallbacks if "inference exploded" in f.reason}
    assert ran_eagerly == {"eager"} and len(report.graphs) == 3, str(report)
