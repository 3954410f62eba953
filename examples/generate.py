"""Generate text with a Hugging Face causal LM on fxvino and print the text and tokens/s.

    python examples/generate.py /path/to/checkpoint --prompt "The capital of France is"
    python examples/generate.py llama-tiny --new-tokens 64        # random weights from a config
    python examples/generate.py /path/to/checkpoint --eager       # the same run in plain PyTorch

A checkpoint directory (``save_pretrained`` output, with its tokenizer) is loaded as is. A config
name builds that architecture with random weights (no download): its "text" is token ids, since
there is no tokenizer to decode them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

CONFIGS = {
    "llama-tiny": (
        "LlamaConfig",
        dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
    ),
    "llama-small": (
        "LlamaConfig",
        dict(
            hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4
        ),
    ),
    "qwen2-tiny": (
        "Qwen2Config",
        dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1),
    ),
}


def load(model: str):
    """(model, tokenizer or None) from a checkpoint directory or a config name."""
    import transformers

    if Path(model).is_dir():
        tokenizer = None
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(model)
        except (OSError, ValueError) as e:
            print(f"(no tokenizer in {model}: {e}; printing token ids)", file=sys.stderr)
        return transformers.AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval(), tokenizer
    if model not in CONFIGS:
        valid = ", ".join(CONFIGS)
        raise SystemExit(f"'{model}' is neither a checkpoint directory nor a known config name; valid names: {valid}")
    config_cls, sizes = CONFIGS[model]
    config = getattr(transformers, config_cls)(vocab_size=32000, **sizes)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval(), None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="checkpoint directory or one of: " + ", ".join(CONFIGS))
    parser.add_argument("--prompt", default="Once upon a time")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--device", default="CPU", help="OpenVINO device")
    parser.add_argument("--eager", action="store_true", help="run plain PyTorch instead, for comparison")
    parser.add_argument(
        "--cache", choices=["static", "dynamic"], default="static", help="KV cache (static: the faster on fxvino)"
    )
    args = parser.parse_args(argv)

    model, tokenizer = load(args.model)
    if tokenizer is not None:
        inputs = tokenizer(args.prompt, return_tensors="pt")
    else:  # no tokenizer: the prompt's bytes as token ids
        ids = torch.tensor([[3 + b % (model.config.vocab_size - 3) for b in args.prompt.encode()]])
        inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if not args.eager:
        import fxvino  # noqa: F401 - registers backend="fxvino"

        model.forward = torch.compile(model.forward, backend="fxvino", options={"device": args.device})
    kwargs = dict(max_new_tokens=args.new_tokens, do_sample=False, pad_token_id=model.config.eos_token_id or 0)
    if args.cache == "static":
        kwargs["cache_implementation"] = "static"
    with torch.no_grad():
        start = time.perf_counter()
        # The same call: a StaticCache's size (prompt + new tokens) is part of the compiled shapes.
        model.generate(**inputs, **kwargs)
        warm = time.perf_counter() - start  # compiles prefill and the decode graphs
        start = time.perf_counter()
        out = model.generate(**inputs, **kwargs)
        seconds = time.perf_counter() - start
    new = out[0, inputs["input_ids"].shape[1] :]
    print(tokenizer.decode(new, skip_special_tokens=True) if tokenizer is not None else new.tolist())
    backend = "eager PyTorch" if args.eager else f"fxvino on {args.device}"
    print(
        f"{len(new)} tokens in {seconds:.2f} s: {len(new) / seconds:.1f} tokens/s with {backend}"
        f" (first, compiling call: {warm:.1f} s)",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
