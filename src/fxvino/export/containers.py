"""Containers of other libraries that an exported call takes or returns, known to pytree.

transformers' ``DynamicCache`` (a decoder's KV cache, returned with ``use_cache=True`` and
taken as ``past_key_values``) is not a pytree node until
``transformers.integrations.executorch.register_dynamic_cache_export_support()`` registers it;
until then torch.export refuses it in a result ("not a known type") and a saved structure that
holds it cannot be rebuilt. Registering is transformers' own support for torch.export, and it
is done only where transformers is imported already: the model or the saved structure needs it.

An encoder-decoder's cache, ``EncoderDecoderCache``, holds two caches (its self-attention one
and its cross-attention one, usually ``DynamicCache``s); transformers registers no pytree node
for it, so fxvino does: its children are the two caches, named by their attributes.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import torch.fx._pytree as fx_pytree
import torch.utils._pytree as pytree

logger = logging.getLogger("fxvino")

# An EncoderDecoderCache's children, in order: the attribute names and the constructor's arguments.
_ENCODER_DECODER_FIELDS = ["self_attention_cache", "cross_attention_cache"]


def register_known_containers() -> None:
    """Register transformers' ``DynamicCache`` and ``EncoderDecoderCache`` with pytree if
    transformers is imported (idempotent)."""
    if "transformers" not in sys.modules:
        return
    try:
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError as e:  # a transformers without it: DynamicCache stays unknown, as before
        logger.debug("fxvino.export: transformers has no DynamicCache export support: %s", e)
    else:
        try:
            register_dynamic_cache_export_support()  # its own guard swallows "already registered"
        except ValueError as e:  # registered by someone else under another serialized name
            logger.debug("fxvino.export: DynamicCache is registered with pytree already: %s", e)
    _register_encoder_decoder_cache()


def _register_encoder_decoder_cache() -> None:
    try:
        from transformers.cache_utils import EncoderDecoderCache
    except ImportError as e:  # a transformers without it
        logger.debug("fxvino.export: transformers has no EncoderDecoderCache: %s", e)
        return
    if EncoderDecoderCache in pytree.SUPPORTED_NODES:  # by an earlier call, or by someone else
        return
    try:
        pytree.register_pytree_node(
            EncoderDecoderCache,
            _flatten_encoder_decoder_cache,
            _unflatten_encoder_decoder_cache,
            serialized_type_name=f"{EncoderDecoderCache.__module__}.{EncoderDecoderCache.__name__}",
            flatten_with_keys_fn=_flatten_encoder_decoder_cache_with_keys,
        )
    except ValueError as e:  # registered meanwhile (another thread)
        logger.debug("fxvino.export: EncoderDecoderCache is registered with pytree already: %s", e)
        return
    fx_pytree.register_pytree_flatten_spec(
        EncoderDecoderCache, lambda cache, spec: _flatten_encoder_decoder_cache(cache)[0]
    )


def _flatten_encoder_decoder_cache(cache: Any) -> tuple[list[Any], list[str]]:
    return [getattr(cache, f) for f in _ENCODER_DECODER_FIELDS], list(_ENCODER_DECODER_FIELDS)


def _flatten_encoder_decoder_cache_with_keys(cache: Any) -> tuple[list[tuple[Any, Any]], list[str]]:
    children, context = _flatten_encoder_decoder_cache(cache)
    return [(pytree.MappingKey(k), c) for k, c in zip(context, children, strict=True)], context


def _unflatten_encoder_decoder_cache(children: Any, context: Any) -> Any:
    from transformers.cache_utils import EncoderDecoderCache

    caches = dict(zip(context, children, strict=True))
    return EncoderDecoderCache(*(caches[f] for f in _ENCODER_DECODER_FIELDS))
