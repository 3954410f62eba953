"""Stable Diffusion 1.x single-file checkpoints (the ``.safetensors``/``.ckpt`` files WebUI users
have, in the original CompVis/LDM key layout) loaded offline as a diffusers pipeline.

diffusers' ``from_single_file`` converts the weights itself but takes the models' architecture
(and the tokenizer and scheduler) from a diffusers config, which it fetches from the Hugging Face
hub unless it is given a local one; offline that fails, and with ``local_files_only=True`` and
nothing cached it even overrides the flag and tries the network. :func:`load_single_file` finds a
local config first (see there), checks the file before diffusers reads it (so a LoRA, an SDXL
file or a broken download is named as such instead of failing deep inside the conversion), and
checks the result: a weight the checkpoint lacks would otherwise be left on the meta device
without an error (diffusers does this for the text encoder).
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

# Where an SD 1.x checkpoint keeps each model (the original training code's attribute names).
UNET_PREFIX = "model.diffusion_model."
VAE_PREFIX = "first_stage_model."
TEXT_ENCODER_PREFIX = "cond_stage_model.transformer."
SD1_PREFIXES = {"UNet": UNET_PREFIX, "VAE": VAE_PREFIX, "CLIP text encoder": TEXT_ENCODER_PREFIX}
# The UNet's first convolution: 4 input channels for text-to-image, 9 for inpainting.
UNET_CONV_IN = UNET_PREFIX + "input_blocks.0.0.weight"

SAFETENSORS_SUFFIXES = (".safetensors",)
PICKLE_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin")

# What a config directory must hold: diffusers reads these, the weights come from the checkpoint.
CONFIG_FILES = (
    "model_index.json",
    "unet/config.json",
    "vae/config.json",
    "text_encoder/config.json",
    "scheduler/scheduler_config.json",
    "tokenizer",
)
CONFIG_HELP = (
    "a diffusers pipeline directory of the same architecture, weights not needed: model_index.json, "
    "unet/config.json, vae/config.json, text_encoder/config.json, tokenizer/ and scheduler/ "
    "(for SD 1.5 those files of stable-diffusion-v1-5/stable-diffusion-v1-5, ~1 MB)"
)


class CheckpointError(ValueError):
    """A single-file checkpoint (or its config) that cannot be loaded; the message names what was
    wrong and what would be valid."""


def load_single_file(path: str | os.PathLike, config: str | os.PathLike | None = None) -> Any:
    """The Stable Diffusion 1.x pipeline stored in the single-file checkpoint ``path``, loaded
    without the network.

    ``path`` is a ``.safetensors`` file or a PyTorch pickle (``.ckpt``; read with
    ``weights_only=True``, which runs no code from the file) in the original layout: UNet under
    ``model.diffusion_model.``, VAE under ``first_stage_model.``, CLIP text encoder under
    ``cond_stage_model.transformer.``.

    ``config`` is a diffusers pipeline directory describing the same architecture (the models'
    ``config.json`` files, tokenizer, scheduler; its weights, if any, are not read). Without it the
    first of these is used:

    1. the checkpoint's own directory, if it is a diffusers pipeline directory (a hub repository
       such as stable-diffusion-v1-5 holds both);
    2. a directory beside the checkpoint named after it (``v1-5.safetensors`` -> ``v1-5/``);
    3. the Hugging Face cache's copy of the repository diffusers would fetch for this checkpoint
       (stable-diffusion-v1-5, or its inpainting model for a 9-channel UNet), if it is there.

    The result is a ``StableDiffusionPipeline`` (``StableDiffusionInpaintPipeline`` for an
    inpainting UNet) in float32 (fp16 files are upcast; fxvino's ``precision`` option chooses
    the inference precision), with no safety checker. Raises :class:`CheckpointError`.
    """
    import diffusers
    from diffusers.loaders.single_file_utils import SingleFileComponentError

    path = Path(path)
    keys, in_channels = _read_keys(path)
    _check_layout(path, keys)
    inpainting = in_channels == 9
    config_dir = _find_config(path, config, inpainting)
    cls = diffusers.StableDiffusionInpaintPipeline if inpainting else diffusers.StableDiffusionPipeline
    try:
        pipe = cls.from_single_file(
            str(path),
            config=str(config_dir),
            local_files_only=True,
            safety_checker=None,
            feature_extractor=None,
            requires_safety_checker=False,
        )
    except (ValueError, RuntimeError, KeyError, OSError, SingleFileComponentError) as e:
        raise CheckpointError(
            f"{str(path)!r} does not load with the config {str(config_dir)!r} ({type(e).__name__}: "
            f"{_first_line(e)}): the config must describe the checkpoint's architecture; give {CONFIG_HELP}"
        ) from e
    missing = [
        f"{name}.{key}"
        for name in ("unet", "vae", "text_encoder")
        for key, tensor in getattr(pipe, name).state_dict().items()
        if tensor.is_meta
    ]
    if missing:
        raise CheckpointError(
            f"{str(path)!r} has no weights for {len(missing)} tensor(s) the config {str(config_dir)!r} "
            f"describes, e.g. {', '.join(missing[:3])}: the checkpoint is incomplete or of another architecture"
        )
    return pipe


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or repr(e)
    return text.splitlines()[0][:300]


def _read_keys(path: Path) -> tuple[list[str], int | None]:
    """The checkpoint's tensor names and its UNet's input channels, reading no weights (a
    safetensors header; a pickle memory-mapped), so that a bad file fails here with a clear
    message instead of inside diffusers' conversion."""
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist")
    if path.is_dir():
        raise CheckpointError(
            f"{str(path)!r} is a directory, not a single-file checkpoint: load a diffusers pipeline "
            "directory with from_pretrained"
        )
    suffix = path.suffix.lower()
    valid = ", ".join(SAFETENSORS_SUFFIXES + PICKLE_SUFFIXES)
    if suffix in SAFETENSORS_SUFFIXES:
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                keys = list(f.keys())
                in_channels = f.get_slice(UNET_CONV_IN).get_shape()[1] if UNET_CONV_IN in keys else None
        except Exception as e:  # safetensors' own error type, or an OS error: the file is unreadable
            raise CheckpointError(
                f"{str(path)!r} is not a readable safetensors file ({_first_line(e)}): an incomplete "
                "download, or another format with this suffix"
            ) from e
        return keys, in_channels
    if suffix not in PICKLE_SUFFIXES:
        raise CheckpointError(f"{str(path)!r} is not a checkpoint file: valid suffixes are {valid}")
    import torch

    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except Exception as e:
        unsafe = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(e))
        if unsafe:
            raise CheckpointError(
                f"{str(path)!r} holds a Python object other than tensors ({unsafe[1]}), which is not "
                "unpickled: loading it could run code from the file. Convert the checkpoint to "
                ".safetensors (only if you trust its source), then load that"
            ) from e
        raise CheckpointError(
            f"{str(path)!r} is not a PyTorch checkpoint ({type(e).__name__}: {_first_line(e)}); valid: "
            f"a safetensors file or a torch.save pickle of tensors ({valid})"
        ) from e
    while isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]  # the training code's {"state_dict": ..., "global_step": ...}
    if not isinstance(state, dict) or not any(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{str(path)!r} holds no state dict of tensors (a {type(state).__name__})")
    conv_in = state.get(UNET_CONV_IN)
    return [k for k in state if isinstance(k, str)], conv_in.shape[1] if conv_in is not None else None


# Other layouts users keep beside their checkpoints, named so that the error says what the file is.
_OTHER_LAYOUTS = (
    (
        ("lora_unet_", "lora_te", ".lora_down.", ".lora_A.", ".lora.down."),
        "a LoRA, not a checkpoint: load it on a pipeline with load_lora_weights (the txt2img app: --lora)",
    ),
    (
        ("conditioner.embedders.",),
        "an SDXL checkpoint: load_single_file reads SD 1.x; diffusers.StableDiffusionXLPipeline"
        ".from_single_file(path, config=DIR) loads it, then fxvino.compile_pipeline",
    ),
    (
        ("cond_stage_model.model.",),
        "an SD 2.x checkpoint (OpenCLIP text encoder): load_single_file reads SD 1.x; diffusers."
        "StableDiffusionPipeline.from_single_file(path, config=DIR) loads it, then fxvino.compile_pipeline",
    ),
    (
        ("down_blocks.", "encoder.down_blocks.", "text_model.", "transformer_blocks."),
        "one model in diffusers' layout (a component of a pipeline directory), not a single-file checkpoint: "
        "load its pipeline with from_pretrained",
    ),
)


def _check_layout(path: Path, keys: Iterable[str]) -> None:
    """Refuse any layout but SD 1.x's, saying what the file is when it is a known other kind."""
    keys = list(keys)
    present = {name: any(k.startswith(prefix) for k in keys) for name, prefix in SD1_PREFIXES.items()}
    if all(present.values()):
        return
    for markers, what in _OTHER_LAYOUTS:
        if any(any(k.startswith(m) or (m.startswith(".") and m in k) for m in markers) for k in keys):
            raise CheckpointError(f"{str(path)!r} is {what}")
    expected = ", ".join(f"the {name} under {prefix!r}" for name, prefix in SD1_PREFIXES.items())
    if present[next(iter(SD1_PREFIXES))]:  # a UNet: a checkpoint with a model left out
        lacking = [f"the {name} ({SD1_PREFIXES[name]!r})" for name, ok in present.items() if not ok]
        raise CheckpointError(
            f"{str(path)!r} lacks {' and '.join(lacking)}: an SD 1.x single-file checkpoint holds {expected}"
        )
    prefixes = sorted({".".join(k.split(".")[:2]) for k in keys})
    shown = ", ".join(prefixes[:6]) + (f" (+{len(prefixes) - 6} more)" if len(prefixes) > 6 else "")
    raise CheckpointError(
        f"{str(path)!r} has an unknown key layout (keys start with {shown or 'nothing: it is empty'}): "
        f"an SD 1.x single-file checkpoint holds {expected}"
    )


def _find_config(path: Path, config: str | os.PathLike | None, inpainting: bool) -> Path:
    """The diffusers config directory to build the pipeline from (see :func:`load_single_file`)."""
    if config is not None:
        config = Path(config)
        _check_config_dir(config)
        return config
    beside = [path.parent, path.with_suffix("")]
    for candidate in beside:
        if (candidate / "model_index.json").is_file():
            _check_config_dir(candidate)
            return candidate
    repo = _default_repo(inpainting)
    cached = _hub_cache_dir(repo)
    if cached is not None:
        _check_config_dir(cached)
        return cached
    raise CheckpointError(
        f"no diffusers config for {str(path)!r} (looked in {str(beside[0])!r}, {str(beside[1])!r} and the Hugging "
        f"Face cache for {repo}) and it is not downloaded: give config=DIR (txt2img: --config DIR), {CONFIG_HELP}"
    )


def _check_config_dir(config: Path) -> None:
    if not config.is_dir():
        raise CheckpointError(f"config {str(config)!r} is not a directory: give {CONFIG_HELP}")
    missing = [name for name in CONFIG_FILES if not (config / name).exists()]
    if missing:
        raise CheckpointError(f"config {str(config)!r} lacks {', '.join(missing)}: give {CONFIG_HELP}")


def _default_repo(inpainting: bool) -> str:
    """The hub repository whose config diffusers' ``from_single_file`` would fetch for an SD 1.x file."""
    from diffusers.loaders.single_file_utils import DIFFUSERS_DEFAULT_PIPELINE_PATHS

    return DIFFUSERS_DEFAULT_PIPELINE_PATHS["inpainting" if inpainting else "v1"]["pretrained_model_name_or_path"]


def _hub_cache_dir(repo: str) -> Path | None:
    """The cached snapshot of ``repo`` holding its ``model_index.json``, looked up on disk only."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, "model_index.json")
    return Path(found).parent if isinstance(found, str) else None
