"""Constant, reflection and replication padding onto OpenVINO's Pad; ``repeat`` onto Tile."""

from __future__ import annotations

import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


def _pads(x, pad) -> tuple:
    """Torch's pad list (last dim first, (begin, end) pairs) as per-dimension begin/end shapes.

    Pad-12 takes negative values (they crop), which is what torch does with negative pads.
    """
    r = h.rank(x)
    if len(pad) % 2 or len(pad) // 2 > r:
        raise ValueError(f"pad of length {len(pad)} does not fit a rank-{r} tensor")
    begins: list = [0] * r
    ends: list = [0] * r
    for i in range(len(pad) // 2):
        begins[r - 1 - i] = pad[2 * i]
        ends[r - 1 - i] = pad[2 * i + 1]
    return h.as_shape(begins), h.as_shape(ends)


@lowers(aten.constant_pad_nd.default)
def constant_pad_nd(ctx, node, x, pad, value=0):
    begins, ends = _pads(x, pad)
    return ops.pad(x, begins, ends, "constant", h.cast_like(value, x)).output(0)


def _mode_pad(mode: str):
    def lower(ctx, node, x, padding):
        begins, ends = _pads(x, padding)
        if 0 in h.static_shape(x):
            # Empty input, empty output: Pad's reflect check rejects a zero-size dimension.
            return ops.pad(x, begins, ends, "constant", h.cast_like(0, x)).output(0)
        return ops.pad(x, begins, ends, mode).output(0)

    return lower


lowers(
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.reflection_pad3d.default,
)(_mode_pad("reflect"))
lowers(
    aten.replication_pad1d.default,
    aten.replication_pad2d.default,
    aten.replication_pad3d.default,
)(_mode_pad("edge"))


@lowers(aten.repeat.default)
def repeat(ctx, node, x, repeats):
    if not repeats:  # a 0-d tensor repeated (): Tile with empty repeats yields garbage
        return x
    # Tile prepends unit dimensions when ``repeats`` is longer than the rank, as torch does.
    return ops.tile(x, h.as_shape(list(repeats))).output(0)
