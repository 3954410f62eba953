"""Recurrent layers: an LSTM layer as OpenVINO's LSTMSequence.

In inference on CPU, PyTorch's LSTM decomposition hands each layer and direction to oneDNN's
``aten.mkldnn_rnn_layer`` (``torch._decomp.decompositions.mkldnn_one_layer_lstm``), an op
OpenVINO has no rule for: every LSTM ran in PyTorch between two OpenVINO partitions, its inputs and
outputs crossing at each layer. The decomposition always calls it for one layer, one direction,
time-major, with no packed sequence, so that is what is lowered; anything else is declined.

PyTorch orders a layer's four gates input, forget, cell, output; LSTMSequence wants forget,
input, cell, output, and one bias where PyTorch adds two. The weights are frozen constants, so
the reordering and the sum fold away at compile time.
"""

from __future__ import annotations

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.registry import lowers

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


def _gates_fico(w: ov.Output) -> ov.Output:
    """PyTorch's [i; f; g; o] rows (or entries) as OpenVINO's [f; i; g; o]."""
    i, f, g, o = ops.split(w, h.const(0, torch.int64), 4).outputs()
    return ops.concat([f, i, g, o], 0).output(0)


@lowers(aten.mkldnn_rnn_layer.default, validator=_one_lstm_layer)
def mkldnn_rnn_layer(
    ctx, node, x, w_ih, w_hh, b_ih, b_hh, hx, cx, reverse, batch_sizes, mode, hidden_size, num_layers,
    has_biases, bidirectional, batch_first, train,
):  # fmt: skip
    """x [T, B, I], hx and cx [1, B, H] -> (y [T, B, H], hy [1, B, H], cy [1, B, H], empty workspace)."""
    dtype = h.out_dtype(node)
    w = h.unsqueeze(_gates_fico(h.cast_like(w_ih, x)), 0)  # [1, 4H, I]
    r = h.unsqueeze(_gates_fico(h.cast_like(w_hh, x)), 0)  # [1, 4H, H]
    if has_biases:
        b = _gates_fico(ops.add(h.cast_like(b_ih, x), h.cast_like(b_hh, x)).output(0))
    else:  # the decomposition passes zeros shaped like the weights: there is no bias
        b = ops.broadcast(h.const(0.0, dtype), h.const([4 * hidden_size], torch.int64)).output(0)
    batch_major = h.transpose(x, [1, 0, 2])  # [B, T, I]
    lengths = ops.broadcast(h.cast(h.dim(x, 0), torch.int32), h.unsqueeze(h.dim(x, 1), 0)).output(0)
    lstm = ops.lstm_sequence(
        batch_major,
        h.transpose(h.cast_like(hx, x), [1, 0, 2]),  # [B, 1, H]
        h.transpose(h.cast_like(cx, x), [1, 0, 2]),
        lengths,
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
