"""Where a view starts in its base's storage, computed in the graph.

OpenVINO has values, not storage, but a few results are about storage: ``sym_storage_offset``
of a view whose start is data-dependent (``tensor_split`` at ``.item()`` positions), and graph
outputs that view a graph input at such positions, which AOTAutograd rebuilds from the returned
tensor's own strides and offset. For both, the offset is the sum along the chain of view ops of
``start * stride`` (slice) and ``index * stride`` (select); the other views keep the offset. The
strides come from the fake tensors and must be static.
"""

from __future__ import annotations

import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h

aten = torch.ops.aten

# Views that keep their input's storage offset.
_SAME_OFFSET = frozenset(
    {
        aten.permute.default,
        aten.transpose.int,
        aten.t.default,
        aten.unsqueeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
        aten.squeeze.default,
        aten.view.default,
        aten._unsafe_view.default,
        aten.expand.default,
        aten.alias.default,
    }
)
_SHIFTING = frozenset({aten.slice.Tensor, aten.select.int})


def view_chain(node: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """(base, views from the base up to ``node``) when every step is a view whose offset shift
    is known and every stride involved is static; else None."""
    chain = []
    x = node
    while x.op == "call_function":
        if x.target not in _SAME_OFFSET and x.target not in _SHIFTING:
            return None
        src = x.args[0].meta.get("val") if isinstance(x.args[0], torch.fx.Node) else None
        if not isinstance(src, torch.Tensor) or not all(isinstance(s, int) for s in src.stride()):
            return None
        chain.append(x)
        x = x.args[0]
    return (x, chain[::-1]) if chain else None


def relative_offset(env: dict, chain: list[torch.fx.Node]) -> object:
    """The storage offset of the chain's last view minus its base's, as an i64 scalar Output."""
    offset = h.const(0, torch.int64)
    for v in chain:
        if v.target not in _SHIFTING:
            continue
        src = v.args[0].meta["val"]
        dim = h.norm_dim(v.args[1], src.dim())
        size = src.shape[dim]
        start = v.args[2] if len(v.args) > 2 else v.kwargs.get("start", v.kwargs.get("index"))
        start = 0 if start is None else start
        start = env[start] if isinstance(start, torch.fx.Node) else start
        start = h.wrap_negative(start, size if isinstance(size, int) else h.dim(env[v.args[0]], dim))
        if v.target is aten.slice.Tensor:  # a slice start past the end clamps to the end
            start = ops.minimum(h.i64(start), h.i64(size if isinstance(size, int) else h.dim(env[v.args[0]], dim)))
            start = ops.maximum(start, h.const(0, torch.int64)).output(0)
        shift = ops.multiply(h.i64(start), h.const(src.stride()[dim], torch.int64))
        offset = ops.add(offset, shift).output(0)
    return offset
