"""Diffusers pipelines with random weights, built from configs: tests, the benchmark, the web UI's
test and the example use them, and nothing is downloaded.

``size="tiny"`` gives models of a few hundred kB (the shapes diffusers' own fast tests use);
``size="sd15"`` the real SD 1.5 UNet/VAE/CLIP layout (~1.07B parameters) for the benchmark.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch


# The byte-to-character table of byte-level BPE (GPT-2/CLIP): every byte is a printable character.
def _byte_chars() -> list[str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_clip_tokenizer(directory: Path | str, vocab_size: int = 1000) -> Path:
    """A CLIP tokenizer's files (vocab.json, merges.txt) with a character-level vocabulary: every
    byte and its end-of-word form, a few merges of common letter pairs, then the special tokens.
    Any text tokenizes (to characters), which is all random-weight pipelines need."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    chars = _byte_chars()
    merges = [("t", "h"), ("e", "r"), ("i", "n"), ("a", "n"), ("o", "n"), ("th", "e</w>")]
    # The special tokens at 512/513, where the text encoder configs below expect them.
    tokens = chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"] + [a + b for a, b in merges]
    tokens = tokens[:vocab_size]
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (directory / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    return directory


def clip_tokenizer(directory: Path | str, model_max_length: int = 77) -> Any:
    from transformers import CLIPTokenizer

    directory = write_clip_tokenizer(directory)
    return CLIPTokenizer(
        vocab=str(directory / "vocab.json"), merges=str(directory / "merges.txt"), model_max_length=model_max_length
    )


def _text_encoder(size: str, projection: bool = False, hidden: int | None = None) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    if size == "tiny":
        config = CLIPTextConfig(
            bos_token_id=512,
            eos_token_id=513,
            pad_token_id=513,
            hidden_size=hidden or 32,
            intermediate_size=37,
            layer_norm_eps=1e-5,
            num_attention_heads=4,
            num_hidden_layers=2,
            vocab_size=1000,
            projection_dim=32,
            hidden_act="gelu",
        )
    else:  # SD 1.5's CLIP ViT-L/14 text tower
        config = CLIPTextConfig(
            bos_token_id=512,
            eos_token_id=513,
            pad_token_id=513,
            hidden_size=768,
            intermediate_size=3072,
            num_attention_heads=12,
            num_hidden_layers=12,
            vocab_size=49408,
            projection_dim=768,
        )
    cls = CLIPTextModelWithProjection if projection else CLIPTextModel
    return cls(config).eval()


def _vae(size: str) -> Any:
    from diffusers import AutoencoderKL

    if size == "tiny":
        return AutoencoderKL(
            block_out_channels=[8, 8],
            in_channels=3,
            out_channels=3,
            latent_channels=4,
            norm_num_groups=2,
            down_block_types=["DownEncoderBlock2D"] * 2,
            up_block_types=["UpDecoderBlock2D"] * 2,
        ).eval()
    return AutoencoderKL(
        block_out_channels=[128, 256, 512, 512],
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        layers_per_block=2,
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        sample_size=512,
    ).eval()


def _unet_kwargs(size: str) -> dict[str, Any]:
    if size == "tiny":
        return dict(
            block_out_channels=(8, 16),
            layers_per_block=1,
            sample_size=16,
            in_channels=4,
            out_channels=4,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=32,
            norm_num_groups=2,
            attention_head_dim=4,
        )
    return dict(  # SD 1.5
        block_out_channels=(320, 640, 1280, 1280),
        layers_per_block=2,
        sample_size=64,
        in_channels=4,
        out_channels=4,
        down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3,
        cross_attention_dim=768,
        attention_head_dim=8,
    )


def _scheduler() -> Any:
    from diffusers import EulerDiscreteScheduler

    return EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear")


def sd_pipeline(workdir: Path | str, size: str = "tiny", kind: str = "txt2img", seed: int = 0) -> Any:
    """A Stable Diffusion 1.x pipeline (``kind``: txt2img, img2img, inpaint) with random weights."""
    import diffusers
    from diffusers import UNet2DConditionModel

    torch.manual_seed(seed)
    kwargs = _unet_kwargs(size)
    if kind == "inpaint":
        kwargs["in_channels"] = 9  # latents, masked-image latents, mask
    cls = {
        "txt2img": diffusers.StableDiffusionPipeline,
        "img2img": diffusers.StableDiffusionImg2ImgPipeline,
        "inpaint": diffusers.StableDiffusionInpaintPipeline,
    }[kind]
    return cls(
        unet=UNet2DConditionModel(**kwargs).eval(),
        vae=_vae(size),
        text_encoder=_text_encoder(size),
        tokenizer=clip_tokenizer(Path(workdir) / "tokenizer"),
        scheduler=_scheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )


def sdxl_pipeline(workdir: Path | str, seed: int = 0) -> Any:
    """A tiny SDXL pipeline: two text encoders (the second with projection), added time ids."""
    from diffusers import StableDiffusionXLPipeline, UNet2DConditionModel

    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16),
        layers_per_block=1,
        sample_size=16,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4),
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        transformer_layers_per_block=(1, 2),
        projection_class_embeddings_input_dim=80,
        cross_attention_dim=64,
        norm_num_groups=2,
    ).eval()
    return StableDiffusionXLPipeline(
        unet=unet,
        vae=_vae("tiny"),
        text_encoder=_text_encoder("tiny"),
        text_encoder_2=_text_encoder("tiny", projection=True),
        tokenizer=clip_tokenizer(Path(workdir) / "tokenizer"),
        tokenizer_2=clip_tokenizer(Path(workdir) / "tokenizer_2"),
        scheduler=_scheduler(),
    )


def controlnet_pipeline(workdir: Path | str, seed: int = 0) -> Any:
    """A tiny SD 1.x ControlNet pipeline (the ControlNet built from the UNet's layout)."""
    from diffusers import ControlNetModel, StableDiffusionControlNetPipeline

    base = sd_pipeline(workdir, seed=seed)
    torch.manual_seed(seed + 1)
    controlnet = ControlNetModel.from_unet(base.unet, conditioning_embedding_out_channels=(8, 16)).eval()
    with torch.no_grad():  # from_unet zero-initialises its output convs: make them matter
        for p in controlnet.parameters():
            if not p.any():
                p.normal_(0, 0.1)
    return StableDiffusionControlNetPipeline(**base.components, controlnet=controlnet)


def pixart_pipeline(workdir: Path | str, seed: int = 0) -> Any:
    """A tiny PixArt-alpha pipeline: a DiT transformer with a T5 text encoder."""
    from diffusers import PixArtAlphaPipeline, PixArtTransformer2DModel
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(seed)
    transformer = PixArtTransformer2DModel(
        sample_size=8,
        num_layers=2,
        patch_size=2,
        attention_head_dim=8,
        num_attention_heads=3,
        caption_channels=32,
        in_channels=4,
        cross_attention_dim=24,
        out_channels=8,
        attention_bias=True,
        activation_fn="gelu-approximate",
        num_embeds_ada_norm=1000,
        norm_type="ada_norm_single",
        norm_elementwise_affine=False,
        norm_eps=1e-6,
    ).eval()
    t5 = T5EncoderModel(
        T5Config(vocab_size=1000, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, decoder_start_token_id=0)
    ).eval()
    return PixArtAlphaPipeline(
        transformer=transformer,
        vae=_vae("tiny"),
        text_encoder=t5,
        tokenizer=_t5_tokenizer(Path(workdir)),
        scheduler=_scheduler_ddim(),
    )


def _scheduler_ddim() -> Any:
    from diffusers import DDIMScheduler

    return DDIMScheduler()


def _t5_tokenizer(workdir: Path) -> Any:
    """A T5 tokenizer over a character vocabulary (a word-level tokenizers model, no sentencepiece file)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    for c in _byte_chars():
        vocab.setdefault(c, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", model_max_length=32
    )


def random_lora(pipe: Any, directory: Path | str, seed: int = 1, rank: int = 4, std: float = 0.3) -> Path:
    """A LoRA for ``pipe``'s UNet with random (non-zero) weights, saved where ``load_lora_weights``
    reads it. Built on a copy: ``pipe`` is left as it was."""
    import copy

    from diffusers.utils import convert_state_dict_to_diffusers
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    torch.manual_seed(seed)
    unet = copy.deepcopy(pipe.unet)
    targets = ["to_q", "to_k", "to_v", "to_out.0"]
    unet.add_adapter(LoraConfig(r=rank, lora_alpha=rank, target_modules=targets, init_lora_weights=False))
    with torch.no_grad():
        for name, p in unet.named_parameters():
            if "lora_" in name:
                p.normal_(0, std)
    layers = convert_state_dict_to_diffusers(get_peft_model_state_dict(unet))
    type(pipe).save_lora_weights(directory, unet_lora_layers=layers)
    return Path(directory)
