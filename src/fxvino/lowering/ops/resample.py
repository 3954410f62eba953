"""Resampling: upsample_* (nearest, nearest-exact, linear, cubic, antialiased), grid_sampler_2d/3d, col2im.

``upsample_*`` runs on OpenVINO's Interpolate-11 with the output size given ("sizes" mode)
whenever the source coordinates torch computes are the ones the size ratio gives: no scale
factor, an align_corners linear/cubic resize (which ignores it), or a scale factor whose
inverse is, in float32, the size ratio (every integer factor). Otherwise torch maps output to
input coordinates with ``1 / scale_factor``, which Interpolate's "scales" mode does not
reproduce exactly (it rounds its output size differently and divides instead of
multiplying); those resizes, and the antialiased ones (Interpolate's antialias is a different
filter), apply each axis's interpolation matrix, read off ATen's kernel at lowering time, as
Gathers of its taps (or one MatMul for wide filters). That path needs static spatial sizes.

The ATen overloads themselves never reach these lowerings through ``torch.compile``: torch
registers Python CompositeImplicitAutograd/Autograd kernels for the ``.vec`` and ``.default``
upsample overloads, which run while AOTAutograd traces (before any decomposition table). An
inference graph's ``F.interpolate`` arrives instead as ``fxvino::upsample`` (``capture/resample.py``),
which names the overload it stands for and is lowered by the same code; graphs that need gradients
hold the arange/index decomposition.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset9 as ops9
import openvino.opset11 as ops11
import openvino.opset15 as ops15
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.ops import float_mod
from fxvino.lowering.registry import lowers, lowers_named

aten = torch.ops.aten
F32 = torch.float32

NEAREST, NEAREST_EXACT, LINEAR, CUBIC = "nearest", "nearest-exact", "linear", "cubic"
# Antialiased resizes (PIL-style filters): Interpolate's antialias differs, always the exact path.
LINEAR_AA, CUBIC_AA = "linear-aa", "cubic-aa"

# op -> (mode, number of spatial dims)
_UPSAMPLE: dict[Any, tuple[str, int]] = {}
for _name, _mode in (("upsample_nearest{}d", NEAREST), ("_upsample_nearest_exact{}d", NEAREST_EXACT)):
    for _d in (1, 2, 3):
        _packet = getattr(aten, _name.format(_d))
        _UPSAMPLE[_packet.vec] = (_mode, _d)
        _UPSAMPLE[_packet.default] = (_mode, _d)
for _packet, _d in ((aten.upsample_linear1d, 1), (aten.upsample_bilinear2d, 2), (aten.upsample_trilinear3d, 3)):
    _UPSAMPLE[_packet.vec] = (LINEAR, _d)
    _UPSAMPLE[_packet.default] = (LINEAR, _d)
_UPSAMPLE[aten.upsample_bicubic2d.vec] = (CUBIC, 2)
_UPSAMPLE[aten.upsample_bicubic2d.default] = (CUBIC, 2)
_UPSAMPLE[aten._upsample_bilinear2d_aa.vec] = (LINEAR_AA, 2)
_UPSAMPLE[aten._upsample_bilinear2d_aa.default] = (LINEAR_AA, 2)
_UPSAMPLE[aten._upsample_bicubic2d_aa.vec] = (CUBIC_AA, 2)
_UPSAMPLE[aten._upsample_bicubic2d_aa.default] = (CUBIC_AA, 2)

_SCALE_NAMES = {1: ["scales"], 2: ["scales_h", "scales_w"], 3: ["scales_d", "scales_h", "scales_w"]}


def _bind(op, args, kwargs) -> dict[str, Any]:
    """The op's arguments by schema name, defaults filled in."""
    out = {}
    for i, a in enumerate(op._schema.arguments):
        if i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        else:
            out[a.name] = a.default_value if a.has_default_value() else None
    return out


@dataclasses.dataclass
class _Plan:
    mode: str
    spatial: int
    align_corners: bool
    scales: list[float | None]  # per spatial axis, what torch's kernel receives
    in_sizes: list[Any]  # ints, or SymInts when dynamic
    out_sizes: list[Any]
    fused: bool  # Interpolate "sizes" mode reproduces torch


# The op capture/resample.py makes of an inference graph's F.interpolate: (input, ATen packet name,
# output_size, scale_factors, align_corners or None for the nearest kinds).
WHOLE_INTERPOLATE = "fxvino.upsample.default"


def _resolved(node, args=None, kwargs=None) -> tuple[Any, dict[str, Any]]:
    """The ATen upsample overload a node computes and its arguments by schema name (``args``:
    the lowered ones, else the node's)."""
    args = node.args if args is None else args
    kwargs = node.kwargs if kwargs is None else kwargs
    if node.target in _UPSAMPLE:
        return node.target, _bind(node.target, args, kwargs)
    x, name, output_size, scale_factors, align_corners = args
    bound = {"input": x, "output_size": output_size, "scale_factors": scale_factors}
    if align_corners is not None:
        bound["align_corners"] = align_corners
    return getattr(aten, name).vec, bound


def plan_for(op, scales: list[float | None] | None, align: bool, in_sizes: list[Any], out_sizes: list[Any]) -> _Plan:
    """How ``op`` resizes ``in_sizes`` to ``out_sizes`` given the scales its kernel receives."""
    mode, spatial = _UPSAMPLE[op]
    scales = list(scales) if scales else [None] * spatial
    fused = all(_same_as_sizes(i, o, s, mode, align) for i, o, s in zip(in_sizes, out_sizes, scales, strict=True))
    return _Plan(mode, spatial, align, scales, list(in_sizes), list(out_sizes), fused)


def _plan(node) -> _Plan:
    op, a = _resolved(node)
    spatial = _UPSAMPLE[op][1]
    if "scale_factors" in a:
        scales = a["scale_factors"]
    else:
        scales = [a[n] for n in _SCALE_NAMES[spatial]]
    in_sizes = list(h.meta(node.args[0]).shape[-spatial:])
    out_sizes = list(h.meta(node).shape[-spatial:])
    return plan_for(op, scales, bool(a.get("align_corners") or False), in_sizes, out_sizes)


def _same_as_sizes(i, o, s, mode: str, align: bool) -> bool:
    """Whether torch's coordinate scale on this axis is the one the size ratio gives."""
    if mode in (LINEAR_AA, CUBIC_AA):
        return False
    if align and mode in (LINEAR, CUBIC):
        return True
    if s is None or s <= 0:
        return True
    if isinstance(i, int) and isinstance(o, int):
        return np.float32(1.0 / s) == np.float32(i) / np.float32(o)
    # Dynamic size: an integer factor gives o == i * s exactly, so i / o == 1 / s.
    return float(s).is_integer()


def declined(plan: _Plan, sized: bool) -> str | None:
    """Why a resize cannot run on OpenVINO (``sized``: the call gives its output size). The exact
    path needs static spatial sizes, and a dynamic output size is computed in-graph only for an
    integer scale factor (torch computes ``floor(size * scale)`` in double precision)."""
    static = all(isinstance(d, int) for d in plan.in_sizes + plan.out_sizes)
    if static:
        return None
    if plan.mode in (LINEAR_AA, CUBIC_AA):
        return "antialiased resize with dynamic spatial sizes"
    integer_scales = all(s is None or float(s).is_integer() for s in plan.scales)
    if plan.fused and (sized or integer_scales):
        return None
    return "a non-integer scale factor with dynamic spatial sizes"


def _upsample_ok(node) -> str | None:
    op, a = _resolved(node)
    if h.meta(node.args[0]).dim() != _UPSAMPLE[op][1] + 2:
        return f"expects a rank-{_UPSAMPLE[op][1] + 2} input"
    return declined(_plan(node), a.get("output_size") is not None)


# ----------------------------------------------------------------------------- torch's indices


def _axis_matrix(op, plan: _Plan, k: int, dtype: torch.dtype) -> np.ndarray:
    """The (out, in) interpolation matrix of spatial axis ``k``, read off ATen's own kernel.

    ATen's CPU kernels special-case some sizes per axis (same size: copy; twice the size:
    shift) and compute coordinates in the input's precision, so rather than re-deriving them
    the kernel resizes one-hot rows along axis ``k``; row ``j`` of the result is column ``j``
    of the matrix. The other axes keep their size (so the probe is the identity on them),
    capped at 2: the antialiased kernels take another path for a size-1 axis.
    """
    i, o = plan.in_sizes[k], plan.out_sizes[k]
    probe_dtype = dtype if dtype.is_floating_point else torch.float32
    others = [min(d, 2) for d in plan.in_sizes]
    shape = [i, 1, *others]
    shape[2 + k] = i
    line = [1] * (plan.spatial + 2)
    line[0], line[2 + k] = i, i
    basis = torch.eye(i, dtype=probe_dtype).reshape(line).expand(shape).contiguous()
    sizes = list(others)
    sizes[k] = o
    scales: list[float | None] = [None] * plan.spatial
    scales[k] = plan.scales[k]
    default = op.overloadpacket.default
    with torch.no_grad():
        if plan.mode in (NEAREST, NEAREST_EXACT):
            out = default(basis, sizes, *scales)
        else:
            out = default(basis, sizes, plan.align_corners, *scales)
    pick = [slice(None), 0] + [0] * plan.spatial
    pick[2 + k] = slice(None)
    return out[tuple(pick)].t().to(torch.float32).numpy()


_MAX_TAPS = 4  # wider filters (antialiased downscaling) are applied as one MatMul per axis


def _gather_resize(op, x, plan: _Plan):
    """Apply each axis's interpolation matrix: Gathers of its taps, or a MatMul when wide.

    A 16-bit input is resized in float32 and rounded once, as ATen's kernels compute it (their
    weights and sums are float32 for bf16 and f16); taps summed in bf16 were 1 ulp off eager's.
    """
    r = h.rank(x)
    out_dtype = h.dtype_of(x)
    dtype = h.opmath_dtype(out_dtype)
    x = h.cast(x, dtype)
    for k in range(plan.spatial):
        axis = r - plan.spatial + k
        matrix = _axis_matrix(op, plan, k, dtype)
        nonzero = matrix != 0
        width = max(int(nonzero.sum(axis=1).max()), 1)
        if plan.mode in (NEAREST, NEAREST_EXACT):
            idx = matrix.argmax(axis=1).astype(np.int64)
            x = ops.gather(x, h.const(idx, torch.int64), h.const(axis, torch.int64)).output(0)
        elif width <= _MAX_TAPS:
            x = _apply_taps(x, matrix, nonzero, width, axis, dtype)
        else:
            order = [d for d in range(r) if d != axis] + [axis]
            m = h.cast(h.const(np.ascontiguousarray(matrix.T), torch.float32), dtype)
            y = ops.matmul(h.transpose(x, order), m, False, False).output(0)
            x = h.transpose(y, [order.index(d) for d in range(r)])
    return h.cast(x, out_dtype)


def _apply_taps(x, matrix, nonzero, width: int, axis: int, dtype):
    o = matrix.shape[0]
    r = h.rank(x)
    idx = np.zeros((width, o), np.int64)
    weights = np.zeros((width, o), np.float32)
    for row in range(o):
        cols = np.flatnonzero(nonzero[row])
        idx[: len(cols), row] = cols
        weights[: len(cols), row] = matrix[row, cols]
    acc = None
    for t in range(width):
        g = ops.gather(x, h.const(idx[t], torch.int64), h.const(axis, torch.int64)).output(0)
        w = h.cast(h.const(weights[t].reshape([o] + [1] * (r - 1 - axis)), torch.float32), dtype)
        g = ops.multiply(g, w).output(0)
        acc = g if acc is None else ops.add(acc, g).output(0)
    return acc


# ----------------------------------------------------------------------------- lowering


def _out_sizes(ctx, node, x, plan: _Plan, output_size) -> list[Any]:
    """Output spatial sizes as ints / i64 scalars (the given ones, else from the scale factors)."""
    if output_size is not None and len(output_size) == plan.spatial:
        return list(output_size)
    sizes = []
    r = h.rank(x)
    for k, o in enumerate(plan.out_sizes):
        if isinstance(o, int):
            sizes.append(o)
        else:  # dynamic: an integer factor (see _same_as_sizes)
            s = int(plan.scales[k])
            sizes.append(ops.multiply(h.dim(x, r - plan.spatial + k), h.const(s, torch.int64)).output(0))
    return sizes


def upsample(ctx, node, *args, **kwargs):
    plan = _plan(node)
    op, a = _resolved(node, args, kwargs)
    x = a.get("input", a.get("self"))
    if not plan.fused:
        return _gather_resize(op, x, plan)
    sizes = h.as_shape(_out_sizes(ctx, node, x, plan, a.get("output_size")))
    r = h.rank(x)
    axes = h.const(list(range(r - plan.spatial, r)), torch.int64)
    if plan.mode == NEAREST:
        return ops11.interpolate(
            x, sizes, "nearest", "sizes", coordinate_transformation_mode="asymmetric", nearest_mode="floor", axes=axes
        ).output(0)
    if plan.mode == NEAREST_EXACT:
        return ops11.interpolate(
            x,
            sizes,
            "nearest",
            "sizes",
            coordinate_transformation_mode="tf_half_pixel_for_nn",
            nearest_mode="floor",
            axes=axes,
        ).output(0)
    ctm = "align_corners" if plan.align_corners else "half_pixel"
    if plan.mode == LINEAR:
        return ops11.interpolate(
            x, sizes, "linear_onnx", "sizes", coordinate_transformation_mode=ctm, axes=axes
        ).output(0)
    return ops11.interpolate(
        x, sizes, "cubic", "sizes", coordinate_transformation_mode=ctm, cube_coeff=-0.75, axes=axes
    ).output(0)


lowers(*_UPSAMPLE, validator=_upsample_ok)(upsample)
lowers_named(WHOLE_INTERPOLATE, validator=_upsample_ok)(upsample)


_GRID_MODES = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


def _grid_ok(node) -> str | None:
    mode, padding = node.args[2], node.args[3]
    if mode not in _GRID_MODES or padding not in _GRID_PADDING:
        return f"interpolation mode {mode} / padding mode {padding} has no GridSample equivalent"
    return None


@lowers(aten.grid_sampler_2d.default, validator=_grid_ok)
def grid_sampler_2d(ctx, node, x, grid, interpolation_mode, padding_mode, align_corners):
    attrs = {
        "align_corners": bool(align_corners),
        "mode": _GRID_MODES[interpolation_mode],
        "padding_mode": _GRID_PADDING[padding_mode],
    }
    # Half-precision inputs are sampled in float32 (torch's CPU kernel computes in float too).
    dtype = h.dtype_of(x)
    compute = h.opmath_dtype(dtype)
    y = ops9.grid_sample(h.cast(x, compute), h.cast(grid, compute), attrs).output(0)
    return h.cast(y, dtype)


def _grid_3d_ok(node) -> str | None:
    mode, padding = node.args[2], node.args[3]
    if mode not in (0, 1) or padding not in _GRID_PADDING:
        return f"3-d interpolation mode {mode} / padding mode {padding}: torch has bilinear (0) and nearest (1)"
    if not all(isinstance(d, int) for arg in node.args[:2] for d in h.meta(arg).shape):
        return "a 3-d grid sample with dynamic shapes"
    return None


def _clip(c: ov.Output, size: int) -> ov.Output:
    """``min(size - 1, max(c, 0))`` with C++'s std::min/max on NaN (what ATen's clip does): NaN
    becomes ``size - 1``."""
    low = ops.select(ops.less(c, h.const(0.0, F32)), h.const(0.0, F32), c)
    return ops.select(ops.less(low, h.const(size - 1.0, F32)), low, h.const(size - 1.0, F32)).output(0)


def _reflect(c: ov.Output, twice_low: int, twice_high: int) -> ov.Output:
    """ATen's reflect_coordinates: ``c`` folded back and forth into [low, high]. Exact while
    ``c`` is within 2**24 spans of the volume (the exact fmod's range); beyond, the fold is off."""
    if twice_low == twice_high:
        return ops.broadcast(h.const(0.0, F32), h.shape_of(c)).output(0)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    c = ops.abs(ops.subtract(c, h.const(low, F32))).output(0)
    extra = float_mod.fmod(c, h.const(span, F32))
    flips = ops.floor(ops.divide(c, h.const(span, F32))).output(0)
    odd = ops.not_equal(flips, ops.multiply(ops.floor(ops.multiply(flips, h.const(0.5, F32))), h.const(2.0, F32)))
    back = ops.subtract(h.const(span + low, F32), extra)
    return ops.select(odd, back, ops.add(extra, h.const(low, F32))).output(0)


def _source_index(g: ov.Output, size: int, padding: int, align_corners: bool) -> ov.Output:
    """ATen's grid_sampler_compute_source_index: unnormalise a [-1, 1] coordinate, then pad."""
    if align_corners:
        c = ops.multiply(ops.add(g, h.const(1.0, F32)), h.const((size - 1) / 2, F32))
    else:
        c = ops.divide(
            ops.subtract(ops.multiply(ops.add(g, h.const(1.0, F32)), h.const(float(size), F32)), h.const(1.0, F32)),
            h.const(2.0, F32),
        )
    c = c.output(0)
    if _GRID_PADDING[padding] == "border":
        return _clip(c, size)
    if _GRID_PADDING[padding] == "reflection":
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        return _clip(_reflect(c, *twice), size)
    return c


@lowers(aten.grid_sampler_3d.default, validator=_grid_3d_ok)
def grid_sampler_3d(ctx, node, x, grid, interpolation_mode, padding_mode, align_corners):
    """Trilinear or nearest sampling of a volume at grid points (OpenVINO's GridSample is 2-d
    only): each corner's voxels are gathered from the flattened volume, weighted as ATen weighs
    them, and a corner outside the volume adds nothing (selected away, so a NaN weight there
    is dropped as ATen skips it)."""
    dtype = h.dtype_of(x)
    n, ch, depth, height, width = h.static_shape(x)
    sizes = (width, height, depth)  # the grid's last axis holds x, y, z
    # [N * D*H*W, C], read at flat positions offset by each batch's start: a Gather with
    # batch_dims=1 segfaults the CPU plugin at batch 1 (OpenVINO 2026.4, a run-time index).
    voxels = depth * height * width
    volume = h.reshape(h.transpose(h.reshape(h.cast(x, F32), [n, ch, -1]), [0, 2, 1]), [-1, ch])
    batch_start = h.const(np.arange(n, dtype=np.int64).reshape(n, 1, 1) * voxels, torch.int64)
    out_shape = h.static_shape(grid)[1:4]
    coords = h.reshape(h.cast(grid, F32), [n, -1, 3])
    axes = ops.split(coords, h.const(2, torch.int64), 3)
    src = [_source_index(axes.output(i), sizes[i], padding_mode, bool(align_corners)) for i in range(3)]
    if interpolation_mode == 1:  # nearest: round half to even, as std::nearbyint
        corners = [([ops.round(c, "half_to_even").output(0) for c in src], None)]
    else:
        # Per axis: the two neighbouring voxel coordinates and their weights (ATen's tnw ... bse).
        ends, weights = [], []
        for c in src:
            c0 = ops.floor(c).output(0)
            c1 = ops.add(c0, h.const(1.0, F32)).output(0)
            ends.append((c0, c1))
            weights.append((ops.subtract(c1, c).output(0), ops.subtract(c, c0).output(0)))
        corners = []
        for dz, dy, dx in ((0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)):
            pick = (dx, dy, dz)
            weight = ops.multiply(ops.multiply(weights[0][dx], weights[1][dy]), weights[2][dz]).output(0)
            corners.append(([ends[axis][pick[axis]] for axis in range(3)], weight))
    out = None
    for at, weight in corners:
        inside, flat = None, batch_start
        for c, size, stride in zip(at, sizes, (1, width, width * height), strict=True):
            ok = ops.logical_and(ops.less_equal(h.const(0.0, F32), c), ops.less(c, h.const(float(size), F32)))
            inside = ok.output(0) if inside is None else ops.logical_and(inside, ok).output(0)
            i = ops.multiply(h.cast(_clip(c, size), torch.int64), h.const(stride, torch.int64))
            flat = ops.add(flat, i).output(0)
        value = ops.gather(volume, h.squeeze(flat, 2), h.const(0, torch.int64)).output(0)  # [N, P, C]
        if weight is not None:
            value = ops.multiply(value, weight).output(0)
        value = ops.select(inside, value, h.const(0.0, F32)).output(0)
        out = value if out is None else ops.add(out, value).output(0)
    out = h.reshape(h.transpose(out, [0, 2, 1]), [n, ch, *out_shape])
    return h.cast(out, dtype)


@lowers(aten.col2im.default)
def col2im(ctx, node, x, output_size, kernel_size, dilation, padding, stride):
    def pair(v):
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        return v * 2 if len(v) == 1 else v

    padding = pair(padding)
    return ops15.col2im(
        x,
        h.as_shape(pair(output_size)),
        h.as_shape(pair(kernel_size)),
        strides=pair(stride),
        dilations=pair(dilation),
        pads_begin=padding,
        pads_end=padding,
    ).output(0)
