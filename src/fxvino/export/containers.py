"""Containers of other libraries that an exported call takes or returns, known to pytree.

transformers' ``DynamicCache`` (a decoder's KV cache, returned with ``use_cache=True`` and
taken as ``past_key_values``) is not a pytree node until
``transformers.integrations.executorch.register_dynamic_cache_export_support()`` registers it;
until then torch.export refuses it in a result ("not a known type") and a saved structure that
holds it cannot be rebuilt. Registering is transformers' own support for torch.export, and it
is done only where transformers is imported already: the model or the saved structure needs it.
"""

from __future__ import annotations

import logging
import sys

logger = logging.getLogger("fxvino")


def register_known_containers() -> None:
    """Register transformers' ``DynamicCache`` with pytree if transformers is imported (idempotent)."""
    if "transformers" not in sys.modules:
        return
    try:
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError as e:  # a transformers without it: DynamicCache stays unknown, as before
        logger.debug("fxvino.export: transformers has no DynamicCache export support: %s", e)
        return
    try:
        register_dynamic_cache_export_support()  # its own guard swallows "already registered"
    except ValueError as e:  # registered by someone else under another serialized name
        logger.debug("fxvino.export: DynamicCache is registered with pytree already: %s", e)
