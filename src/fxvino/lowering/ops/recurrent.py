"""Recurrent layers: an LSTM layer as OpenVINO's LSTMSequence, a GRU as GRUSequences.

In inference on CPU, PyTorch's LSTM decomposition hands each layer and direction to oneDNN's
``aten.mkldnn_rnn_layer`` (``torch._decomp.decompositions.mkldnn_one_layer_lstm``), an op
OpenVINO has no rule for: every LSTM ran in PyTorch between two OpenVINO partitions, its inputs and
outputs crossing at each layer. The decomposition always calls it for one layer, one direction,
time-major, with no packed sequence, so that is what is lowered; anything else is declined.

PyTorch orders a layer's four gates input, forget, cell, output; LSTMSequence wants forget,
input, cell, output, and one bias where PyTorch adds two. The weights are frozen constants, so
the reordering and the sum fold away at compile time.

``nn.GRU`` arrives whole, as ``fxvino::gru`` (``capture/recurrent.py``): each layer becomes one
GRUSequence over both directions, its gates reordered from PyTorch's reset, update, new to
OpenVINO's update, reset, new, with ``linear_before_reset`` since PyTorch applies the reset gate
to the hidden state's product, bias included.
"""

from __future__ import annotations

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers, lowers_named

aten = torch.ops.aten

_LSTM = 2  # ideep::rnn_kind::LSTM, the only mode the decomposition uses


def _one_lstm_layer(node: torch.fx.Node) -> str | None:
    mode, num_layers, bidirectional, batch_first, train = node.args[9], node.args[11], *node.args[13:16]
    batch_sizes = node.args[8]
    if mode != _LSTM:
        return f"mkldnn_rnn_layer mode {mode} (only LSTM, mode 2, is lowered)"
    if num_layers != 1 or bidirectional or batch_first or batch_sizes:
        return "mkldnn_rnn_layer over several layers, both directions, batch-first or packed input"
    if train:
        return "mkldnn_rnn_layer in training mode"
    return None


def _gates(w: ov.Output, order: tuple[int, ...]) -> ov.Output:
    """The gate blocks of ``w``'s rows (or entries) in ``order``: PyTorch's to OpenVINO's."""
    blocks = ops.split(w, h.const(0, torch.int64), len(order)).outputs()
    return ops.concat([blocks[k] for k in order], 0).output(0)


_FICO = (1, 0, 2, 3)  # LSTM: PyTorch's input, forget, cell, output -> forget, input, cell, output
_ZRH = (1, 0, 2)  # GRU: PyTorch's reset, update, new -> update, reset, new


def _no_bias(size: int, dtype: torch.dtype) -> ov.Output:
    return ops.broadcast(h.const(0, dtype), h.as_shape([size])).output(0)


def _lengths(batch_major: ov.Output) -> ov.Output:
    """Every sequence runs the whole length: [B] i32 copies of T, from ``[B, T, ...]``."""
    return ops.broadcast(h.cast(h.dim(batch_major, 1), torch.int32), h.unsqueeze(h.dim(batch_major, 0), 0)).output(0)


@lowers(aten.mkldnn_rnn_layer.default, validator=_one_lstm_layer)
def mkldnn_rnn_layer(
    ctx, node, x, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, batch_sizes, mode, hidden_size, num_layers,
    has_biases, bidirectional, batch_first, train,
):  # fmt: skip
    """x [T, B, I], hx and cx [1, B, H] -> (y [T, B, H], hy [1, B, H], cy [1, B, H], empty workspace)."""
    dtype = h.out_dtype(node)
    w = h.unsqueeze(_gates(h.cast_like(w_ih, x), _FICO), 0)  # [1, 4H, I]
    r = h.unsqueeze(_gates(h.cast_like(w_hh, x), _FICO), 0)  # [1, 4H, H]
    if has_biases:
        b = _gates(ops.add(h.cast_like(b_ih, x), h.cast_like(b_hh, x)).output(0), _FICO)
    else:  # the decomposition passes zeros shaped like the weights: there is no bias
        b = _no_bias(4 * hidden_size, dtype)
    batch_major = h.transpose(x, [1, 0, 2])  # [B, T, I]
    lstm = ops.lstm_sequence(
        batch_major,
        h.transpose(h.cast_like(hx, x), [1, 0, 2]),  # [B, 1, H]
        h.transpose(h.cast_like(cx, x), [1, 0, 2]),
        _lengths(batch_major),
        w,
        r,
        h.unsqueeze(b, 0),
        hidden_size,
        "reverse" if reverse else "forward",
    )
    y, hy, cy = lstm.outputs()  # [B, 1, T, H], [B, 1, H], [B, 1, H]
    y = h.transpose(h.squeeze(y, 1), [1, 0, 2])
    workspace = h.const([], torch.uint8)
    return (y, h.transpose(hy, [1, 0, 2]), h.transpose(cy, [1, 0, 2]), workspace)


def _gru_bias(b_ih: ov.Output, b_hh: ov.Output, hidden: int) -> ov.Output:
    """OpenVINO's [b_z, b_r, b_n of the input, b_n of the hidden state] (linear_before_reset)."""

    def part(b: ov.Output, start: int, stop: int) -> ov.Output:
        return ops.slice(b, [start], [stop], [1]).output(0)

    zr = ops.add(part(b_ih, 0, 2 * hidden), part(b_hh, 0, 2 * hidden)).output(0)
    return ops.concat([zr, part(b_ih, 2 * hidden, 3 * hidden), part(b_hh, 2 * hidden, 3 * hidden)], 0).output(0)


def _stacked(tensors: list[ov.Output]) -> ov.Output:
    return ops.concat([h.unsqueeze(t, 0) for t in tensors], 0).output(0)


@lowers_named("fxvino.gru.default")  # only inference calls are renamed (capture/recurrent.py)
def gru(ctx, node, x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """x [T, B, I] (or [B, T, I]), hx [L*D, B, H] -> (output [T, B, D*H] (or batch first), h_n [L*D, B, H])."""
    directions = 2 if bidirectional else 1
    hidden = h.static_shape(hx)[-1]
    per_layer = 4 if has_biases else 2
    hx = h.cast_like(hx, x)
    layer_in = x if batch_first else h.transpose(x, [1, 0, 2])  # [B, T, I]
    finals = []
    for layer in range(num_layers):
        ws, rs, bs = [], [], []
        for d in range(directions):
            first = (layer * directions + d) * per_layer
            w_ih, w_hh, *biases = (h.cast_like(p, x) for p in params[first : first + per_layer])
            ws.append(_gates(w_ih, _ZRH))
            rs.append(_gates(w_hh, _ZRH))
            if biases:
                bs.append(_gru_bias(*(_gates(b, _ZRH) for b in biases), hidden))
            else:
                bs.append(_no_bias(4 * hidden, h.out_dtype(node)))
        rows = ops.slice(hx, [layer * directions], [(layer + 1) * directions], [1]).output(0)  # [D, B, H]
        seq = ops.gru_sequence(
            layer_in,
            h.transpose(rows, [1, 0, 2]),  # [B, D, H]
            _lengths(layer_in),
            _stacked(ws),
            _stacked(rs),
            _stacked(bs),
            hidden,
            "bidirectional" if bidirectional else "forward",
            linear_before_reset=True,
        )
        y, h_last = seq.outputs()  # [B, D, T, H], [B, D, H]
        both = h.transpose(y, [0, 2, 1, 3])  # [B, T, D, H]
        layer_in = ops.reshape(both, h.const([0, 0, directions * hidden], torch.int64), True).output(0)
        finals.append(h.transpose(h_last, [1, 0, 2]))
    output = layer_in if batch_first else h.transpose(layer_in, [1, 0, 2])
    return (output, finals[0] if len(finals) == 1 else ops.concat(finals, 0).output(0))
