"""The compiler's side of the model cache: look a partition up before lowering it, store it after.

A hit skips lowering and compiling; a graph whose hits keep costing more than compiling it is set
aside (``ModelCache.strike``), and its later lookups return at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import openvino as ov
import torch
import torch.fx

from fxvino.cache.entry import specs_to_json
from fxvino.cache.store import ASIDE_STRIKES, CachedPartition, Prefetch, cache_for

logger = logging.getLogger("fxvino")

# A hit must cost this much more than compiling (seconds, and a fraction of the compile) before
# its graph is set aside: below that the two are within run-to-run noise, and a permanent
# decision should not rest on noise (a small model's hit and compile differ by milliseconds).
ASIDE_MARGIN_SECONDS = 0.5
ASIDE_MARGIN_FRACTION = 0.1


def slower_than_compiling(hit_seconds: float, compile_seconds: float) -> bool:
    """Whether a hit that took ``hit_seconds`` lost to compiling (``compile_seconds``) by more
    than run-to-run noise (``ASIDE_MARGIN_*``)."""
    margin = max(ASIDE_MARGIN_SECONDS, ASIDE_MARGIN_FRACTION * compile_seconds)
    return hit_seconds > compile_seconds + margin


def lookup(
    options: Any, sub: torch.fx.GraphModule, constants: Mapping[int, torch.Tensor]
) -> tuple[str | None, CachedPartition | None]:
    """(key, hit) for a partition; (None, None) if no key can be made (logged, never raised) or
    if its graph is set aside (compile it, do not store it).

    A hit costs hashing the weights, checking the blob (skipped when stamped) and
    ``import_model``. The graph part of the key is cheap and known first, so the newest entry of
    this architecture is read and checked on another thread while the weights are hashed; if
    the weights name another entry, that check is cancelled.

    The hit's whole cost (this function's wall time) is compared with the lowering + compile
    time recorded in the entry: a hit that lost is a strike against its graph, a hit that paid
    off clears them, and ``ASIDE_STRIKES`` in a row set the graph aside (``ModelCache.strike``):
    later lookups of it return (None, None) before hashing anything.
    """
    from fxvino.cache.key import PREFIX_LEN, graph_key, make_key, weights_key

    cache = cache_for(options.cache_dir)
    t0 = time.perf_counter()
    prefetched: Prefetch | None = None
    try:
        gkey = graph_key(sub, options)
        prefix = gkey[:PREFIX_LEN]
        if cache.is_aside(prefix):
            cache._count("aside")
            return None, None
        candidates = cache.with_prefix(prefix)
        if candidates:
            prefetched = cache.prefetch(candidates[0])
        key = make_key(gkey, weights_key(sub, constants))
    except Exception as e:  # noqa: BLE001 - no key, no caching; the model still compiles
        if prefetched is not None:
            prefetched.cancel()
        logger.warning("fxvino: no cache key for this partition (%s: %s); compiling without cache", type(e).__name__, e)
        return None, None
    if prefetched is not None and prefetched.path != cache.path(key):
        prefetched.cancel()
    t1 = time.perf_counter()
    hit = cache.load(key, options.device, options.compile_config, prefetched, options.page_out_weights)
    t2 = time.perf_counter()
    cache._count("key_seconds", t1 - t0)
    cache._count("load_seconds", t2 - t1)
    if hit is None:
        cache.note_miss(key, t2)
    elif hit.compile_seconds is not None and slower_than_compiling(t2 - t0, hit.compile_seconds):
        figures = {
            "hit_seconds": round(t2 - t0, 3),
            "key_seconds": round(t1 - t0, 3),
            "compile_seconds": round(hit.compile_seconds, 3),
            "blob_bytes": int(hit.mapping.shape[0]),
            "partition": hit.partition,
        }
        if cache.strike(prefix, figures):
            logger.warning(
                "fxvino: loading partition %s from the model cache took %.2f s (weights key %.2f s), compiling "
                "it %.2f s, in %d processes in a row: its graph is compiled without the cache from now on "
                "(%s; `fxvino cache clear` forgets this)",
                hit.partition,
                t2 - t0,
                t1 - t0,
                hit.compile_seconds,
                ASIDE_STRIKES,
                cache.aside_path(prefix).name,
            )
    elif hit.compile_seconds is not None:
        cache.acquit(prefix)
    return key, hit


def store(
    options: Any, key: str, compiled: ov.CompiledModel, lowered: Any, name: str, run_config: Mapping[str, str]
) -> None:
    """Store a freshly compiled partition (never raises; a partition that cannot be stored is
    only counted). The entry records the lowering + compile seconds since ``lookup`` missed, and
    ``run_config``, the compile properties the blob does not keep (the import passes them again)."""
    cache = cache_for(options.cache_dir)
    t0 = time.perf_counter()
    missed = cache.pop_miss(key)
    specs = specs_to_json(lowered.inputs, lowered.outputs, lowered.runtime_positions)
    if specs is None:
        logger.info("fxvino: partition %s returns a Python value JSON cannot hold exactly; not cached", name)
        cache._count("skipped")
        return
    info: dict[str, Any] = {"partition": name, "device": options.device}
    if run_config:
        info["run_config"] = dict(run_config)
    if missed is not None:
        info["compile_seconds"] = round(t0 - missed, 4)
    cache.store(key, compiled, specs, options.cache_size, info)
    cache._count("store_seconds", time.perf_counter() - t0)
