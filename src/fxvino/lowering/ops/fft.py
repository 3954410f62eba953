"""Complex tensors and FFTs: ``_fft_r2c``, ``_fft_c2r``, ``_fft_c2c`` on OpenVINO's DFT family.

OpenVINO has no complex element type; its DFT, IDFT, RDFT and IRDFT carry complex values as
a trailing dimension of 2 (real, imaginary). fxvino does the same for every complex tensor: a
complex64 graph input arrives as ``view_as_real`` of itself, a complex output leaves through
``view_as_complex`` (runtime/compiled_partition.py), and the nodes between use the complex lowerings registered
here (``registry.COMPLEX``), which know the extra dimension. A node that touches a complex tensor
and has no complex lowering stays in PyTorch with that reason.

Accuracy: the CPU plugin's transforms are fast radix-2 FFTs only for power-of-two sizes. Other
sizes are computed as plain sums whose error grows quickly (complex DFT of 100 points, inputs in
[-9, 9]: 3e-3 off, PyTorch 2e-5; 1,000 points: 9e-2 vs 1e-4). An axis of such a static size
is transformed instead as one MatMul with a twiddle matrix computed in float64 (5e-5 at 100
points), as long as the matrix stays small (``MATMUL_LIMIT``); the plugin's op takes the rest.

Scaling: every step below computes the unnormalised transform (OpenVINO's inverse ops divide
by the signal size ``n``: they are multiplied back), then PyTorch's normalisation mode (0: none,
1: 1/sqrt(n), 2: 1/n) is applied once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import REGISTRY, lowers_complex

aten = torch.ops.aten

# Largest twiddle matrix (elements) built for one axis: 4 MiB of float32. A complex transform
# of n points needs (2n)^2, so n <= 512; a real one n * (n + 2), so n <= 1023.
MATMUL_LIMIT = 1 << 20


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


def _sizes(x: ov.Output, r: int) -> list:
    """The first ``r`` sizes of ``x`` (torch's dims): ints where static, i64 scalars where symbolic."""
    return [s if s is not None else h.dim(x, d) for d, s in enumerate(h.static_shape(x)[:r])]


def _normalize(y, n, normalization: int):
    if normalization == 1:
        return ops.divide(y, ops.sqrt(n)).output(0)
    if normalization == 2:
        return ops.divide(y, n).output(0)
    return y


# ------------------------------------------------------------------ exact transforms of one axis


def _by_matmul(n: Any, elements: Callable[[int], int]) -> bool:
    """Whether an axis of size ``n`` is transformed with a twiddle matrix of ``elements(n)`` elements.

    Only static sizes qualify (the matrix is a constant), and powers of two stay with the plugin's FFT.
    """
    return isinstance(n, int) and n > 0 and n & (n - 1) != 0 and elements(n) <= MATMUL_LIMIT


def _c2c_elements(n: int) -> int:
    return (2 * n) ** 2


def _twiddles(n: int, rows: int, cols: int, sign: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``sign * 2 pi j k / n`` for j < rows, k < cols, in float64.

    ``j * k mod n`` is taken in integers first, so large products lose nothing.
    """
    jk = np.outer(np.arange(rows, dtype=np.int64), np.arange(cols, dtype=np.int64)) % n
    angle = sign * 2.0 * np.pi * jk / n
    return np.cos(angle), np.sin(angle)


def _c2c_matrix(n: int, forward: bool) -> np.ndarray:
    """[2n, 2n]: interleaved (re, im) in, interleaved out; y_k = sum_j x_j w^(jk)."""
    cos, sin = _twiddles(n, n, n, -1.0 if forward else 1.0)
    m = np.empty((2 * n, 2 * n))
    m[0::2, 0::2], m[0::2, 1::2] = cos, sin
    m[1::2, 0::2], m[1::2, 1::2] = -sin, cos
    return m


def _r2c_matrix(n: int, bins: int) -> np.ndarray:
    """[n, 2 * bins]: real in, the first ``bins`` interleaved frequencies out."""
    cos, sin = _twiddles(n, n, bins, -1.0)
    m = np.empty((n, 2 * bins))
    m[:, 0::2], m[:, 1::2] = cos, sin
    return m


def _c2r_matrix(bins: int, n: int) -> np.ndarray:
    """[2 * bins, n]: a Hermitian half-spectrum in, the real signal of ``n`` points out.

    Frequencies 0 < k < n/2 stand for themselves and their mirror (weight 2); the imaginary parts
    of the DC and Nyquist terms are ignored and frequencies past n/2 unused, as in PyTorch.
    """
    half = n // 2 + 1
    used = min(bins, half)
    cos, sin = _twiddles(n, used, n, 1.0)
    weight = np.full((used, 1), 2.0)
    weight[0] = 1.0
    if n % 2 == 0 and used == half:
        weight[-1] = 1.0
    sin[0] = 0.0
    if n % 2 == 0 and used == half:
        sin[-1] = 0.0
    m = np.zeros((2 * bins, n))
    m[0 : 2 * used : 2], m[1 : 2 * used : 2] = weight * cos, -weight * sin
    return m


def _along(x: ov.Output, d: int, r: int, matrix: np.ndarray, complex_in: bool, complex_out: bool) -> ov.Output:
    """Multiply torch dim ``d`` of ``x`` (rank ``r`` as torch sees it) by ``matrix``.

    The axis is moved last, a complex one flattened with its (re, im) pairs into one interleaved
    axis, so the whole transform is a single MatMul.
    """
    order = [i for i in range(r) if i != d] + [d]
    moved = order != list(range(r))
    if moved:
        x = h.transpose(x, order + [r] if complex_in else order)
    if complex_in:
        x = ops.reshape(x, h.const([0] * (r - 1) + [matrix.shape[0]], torch.int64), True).output(0)
    y = ops.matmul(x, h.const(matrix.astype(np.float32), torch.float32), False, False).output(0)
    if complex_out:
        y = ops.reshape(y, h.const([0] * (r - 1) + [matrix.shape[1] // 2, 2], torch.int64), True).output(0)
    if moved:
        back = [order.index(i) for i in range(r)]
        y = h.transpose(y, back + [r] if complex_out else back)
    return y


def _c2c(x: ov.Output, r: int, dims: list[int], forward: bool) -> ov.Output:
    """Unnormalised complex transform over ``dims``: twiddle MatMuls where exact, one DFT/IDFT for the rest."""
    sizes = _sizes(x, r)
    plugin = [d for d in dims if not _by_matmul(sizes[d], _c2c_elements)]
    for d in dims:
        if d not in plugin:
            x = _along(x, d, r, _c2c_matrix(sizes[d], forward), True, True)
    if plugin:
        axes = h.const(plugin, torch.int64)
        if forward:
            x = ops.dft(x, axes).output(0)
        else:  # undo IDFT's 1/n
            x = ops.multiply(ops.idft(x, axes), _signal_size(sizes, plugin)).output(0)
    return x


@lowers_complex(aten._fft_r2c.default)
def fft_r2c(ctx, node, x, dim, normalization, onesided):
    r = _crank(node)
    dims = h.norm_dims(dim, r)
    x = h.cast(x, torch.float32)
    sizes = _sizes(x, r)
    last = sizes[dims[-1]]
    if onesided:
        bins = last // 2 + 1 if isinstance(last, int) else None
        if bins is not None and _by_matmul(last, lambda n: n * 2 * bins):
            y = _c2c(_along(x, dims[-1], r, _r2c_matrix(last, bins), False, True), r, dims[:-1], True)
        elif all(not _by_matmul(sizes[d], _c2c_elements) for d in dims[:-1]):
            y = ops.rdft(x, h.const(dims, torch.int64)).output(0)
        else:
            y = _c2c(ops.rdft(x, h.const(dims[-1:], torch.int64)).output(0), r, dims[:-1], True)
    else:  # the full spectrum: one exact axis takes the real input, the rest are complex transforms
        exact = [d for d in dims if _by_matmul(sizes[d], lambda n: 2 * n * n)]
        if exact:
            first = exact[-1]
            y = _along(x, first, r, _r2c_matrix(sizes[first], sizes[first]), False, True)
            y = _c2c(y, r, [d for d in dims if d != first], True)
        else:
            y = ops.dft(_real_to_complex(x), h.const(dims, torch.int64)).output(0)
    return _normalize(y, _signal_size(sizes, dims), normalization)


@lowers_complex(aten._fft_c2c.default)
def fft_c2c(ctx, node, x, dim, normalization, forward):
    r = _crank(node)
    dims = h.norm_dims(dim, r)
    return _normalize(_c2c(x, r, dims, forward), _signal_size(_sizes(x, r), dims), normalization)


@lowers_complex(aten._fft_c2r.default)
def fft_c2r(ctx, node, x, dim, normalization, last_dim_size):
    r = _crank(node)
    dims = h.norm_dims(dim, r)
    sizes = _sizes(x, r)
    bins = sizes[dims[-1]]
    out_sizes = {**dict(enumerate(sizes)), dims[-1]: last_dim_size}
    n = _signal_size(out_sizes, dims)
    if isinstance(bins, int) and _by_matmul(last_dim_size, lambda n: 2 * bins * n):
        y = _c2c(x, r, dims[:-1], False)
        y = _along(y, dims[-1], r, _c2r_matrix(bins, last_dim_size), True, False)
    else:
        inner = dims if all(not _by_matmul(sizes[d], _c2c_elements) for d in dims[:-1]) else dims[-1:]
        y = _c2c(x, r, [d for d in dims if d not in inner], False)
        signal = h.as_shape([out_sizes[d] for d in inner])
        y = ops.irdft(y, h.const(inner, torch.int64), signal).output(0)
        y = ops.multiply(y, _signal_size(out_sizes, inner)).output(0)  # undo IRDFT's 1/n
    return _normalize(y, n, normalization)


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
