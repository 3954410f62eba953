"""Test support: a diffusers Stable Diffusion 1.x pipeline written as ONE single-file checkpoint in
the original (CompVis LDM / WebUI) key layout, so the single-file loader is tested on the format
users have without downloading one.

The layout, per component (diffusers name -> original name):

- UNet under ``model.diffusion_model.``: the down blocks are numbered ``input_blocks.N`` (N=0 is
  ``conv_in``; each level has ``layers_per_block`` slots, then one for its downsampler ``0.op``), a
  slot holding the ResNet at ``.0`` and the attention at ``.1``; the mid block is
  ``middle_block.0/1/2`` (ResNet, attention, ResNet); the up blocks are ``output_blocks.N``
  (``layers_per_block + 1`` slots per level, the upsampler after the slot's ResNet and attention).
  ResNets rename their layers (``norm1`` -> ``in_layers.0``, ``conv1`` -> ``in_layers.2``, ...);
  transformer blocks keep diffusers' names.
- VAE under ``first_stage_model.``: ``down.N.block.M`` / ``up.N.block.M`` with the decoder's
  levels in reverse order, ``mid.block_1/2`` and ``mid.attn_1`` whose q/k/v/proj_out are 1x1
  convolutions (4-D weights).
- CLIP text model under ``cond_stage_model.transformer.``: transformers' own names, including
  ``text_model.`` (which transformers >= 5.6 no longer has in ``CLIPTextModel``'s state dict).

Only the block types of SD 1.x (``DownBlock2D``/``CrossAttnDownBlock2D`` and their up
counterparts, ``UNetMidBlock2DCrossAttn``) are handled: anything else raises, so a config change
cannot produce a silently wrong file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

UNET, VAE, CLIP = "model.diffusion_model.", "first_stage_model.", "cond_stage_model.transformer."

_UNET_TOP = {
    "conv_in": "input_blocks.0.0",
    "time_embedding.linear_1": "time_embed.0",
    "time_embedding.linear_2": "time_embed.2",
    "conv_norm_out": "out.0",
    "conv_out": "out.2",
}
_UNET_RESNET = {
    "norm1": "in_layers.0",
    "conv1": "in_layers.2",
    "time_emb_proj": "emb_layers.1",
    "norm2": "out_layers.0",
    "conv2": "out_layers.3",
    "conv_shortcut": "skip_connection",
}
_VAE_ATTENTION = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}


def _resnet(rest: str, names: dict[str, str]) -> str:
    layer, _, param = rest.rpartition(".")
    if layer not in names:
        raise KeyError(f"unexpected ResNet layer {layer!r}")
    return f"{names[layer]}.{param}"


def unet_to_original(unet: Any) -> dict[str, torch.Tensor]:
    """The UNet's state dict with original key names (without the ``model.diffusion_model.`` prefix)."""
    config = unet.config
    per_level = config.layers_per_block
    if not isinstance(per_level, int):
        raise NotImplementedError("one layers_per_block for every level (SD 1.x)")
    up_has_attention = ["CrossAttn" in t for t in config.up_block_types]
    out: dict[str, torch.Tensor] = {}
    for key, value in unet.state_dict().items():
        layer, _, param = key.rpartition(".")
        if layer in _UNET_TOP:
            out[f"{_UNET_TOP[layer]}.{param}"] = value
            continue
        if m := re.fullmatch(r"down_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.+)", key):
            level, kind, i, rest = int(m[1]), m[2], int(m[3]), m[4]
            slot = 1 + level * (per_level + 1) + i
            new = f"{slot}.0.{_resnet(rest, _UNET_RESNET)}" if kind == "resnets" else f"{slot}.1.{rest}"
            out[f"input_blocks.{new}"] = value
        elif m := re.fullmatch(r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(\w+)", key):
            out[f"input_blocks.{(int(m[1]) + 1) * (per_level + 1)}.0.op.{m[2]}"] = value
        elif m := re.fullmatch(r"mid_block\.resnets\.(\d+)\.(.+)", key):
            out[f"middle_block.{2 * int(m[1])}.{_resnet(m[2], _UNET_RESNET)}"] = value
        elif m := re.fullmatch(r"mid_block\.attentions\.0\.(.+)", key):
            out[f"middle_block.1.{m[1]}"] = value
        elif m := re.fullmatch(r"up_blocks\.(\d+)\.(resnets|attentions)\.(\d+)\.(.+)", key):
            level, kind, i, rest = int(m[1]), m[2], int(m[3]), m[4]
            slot = level * (per_level + 1) + i
            new = f"{slot}.0.{_resnet(rest, _UNET_RESNET)}" if kind == "resnets" else f"{slot}.1.{rest}"
            out[f"output_blocks.{new}"] = value
        elif m := re.fullmatch(r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(\w+)", key):
            level = int(m[1])
            slot = level * (per_level + 1) + per_level  # the level's last slot
            out[f"output_blocks.{slot}.{2 if up_has_attention[level] else 1}.conv.{m[2]}"] = value
        else:
            raise KeyError(f"UNet key {key!r} has no SD 1.x original name")
    return out


def vae_to_original(vae: Any) -> dict[str, torch.Tensor]:
    """The VAE's state dict with original key names (without the ``first_stage_model.`` prefix)."""
    levels = len(vae.config.up_block_types)
    out: dict[str, torch.Tensor] = {}
    for key, value in vae.state_dict().items():
        new = key
        if m := re.fullmatch(r"encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", key):
            new = f"encoder.down.{m[1]}.block.{m[2]}.{m[3]}"
        elif m := re.fullmatch(r"encoder\.down_blocks\.(\d+)\.downsamplers\.0\.conv\.(\w+)", key):
            new = f"encoder.down.{m[1]}.downsample.conv.{m[2]}"
        elif m := re.fullmatch(r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.(.+)", key):
            new = f"decoder.up.{levels - 1 - int(m[1])}.block.{m[2]}.{m[3]}"
        elif m := re.fullmatch(r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.conv\.(\w+)", key):
            new = f"decoder.up.{levels - 1 - int(m[1])}.upsample.conv.{m[2]}"
        elif m := re.fullmatch(r"(encoder|decoder)\.mid_block\.resnets\.(\d+)\.(.+)", key):
            new = f"{m[1]}.mid.block_{int(m[2]) + 1}.{m[3]}"
        elif m := re.fullmatch(r"(encoder|decoder)\.mid_block\.attentions\.0\.(.+)\.(\w+)", key):
            new = f"{m[1]}.mid.attn_1.{_VAE_ATTENTION[m[2]]}.{m[3]}"
            if value.ndim == 2:  # a Linear in diffusers, a 1x1 convolution in the original
                value = value[:, :, None, None]
        elif m := re.fullmatch(r"(encoder|decoder)\.conv_norm_out\.(\w+)", key):
            new = f"{m[1]}.norm_out.{m[2]}"
        elif not re.fullmatch(r"(encoder|decoder)\.conv_(in|out)\.\w+|(post_)?quant_conv\.\w+", key):
            raise KeyError(f"VAE key {key!r} has no SD 1.x original name")
        new = new.replace("conv_shortcut", "nin_shortcut")
        out[new] = value
    return out


def clip_to_original(text_encoder: Any) -> dict[str, torch.Tensor]:
    """The CLIP text model's state dict as the original stores it (``text_model.`` included, and the
    ``position_ids`` buffer real SD 1.x checkpoints carry)."""
    state = text_encoder.state_dict()
    flat = not any(k.startswith("text_model.") for k in state)
    out = {("text_model." if flat else "") + k: v for k, v in state.items()}
    positions = text_encoder.config.max_position_embeddings
    out.setdefault("text_model.embeddings.position_ids", torch.arange(positions)[None])
    return out


def original_state_dict(pipe: Any, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The whole pipeline in the original single-file layout, plus the noise schedule buffers the
    original training code saved (ignored by loaders, present in real files)."""
    out: dict[str, torch.Tensor] = {}
    for prefix, part in ((UNET, unet_to_original(pipe.unet)), (VAE, vae_to_original(pipe.vae))):
        out.update({prefix + k: v for k, v in part.items()})
    out.update({CLIP + k: v for k, v in clip_to_original(pipe.text_encoder).items()})
    if dtype is not None:
        out = {k: v.to(dtype) if v.is_floating_point() else v for k, v in out.items()}
    out["betas"] = pipe.scheduler.betas.clone()
    out["alphas_cumprod"] = pipe.scheduler.alphas_cumprod.clone()
    return {k: v.detach().contiguous().clone() for k, v in out.items()}


def write_single_file(pipe: Any, path: Path | str, dtype: torch.dtype | None = None) -> Path:
    """Write ``pipe`` as one original-layout checkpoint: ``.safetensors``, or a ``.ckpt`` pickle
    holding ``{"state_dict": ..., "global_step": ...}`` as the original training code saved it."""
    path = Path(path)
    state = original_state_dict(pipe, dtype)
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(state, path)
    else:
        torch.save({"state_dict": state, "global_step": 0}, path)
    return path


def write_config_dir(pipe: Any, directory: Path | str) -> Path:
    """A diffusers pipeline directory without weights (model_index.json, the components' configs,
    tokenizer, scheduler): what a single-file checkpoint needs beside it to load offline."""
    directory = Path(directory)
    pipe.save_pretrained(directory)
    weights = [f for f in directory.rglob("*") if f.suffix in (".safetensors", ".bin")]
    assert weights, "save_pretrained wrote no weights to remove"
    for f in weights:
        f.unlink()
    return directory
