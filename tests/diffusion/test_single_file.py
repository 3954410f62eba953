"""Single-file Stable Diffusion 1.x checkpoints (original/WebUI key layout) loaded offline with
``fxvino.diffusion.load_single_file``: a tiny random pipeline written as one ``.safetensors`` or
``.ckpt`` file (``original_layout``) loads back with its exact weights, and compiled gives eager's
image of the original pipeline; bad files and missing configs are refused with what is valid.
Nothing here may reach the network: connections fail the test, and the Hugging Face cache is an
empty temporary directory unless a test fills it."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from diffusers import StableDiffusionInpaintPipeline, StableDiffusionPipeline
from diffusion_helpers import TOLERANCE, check_report, compiles_per_frame, images
from original_layout import CLIP, UNET, VAE, original_state_dict, write_config_dir, write_single_file
from safetensors.torch import save_file

import fxvino
from fxvino.apps import txt2img
from fxvino.diffusion import CheckpointError, compiled_components, load_single_file
from fxvino.diffusion import random_pipelines as rp

COMPONENTS = ("unet", "vae", "text_encoder")


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """No connection may be opened, and the Hugging Face cache is empty (a developer's own cache
    holding SD 1.5's configs must not make a missing-config test pass or fail)."""
    import huggingface_hub.constants

    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args[-1] if args else kwargs)
        raise OSError(f"this test is offline: {args}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    yield
    assert not attempts, f"the loader tried the network: {attempts}"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny random SD 1.x pipeline, its config directory (no weights) and the pipeline as one
    original-layout file of each format."""
    root = tmp_path_factory.mktemp("single_file")
    pipe = rp.sd_pipeline(root / "build")
    files = {s: write_single_file(pipe, root / f"tiny{s}") for s in (".safetensors", ".ckpt")}
    return SimpleNamespace(pipe=pipe, config=write_config_dir(pipe, root / "config"), files=files)


def assert_same_weights(expected, got, dtype: torch.dtype | None = None) -> None:
    """Every UNet, VAE and text-encoder tensor of ``got`` equals ``expected``'s (rounded through
    ``dtype`` first when the file stored that), with the same names; ``got``'s are float32."""
    for name in COMPONENTS:
        want, have = getattr(expected, name).state_dict(), getattr(got, name).state_dict()
        assert set(have) == set(want), (name, set(have) ^ set(want))
        for key, value in want.items():
            if dtype is not None and value.is_floating_point():
                value = value.to(dtype).to(value.dtype)
            assert have[key].dtype == value.dtype, (name, key, have[key].dtype)
            assert torch.equal(have[key], value), (name, key)


def test_the_written_file_is_in_the_original_layout_and_diffusers_converts_it_back(tiny):
    """diffusers' own single-file conversion (not fxvino's loader) of the written file gives back
    exactly the original state dicts: the file is in the layout real checkpoints use."""
    from diffusers.loaders.single_file_utils import infer_diffusers_model_type, is_clip_model

    state = original_state_dict(tiny.pipe)
    assert infer_diffusers_model_type(state) == "v1" and is_clip_model(state)
    assert all(k.startswith((UNET, VAE, CLIP)) or k in ("betas", "alphas_cumprod") for k in state)
    assert state[UNET + "input_blocks.0.0.weight"].shape[1] == 4
    assert state[UNET + "middle_block.1.transformer_blocks.0.attn2.to_k.weight"].shape[1] == 32
    assert state[VAE + "encoder.mid.attn_1.q.weight"].ndim == 4  # a 1x1 convolution in the original
    assert not any("down_blocks" in k or "resnets" in k for k in state)
    loaded = StableDiffusionPipeline.from_single_file(
        str(tiny.files[".safetensors"]),
        config=str(tiny.config),
        local_files_only=True,
        safety_checker=None,
        feature_extractor=None,
    )
    assert_same_weights(tiny.pipe, loaded)


@pytest.mark.parametrize(
    ("suffix", "dtype"),
    [(".safetensors", None), (".ckpt", None), (".safetensors", torch.float16)],
    ids=["safetensors", "ckpt", "safetensors-fp16"],
)
def test_load_single_file_gives_the_checkpoints_weights(tiny, tmp_path, suffix, dtype):
    """Both formats; an fp16 file (what WebUI users often have) loads upcast to float32."""
    path = tiny.files[suffix] if dtype is None else write_single_file(tiny.pipe, tmp_path / f"half{suffix}", dtype)
    pipe = load_single_file(path, config=tiny.config)
    assert type(pipe) is StableDiffusionPipeline and pipe.safety_checker is None
    assert_same_weights(tiny.pipe, pipe, dtype)


def test_single_file_pipeline_compiled_equals_eager_original(tiny):
    """The issue's contract for a user's own checkpoint: loaded from one file, compiled with
    fxvino, the image equals the original diffusers pipeline's eager image for the same seed."""
    kw = {"prompt": "a photo of a cat", "negative_prompt": "blurry", "height": 64, "width": 64}
    expected = images(tiny.pipe, **kw)
    pipe = load_single_file(tiny.files[".safetensors"], config=tiny.config)
    fxvino.compile_pipeline(pipe)
    assert compiled_components(pipe) == set(COMPONENTS)
    with fxvino.collect_reports() as report:
        got = images(pipe, **kw)
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= TOLERANCE, np.abs(got - expected).max()
    assert got.std() > 0.01, "a blank image proves nothing"
    check_report(report)
    assert len(compiles_per_frame(report)) == 3, f"one graph per component: {report}"


def _hub_cache_with(config: Path, cache: Path, repo: str) -> None:
    """A Hugging Face cache holding ``config`` as the main snapshot of ``repo`` (the layout
    huggingface_hub writes: refs/main names the snapshot)."""
    entry = cache / f"models--{repo.replace('/', '--')}"
    shutil.copytree(config, entry / "snapshots" / "0123abcd")
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("0123abcd")


@pytest.mark.parametrize("where", ["checkpoint's directory", "directory named after it", "hub cache"])
def test_config_is_found_without_being_given(tiny, tmp_path, where):
    if where == "checkpoint's directory":  # a hub repository's layout: configs and the single file
        path = shutil.copytree(tiny.config, tmp_path / "repo") / "model.safetensors"
    elif where == "directory named after it":
        shutil.copytree(tiny.config, tmp_path / "model")
        path = tmp_path / "model.safetensors"
    else:
        import huggingface_hub.constants

        _hub_cache_with(
            tiny.config, Path(huggingface_hub.constants.HF_HUB_CACHE), "stable-diffusion-v1-5/stable-diffusion-v1-5"
        )
        path = tmp_path / "model.safetensors"
    shutil.copy(tiny.files[".safetensors"], path)
    assert_same_weights(tiny.pipe, load_single_file(path))


def test_inpainting_checkpoint_loads_as_an_inpainting_pipeline(tmp_path):
    original = rp.sd_pipeline(tmp_path / "build", kind="inpaint")
    path = write_single_file(original, tmp_path / "inpaint.safetensors")
    pipe = load_single_file(path, config=write_config_dir(original, tmp_path / "config"))
    assert type(pipe) is StableDiffusionInpaintPipeline and pipe.unet.config.in_channels == 9
    assert_same_weights(original, pipe)


class NotATensor:
    """Pickled into a .ckpt: loading it would need code from the file."""


def _file(tmp_path: Path, tiny, kind: str) -> Path:
    """A file that is not a loadable SD 1.x checkpoint, of the given kind."""
    state = original_state_dict(tiny.pipe)
    weight = torch.zeros(4, 4)
    if kind == "missing":
        return tmp_path / "missing.safetensors"
    if kind == "directory":
        return tmp_path
    if kind == "wrong suffix":
        return shutil.copy(tiny.files[".safetensors"], tmp_path / "model.txt")
    if kind in ("junk safetensors", "junk ckpt"):
        path = tmp_path / ("junk.safetensors" if kind == "junk safetensors" else "junk.ckpt")
        path.write_text("<html>404: this download failed</html>")
        return path
    if kind == "pickled object":
        path = tmp_path / "object.ckpt"
        torch.save({"state_dict": state, "callbacks": NotATensor()}, path)
        return path
    layouts = {
        "lora": {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": weight},
        "sdxl": {"conditioner.embedders.0.transformer.text_model.final_layer_norm.weight": weight,
                 UNET + "input_blocks.0.0.weight": weight, VAE + "encoder.conv_in.weight": weight},
        "diffusers unet": dict(tiny.pipe.unet.state_dict()),
        "unknown": {"backbone.layer1.weight": weight, "head.fc.weight": weight},
        "no vae": {k: v for k, v in state.items() if not k.startswith(VAE)},
    }  # fmt: skip
    path = tmp_path / f"{kind.replace(' ', '_')}.safetensors"
    save_file({k: v.clone().contiguous() for k, v in layouts[kind].items()}, path)
    return path


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("missing", "does not exist"),
        ("directory", "is a directory, not a single-file checkpoint"),
        ("wrong suffix", "is not a checkpoint file: valid suffixes are .safetensors, .ckpt"),
        ("junk safetensors", "is not a readable safetensors file"),
        ("junk ckpt", "is not a PyTorch checkpoint"),
        ("pickled object", "NotATensor), which is not unpickled"),
        ("lora", "is a LoRA, not a checkpoint"),
        ("sdxl", "is an SDXL checkpoint"),
        ("diffusers unet", "one model in diffusers' layout"),
        ("unknown", "unknown key layout (keys start with backbone.layer1, head.fc)"),
        ("no vae", "lacks the VAE ('first_stage_model.')"),
    ],
)
def test_files_that_are_not_sd1_checkpoints_are_refused(tiny, tmp_path, kind, message):
    path = _file(tmp_path, tiny, kind)
    with pytest.raises(CheckpointError) as error:
        load_single_file(path, config=tiny.config)
    assert message in str(error.value)
    if kind in ("unknown", "no vae"):  # says what a checkpoint holds
        assert "'model.diffusion_model.'" in str(error.value) and "'cond_stage_model.transformer.'" in str(error.value)


def test_no_config_offline_is_refused_with_how_to_give_one(tiny, tmp_path):
    path = shutil.copy(tiny.files[".safetensors"], tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError) as error:
        load_single_file(path)
    message = str(error.value)
    assert "no diffusers config" in message and "stable-diffusion-v1-5/stable-diffusion-v1-5" in message
    assert "config=DIR (txt2img: --config DIR)" in message and "unet/config.json" in message


def test_bad_configs_are_refused(tiny, tmp_path):
    path = tiny.files[".safetensors"]
    with pytest.raises(CheckpointError, match="is not a directory"):
        load_single_file(path, config=tmp_path / "nowhere")
    partial = shutil.copytree(tiny.config, tmp_path / "partial")
    shutil.rmtree(partial / "tokenizer")
    (partial / "unet" / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"lacks unet/config.json, tokenizer: give a diffusers pipeline"):
        load_single_file(path, config=partial)
    # A config of another architecture (the UNet twice as wide): diffusers' shape error, named.
    other = rp.sd_pipeline(tmp_path / "build")
    other.unet = type(other.unet)(**{**rp._unet_kwargs("tiny"), "block_out_channels": (16, 32)})
    with pytest.raises(CheckpointError, match="does not load with the config .*expected shape"):
        load_single_file(path, config=write_config_dir(other, tmp_path / "wide"))


def test_a_checkpoint_lacking_a_weight_is_refused_not_left_on_meta(tiny, tmp_path):
    """diffusers builds the text encoder on the meta device and leaves a weight the file lacks
    there, without an error: the loader checks."""
    state = original_state_dict(tiny.pipe)
    del state[CLIP + "text_model.final_layer_norm.weight"]
    save_file(state, tmp_path / "partial.safetensors")
    with pytest.raises(CheckpointError, match=r"no weights for 1 tensor\(s\).*text_encoder.final_layer_norm.weight"):
        load_single_file(tmp_path / "partial.safetensors", config=tiny.config)


def test_txt2img_loads_a_checkpoint_file(tiny):
    assert_same_weights(tiny.pipe, txt2img.load_pipeline(tiny.files[".ckpt"], config=tiny.config))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "{file}"], "error: no diffusers config for"),
        (["--model", "{file}", "--config", "{root}/nowhere"], "nowhere' is not a directory"),
        (["--model", "{config}", "--config", "{config}"], "--config is for a checkpoint file"),
        (["--model", "{root}/junk.ckpt"], "is not a PyTorch checkpoint"),
    ],
)
def test_txt2img_command_line_refuses_what_it_cannot_load(tiny, tmp_path, capsys, args, message):
    file = shutil.copy(tiny.files[".safetensors"], tmp_path / "model.safetensors")
    (tmp_path / "junk.ckpt").write_text("not a checkpoint")
    args = [a.format(file=file, root=tmp_path, config=tiny.config) for a in args]
    assert txt2img.main([*args, "--prompt", "a cat"]) == 2
    assert message in capsys.readouterr().err


def test_txt2img_refuses_an_inpainting_checkpoint(tmp_path):
    original = rp.sd_pipeline(tmp_path / "build", kind="inpaint")
    path = write_single_file(original, tmp_path / "inpaint.safetensors")
    with pytest.raises(txt2img.InputError, match="is a StableDiffusionInpaintPipeline checkpoint: this app"):
        txt2img.load_pipeline(path, config=write_config_dir(original, tmp_path / "config"))
