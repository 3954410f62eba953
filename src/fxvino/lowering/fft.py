"""Complex tensors and FFTs: ``_fft_r2c``, ``_fft_c2r``, ``_fft_c2c`` on OpenVINO's DFT family.

OpenVINO has no complex element type; its DFT, IDFT, RDFT and IRDFT carry complex values as
a trailing dimension of 2 (real, imaginary). fxvino does the same for every complex tensor: a
complex64 graph input arrives as ``view_as_real`` of itself, a complex output leaves through
``view_as_complex`` (runtime.py), and the nodes between use the complex lowerings registered
here (``registry.COMPLEX``), which know the extra dimension. A node that touches a complex tensor
and has no complex lowering stays in PyTorch with that reason.

Scaling: OpenVINO's forward transforms are unnormalised and its inverse ones divide by the
signal size ``n``; PyTorch passes a normalisation mode (0: none, 1: 1/sqrt(n), 2: 1/n) that applies
to whichever direction. The inverse results are multiplied back by ``n`` first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import REGISTRY, lowers_complex

aten = torch.ops.aten


def _crank(node: torch.fx.Node, i: int = 0) -> int:
    """Rank of the complex (or real) tensor argument ``i`` as torch sees it."""
    return h.meta(node.args[i]).dim()


def _signal_size(sizes: Mapping[int, Any] | Sequence[Any], dims: list[int]) -> ov.Output:
    """Product of ``sizes`` over ``dims`` as an f32 scalar (sizes may be symbolic Outputs)."""
    parts = [sizes[d] for d in dims]
    if all(isinstance(p, int) for p in parts):
        return h.const(float(math.prod(parts)), torch.float32)
    n = h.const(1, torch.int64)
    for p in parts:
        n = ops.multiply(n, h.i64(p)).output(0)
    return h.cast(n, torch.float32)


def _sizes(node: torch.fx.Node, x, complex_input: bool) -> list:
    """torch-visible sizes of argument 0: ints where static, i64 scalars where symbolic."""
    r = _crank(node)
    static = h.static_shape(x)[:r] if complex_input else h.static_shape(x)
    return [s if s is not None else h.dim(x, d) for d, s in enumerate(static)]


def _normalize(y, n, normalization: int):
    if normalization == 1:
        return ops.divide(y, ops.sqrt(n)).output(0)
    if normalization == 2:
        return ops.divide(y, n).output(0)
    return y


@lowers_complex(aten._fft_r2c.default)
def fft_r2c(ctx, node, x, dim, normalization, onesided):
    r = _crank(node)
    dims = h.norm_dims(dim, r)
    x = h.cast(x, torch.float32)
    axes = h.const(dims, torch.int64)
    if onesided:
        y = ops.rdft(x, axes).output(0)
    else:  # the full spectrum: a complex transform of x + 0i
        y = ops.dft(_real_to_complex(x), axes).output(0)
    return _normalize(y, _signal_size(_sizes(node, x, False), dims), normalization)


@lowers_complex(aten._fft_c2c.default)
def fft_c2c(ctx, node, x, dim, normalization, forward):
    r = _crank(node)
    dims = h.norm_dims(dim, r)
    axes = h.const(dims, torch.int64)
    n = _signal_size(_sizes(node, x, True), dims)
    if forward:
        y = ops.dft(x, axes).output(0)
    else:
        y = ops.multiply(ops.idft(x, axes), n).output(0)  # undo IDFT's 1/n
    return _normalize(y, n, normalization)


@lowers_complex(aten._fft_c2r.default)
def fft_c2r(ctx, node, x, dim, normalization, last_dim_size):
    r = _crank(node)
    dims = h.norm_dims(dim, r)
    sizes = _sizes(node, x, True)
    out_sizes = [sizes[d] for d in dims[:-1]] + [last_dim_size]
    signal = h.as_shape(out_sizes)
    y = ops.irdft(x, h.const(dims, torch.int64), signal).output(0)
    n = _signal_size({**dict(enumerate(sizes)), dims[-1]: last_dim_size}, dims)
    return _normalize(ops.multiply(y, n).output(0), n, normalization)


def _real_to_complex(x):
    return _pair(x, ops.multiply(x, h.const(0.0, torch.float32)).output(0))


def _pair(real, imag):
    """(real, imag) -> [..., 2]."""
    return ops.concat([h.unsqueeze(real, -1), h.unsqueeze(imag, -1)], -1).output(0)


# ------------------------------------------------------------------ complex values between FFTs


@lowers_complex(aten.view_as_real.default, aten.view_as_complex.default, aten.clone.default, aten.alias.default)
def same_carrier(ctx, node, x, *args, **kwargs):
    """These only relabel: a complex tensor already travels as its view_as_real."""
    return x


@lowers_complex(aten.complex.default)
def complex_(ctx, node, real, imag):
    real, imag = h.cast(real, torch.float32), h.cast(imag, torch.float32)
    shape = h.broadcast_shape(real, imag)
    return _pair(ops.broadcast(real, shape).output(0), ops.broadcast(imag, shape).output(0))


@lowers_complex(aten._conj.default, aten._conj_physical.default, aten.conj_physical.default)
def conj(ctx, node, x):
    return ops.multiply(x, h.const([1.0, -1.0], torch.float32)).output(0)


def _to_copy_ok(node: torch.fx.Node) -> str | None:
    if not h.meta(node).dtype.is_complex:
        return "a complex tensor converted to a real dtype drops its imaginary part; kept in PyTorch"
    return None


@lowers_complex(aten._to_copy.default, validator=_to_copy_ok)
def to_copy(ctx, node, x, **kwargs):
    if h.meta(node.args[0]).dtype.is_complex:
        return x
    return _real_to_complex(h.cast(x, torch.float32))


def _shifted(node: torch.fx.Node, d: int, extra: int = 0) -> int:
    """A torch dim of the complex tensor as a (non-negative) dim of its carrier."""
    return h.norm_dim(d, _crank(node) + extra)


@lowers_complex(aten.slice.Tensor)
def slice_(ctx, node, x, dim=0, start=None, end=None, step=1):
    return REGISTRY[aten.slice.Tensor].fn(ctx, node, x, _shifted(node, dim), start, end, step)


@lowers_complex(aten.squeeze.dims, aten.squeeze.dim)
def squeeze(ctx, node, x, dim):
    dims = [dim] if isinstance(dim, int) else list(dim)
    keep = [d for d in (_shifted(node, d) for d in dims) if h.static_shape(x)[d] == 1]
    return h.squeeze(x, keep) if keep else x


@lowers_complex(aten.unsqueeze.default)
def unsqueeze(ctx, node, x, dim):
    return h.unsqueeze(x, _shifted(node, dim, extra=1))


@lowers_complex(aten.permute.default)
def permute(ctx, node, x, dims):
    r = _crank(node)
    return h.transpose(x, [h.norm_dim(d, r) for d in dims] + [r])


@lowers_complex(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(ctx, node, x, size):
    return h.reshape(x, [*size, 2])


@lowers_complex(aten.constant_pad_nd.default)
def constant_pad_nd(ctx, node, x, pad, value=0):
    if value:
        raise NotImplementedError("a non-zero complex padding value")
    return REGISTRY[aten.constant_pad_nd.default].fn(ctx, node, x, [0, 0, *pad], 0)
