"""Cache keys for compiled partitions that cannot go stale.

A key is a hash of everything that decides what OpenVINO computes for a partition:

- the partition's FX graph in canonical form (its generated Python code, which names every op,
  argument and constant attribute) and each placeholder's metadata (dtype, shape with symbolic
  dimensions spelled as their sympy expressions, strides, device);
- a fingerprint of every constant's bytes (frozen weights and tensors held by ``get_attr``
  nodes): same architecture with other weights is another key;
- every option that changes the compiled model (device, the OpenVINO compile config, which
  holds mode and precision and the user's ``config``, decompositions, disabled ops);
- the fxvino, OpenVINO and torch versions, and this key format's version.

Names such as the Dynamo compile id are left out on purpose: the same model compiled in another
process, or as another frame, must find its entry.

Weight fingerprints hash all bytes with BLAKE3 (the ``blake3`` package): a cryptographic hash,
so no two checkpoints anyone could make share a key, and the fastest one available here. On the
3.44 GB of a Stable Diffusion 1.5 UNet (AMX Xeon, two threads, weights in memory) BLAKE3 takes
0.43-0.53 s where SHA-256 took 2.4-2.6 s (SHA-NI; 1.25 vs 5.4 GB/s per thread); first touches
of weights that ``from_pretrained`` maps lazily are 0.42 s of either. crc32 or xxHash would be
faster still but are not collision-resistant (32 bits are too few; XXH3 collisions can be
crafted), and "never stale" must hold for weights made to collide too. Both release the GIL,
so tensors are hashed on two threads. The hash's name is part of the key (``_versions``), so
entries made with SHA-256 (key format 2) are simply never found again and age out by LRU.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

import openvino as ov
import torch
import torch.fx

from fxvino._version import __version__
from fxvino.devices import widened_types
from fxvino.options import Options
from fxvino.utils.fx import fetch_attr

# Raised when entries made by earlier code must not be served: the key format changed, or a
# lowering's results did (2: MaxPool values and indices of windows of -inf or NaN now equal
# PyTorch's, where older entries hold OpenVINO's own; 3: weights hashed with BLAKE3, not SHA-256;
# 4: a training graph's Results listed in the order their values are computed, which frees
# hundreds of MB of the plugin's memory: training.results_in_execution_order; 5: training graphs
# compiled without snippets, and a graph's random-stream keys computed in one vector; 6:
# convolution gradients padded to exactly their shapes, so older entries compute rows they crop;
# 7: a CNN's training graphs pass activations channels-last, and older backwards take NCHW;
# 8: weight gradients over 32+ channels are one product over gathered windows, up to 32 MB of them;
# 9: those products and pointwise ones contract samples and pixels together, with no batch sum;
# 10: training batch norm as x * scale + shift, strided input gradients with output padding, and
# max-pool gradients scattered in rows; 11: max-pool indices by one scan over the window offsets;
# 12: a > b lowered as b < a, and clamps that keep NaN, so older graphs compare NaN wrongly;
# 13: exact float fmod/remainder/floor division, NaN through exp/sign/bool casts, atan2 of
# signed zeros and infinities, bf16 constants rounded to nearest, 8-bit integer arithmetic that
# wraps; 14: f16, and bf16 on CPUs without bf16 kernels, rounded where PyTorch rounds them, and
# MoE grouped products on a grid of the runs instead of every row times every expert; 15: casts of
# float constants to 16 bits made by torch, where older entries hold OpenVINO's folding of them,
# and 16-bit batch norm with frozen statistics folded into its convolution or as one scale and
# shift rounded once; 16: casts of values computed from float constants alone (a transposed or
# scaled weight) rounded as torch rounds, where older entries hold OpenVINO's folding of them;
# 17: integer division exact beyond 2^24, exact integer pow and average pools, bf16 group norm in
# f32, and casts to bf16 rounded in graphs compiled without snippets, which older entries truncate;
# 18: log1p, expm1, erf and softplus accurate near zero, 16-bit composites and bf16 division in f32;
# 19: an element of a reference-loop op (log, sin, atan, ...) counts its cost in adds toward a
# tiny graph's work, where older entries keep the one thread of a tiny graph; 20: searchsorted
# with a ``side`` torch rejects runs in PyTorch and raises, where older entries search as "left";
# 21: inference graphs return the checks of their indices (lowering/eager_checks.py), which
# older entries lack; 22: training graphs return them too, integer divisors are checked
# nonzero, put, masked_scatter and embedding_bag's offsets are checked, and 8-bit quotients and
# remainders compute in i32, where older entries' wrapped; 23: int64 results check that they
# stay inside int32, and folded ``empty`` ops are zeros; 24: normal's deviation and
# searchsorted's sorter are checked; 25: int64 negation, abs and accumulating scatters check
# that they stay inside int32; 26: casts of f16 to bf16 rounded where the plugin truncates them;
# 27: 7-bit quantize/dequantize pairs as a Clamp and a 256-level FakeQuantize, which run their
# products in int8, where older entries' run in f32; 28: f16 constants cast to bf16 and f16
# weights widened before a 16-bit cast are cast as torch casts them, where older entries' were
# truncated, and their rounding folds whole; 29: bf16 constants' infinities guarded where the
# plugin clamps them to FLT_MAX (static and dynamic graphs), and chains of constants whose
# fusion cancels or leaves the range kept apart, which older entries' lose or fuse; 30: float
# divisions kept IEEE's where the plugin made them a multiply by the reciprocal; 31: 16-bit
# products and quotients by a scalar, leaky slopes, rsqrt and running sums computed as ATen's
# kernels compute them, where older entries' were a step off; 32: 16-bit composites computed in
# f32 (erf, log1p, softplus, ...) leave their casts unrounded inside a chain, where older entries'
# round them, and 16-bit addmm/addmv/addbmm scale in f32, addbmm rounds each batch's sum,
# layer_norm, embedding_bag and var compute in f32, where older entries' were a step off).
KEY_FORMAT = 32
WEIGHTS_HASH = "blake3"
# Below this many bytes a thread pool costs more than it saves.
_PARALLEL_BYTES = 64 << 20


def _versions() -> dict[str, str]:
    return {
        "format": str(KEY_FORMAT),
        "weights_hash": WEIGHTS_HASH,
        "fxvino": __version__,
        "openvino": ov.get_version(),
        "torch": torch.__version__,
    }


def describe_value(v: Any) -> Any:
    """A JSON-able description of a placeholder's meta value (a fake tensor, SymInt or scalar)."""
    if isinstance(v, torch.Tensor):
        return {
            "dtype": str(v.dtype),
            "shape": [str(d) for d in v.shape],
            "stride": [str(s) for s in v.stride()] if v.layout == torch.strided else None,
            "device": str(v.device),
            "layout": str(v.layout),
            "requires_grad": bool(v.requires_grad),
        }
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return {"sym": type(v).__name__, "expr": str(v.node.expr)}
    if v is None or isinstance(v, (bool, int, float, str)):
        return {"py": repr(v)}
    return {"other": type(v).__name__}


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The bytes of a real tensor, in C order (a contiguous copy only when needed)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if not t.is_contiguous():
        t = t.contiguous()
    if t.numel() == 0:
        return memoryview(b"")
    flat = t.reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return memoryview(flat.numpy())


def fingerprint_tensors(tensors: Iterable[torch.Tensor]) -> list[str]:
    """BLAKE3 (256 bits) of each tensor's bytes, with its dtype and shape (so a reshape is not a hit)."""
    import blake3

    items = list(tensors)
    total = sum(t.numel() * t.element_size() for t in items)
    # One big tensor: BLAKE3's own threads split it; many: two threads take a tensor each.
    threads = blake3.blake3.AUTO if len(items) == 1 and total >= _PARALLEL_BYTES else 1

    def one(t: torch.Tensor) -> str:
        h = blake3.blake3(f"{t.dtype}|{tuple(t.shape)}|".encode(), max_threads=threads)
        h.update(tensor_bytes(t))
        return h.hexdigest()

    if total < _PARALLEL_BYTES or len(items) < 2:
        return [one(t) for t in items]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="fxvino-hash") as pool:
        return list(pool.map(one, items))


def options_material(options: Options) -> dict[str, Any]:
    """The options that change the compiled model (the cache location and size do not)."""
    cfg = {k: str(v) for k, v in options.compile_config().items() if k != "CACHE_DIR"}
    return {
        "device": options.device,
        "config": dict(sorted(cfg.items())),
        "precision": options.precision,
        "mode": options.mode,
        "decompositions": sorted(str(op) for op in options.decompositions),
        "disabled_ops": sorted(str(op) for op in options.disabled_ops),
        "aot_autograd": options.aot_autograd,
        # The device's CPU class decides which 16-bit types a graph rounds by arithmetic.
        "widened": sorted(str(t) for t in widened_types(options.device)),
    }


def graph_material(sub: torch.fx.GraphModule) -> dict[str, Any]:
    """The partition graph in canonical form: its code and each placeholder's meta."""
    placeholders = [
        {"name": n.name, "val": describe_value(n.meta.get("val"))} for n in sub.graph.find_nodes(op="placeholder")
    ]
    return {"code": sub.code, "placeholders": placeholders}


def graph_key(sub: torch.fx.GraphModule, options: Options) -> str:
    """SHA-256 of everything but the constants' values: graph, placeholder meta, options,
    versions. Cheap; it names the family of entries a lookup may start verifying early."""
    inner = {n.target: fetch_attr(sub, n.target) for n in sub.graph.find_nodes(op="get_attr")}
    material = {
        "versions": _versions(),
        "options": options_material(options),
        "graph": graph_material(sub),
        "constant_names": sorted(k for k, v in inner.items() if isinstance(v, torch.Tensor)),
        "other_attrs": {k: repr(v) for k, v in sorted(inner.items()) if not isinstance(v, torch.Tensor)},
    }
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def weights_key(sub: torch.fx.GraphModule, constants: Mapping[int, torch.Tensor]) -> str:
    """SHA-256 over the fingerprints of every constant: frozen inputs by position, attributes by name."""
    inner = {n.target: fetch_attr(sub, n.target) for n in sub.graph.find_nodes(op="get_attr")}
    named: list[tuple[str, torch.Tensor]] = [(f"arg{i}", constants[i]) for i in sorted(constants)]
    named += [(f"attr:{k}", v) for k, v in sorted(inner.items()) if isinstance(v, torch.Tensor)]
    digests = fingerprint_tensors(t for _, t in named)
    text = json.dumps([[name, d] for (name, _), d in zip(named, digests, strict=True)], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


# A key is 32 hex digits (128 bits) of each part: the graph part is a file-name prefix shared by
# the entries of one architecture, the weights part tells its checkpoints apart.
PREFIX_LEN = 32


def make_key(gkey: str, wkey: str) -> str:
    return gkey[:PREFIX_LEN] + wkey[:PREFIX_LEN]


def partition_key(sub: torch.fx.GraphModule, constants: Mapping[int, torch.Tensor], options: Options) -> str:
    """The cache key (64 hex digits) of one partition compiled with ``options``."""
    return make_key(graph_key(sub, options), weights_key(sub, constants))
