"""A transformers causal LM as a function of flat tensors: the graph GenAI's decoder IR is made from.

OpenVINO GenAI runs a decoder whose KV cache is model state, one variable per layer's keys and per
layer's values. ``torch.export`` cannot trace transformers' cache objects as inputs, so the model is
wrapped: the past keys and values come in as plain ``[batch, kv_heads, past, head_dim]`` tensors, a
``DynamicCache`` is rebuilt from them inside the traced function, and the cache the model returns is
flattened again. The KV layout (layers, heads, head size, dtype) is read off one eager step rather
than off the config, since architectures name and derive those numbers differently (multi-query
Falcon, Gemma's explicit ``head_dim``, Phi-3's fused projections).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import torch
from torch.export import Dim


@dataclasses.dataclass(frozen=True)
class KVLayout:
    """The shape of one layer's cached keys (values have the same) and how many layers cache."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype

    def names(self) -> tuple[list[str], list[str]]:
        """The past inputs' and present outputs' names, keys and values of each layer in turn:
        optimum-intel's names, which GenAI tools and users recognise in an IR."""
        past = [f"past_key_values.{i}.{kind}" for i in range(self.layers) for kind in ("key", "value")]
        present = [f"present.{i}.{kind}" for i in range(self.layers) for kind in ("key", "value")]
        return past, present


def _cache_of(output: Any) -> Any:
    """The cache a model returned; transformers 5 renamed ``past_key_values`` to ``cache``."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def _flatten(cache: Any) -> list[torch.Tensor]:
    flat: list[torch.Tensor] = []
    for layer in cache.layers:
        flat += [layer.keys, layer.values]
    return flat


def _cache_keyword(model: torch.nn.Module) -> str:
    """The forward's name for the cache argument (``cache`` in transformers 5, formerly ``past_key_values``)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class FlatKVDecoder(torch.nn.Module):
    """``model`` with its KV cache passed and returned as flat tensors (keys and values of each layer).

    Every layer's cache is a full ``DynamicLayer`` that grows by concatenation, also in models with
    sliding-window layers (Mistral, Gemma 2/3): GenAI keeps the whole history in the state, and the
    model's sliding-window masks work on absolute positions, so only the masked keys are extra.
    """

    def __init__(self, model: torch.nn.Module, layers: int):
        super().__init__()
        self.model = model
        self.layers = layers
        params = inspect.signature(model.forward).parameters
        self.takes_positions = "position_ids" in params
        self.cache_keyword = _cache_keyword(model)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        past: list[torch.Tensor],
    ) -> tuple[torch.Tensor, ...]:
        from transformers import DynamicCache

        cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(self.layers)])
        kwargs: dict[str, Any] = {self.cache_keyword: cache}
        if self.takes_positions:
            kwargs["position_ids"] = position_ids
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True, **kwargs)
        return (out.logits, *_flatten(_cache_of(out)))


def kv_layout(model: torch.nn.Module) -> KVLayout:
    """The model's KV cache layout, from one eager step over two tokens."""
    from transformers import DynamicCache

    ids = torch.zeros(1, 2, dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, **{_cache_keyword(model): DynamicCache()})
    flat = _flatten(_cache_of(out))
    if not flat:
        raise ValueError(
            f"{type(model).__name__} returned no KV cache: export_llm needs a decoder that caches keys and values"
        )
    keys = flat[0]
    if keys.dim() != 4 or any(t.shape != keys.shape for t in flat):
        shapes = sorted({tuple(t.shape) for t in flat})
        raise ValueError(
            f"{type(model).__name__} caches tensors of shapes {shapes}; export_llm needs every layer's keys and "
            "values as [batch, kv_heads, length, head_dim] of one shape"
        )
    return KVLayout(len(flat) // 2, keys.shape[1], keys.shape[3], keys.dtype)


def example_inputs(layout: KVLayout, vocab: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Example arguments and their dynamic shapes for ``torch.export``.

    Batch, new tokens and past length are all symbolic; the examples use sizes of at least 2 so that
    none is specialised (torch.export fixes sizes 0 and 1). The attention mask's length is
    ``past + new`` in every call GenAI makes; it gets a size of its own (``Dim.AUTO``) because
    ``Dim`` arithmetic cannot add two dims, and torch.export relates it to the others by itself.
    """
    batch, seq, past = 2, 3, 4
    ids = torch.randint(0, vocab, (batch, seq))
    mask = torch.ones(batch, past + seq, dtype=torch.long)
    positions = torch.arange(past, past + seq).expand(batch, seq).contiguous()
    kv_shape = (batch, layout.kv_heads, past, layout.head_dim)
    cache = [torch.zeros(kv_shape, dtype=layout.dtype) for _ in range(2 * layout.layers)]
    b, s, p = Dim("batch"), Dim("seq"), Dim("past")
    shapes = {
        "input_ids": {0: b, 1: s},
        "attention_mask": {0: b, 1: Dim.AUTO},
        "position_ids": {0: b, 1: s},
        "past": [{0: b, 2: p}] * len(cache),
    }
    return (ids, mask, positions, cache), shapes
