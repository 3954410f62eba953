"""``nn.GRU`` kept whole through AOTAutograd, so OpenVINO runs it as GRUSequence.

With Dynamo's ``allow_rnn``, ``nn.GRU`` reaches the graph as one ``torch.gru`` call, but
AOTAutograd traces it through PyTorch's decomposition, which unrolls the sequence: ~50 ops per
time step and layer (4,808 ops for 200 steps of one layer: 6.6 s to the first result, 2.66 ms
per call). In inference graphs the call becomes ``fxvino::gru``, an op AOTAutograd keeps as it
is (its eager kernel is ``torch.gru`` itself); the lowering (``lowering/ops/recurrent.py``) makes
each layer one GRUSequence (1.8 s, 1.15 ms). Dynamo still specializes the sequence length (it
traces ``torch.gru`` through the same decomposition on fake tensors), so a new length compiles
again, in a fraction of the time. Graphs that need gradients keep the decomposition: the op has
no backward.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.fx


@torch.library.custom_op("fxvino::gru", mutates_args=())
def gru(
    input: torch.Tensor,  # noqa: A002 - torch.gru's own name
    hx: torch.Tensor,
    params: Sequence[torch.Tensor],
    has_biases: bool,
    num_layers: int,
    dropout: float,
    train: bool,
    bidirectional: bool,
    batch_first: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(torch.gru(input, hx, list(params), has_biases, num_layers, dropout, train, bidirectional, batch_first))


@gru.register_fake
def _(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):  # noqa: A002
    hidden = hx.shape[-1]
    directions = 2 if bidirectional else 1
    output = input.new_empty((*input.shape[:-1], directions * hidden))
    return output, hx.new_empty(hx.shape)


def keep_grus_whole(gm: torch.fx.GraphModule) -> bool:
    """Turn the inference ``torch.gru`` calls of a Dynamo graph into ``fxvino::gru``; True if any."""
    changed = False
    for node in gm.graph.find_nodes(op="call_function", target=torch.gru):
        if len(node.args) != 9 or node.kwargs or node.args[6]:  # the (input, hx, params, ...) form, not training
            continue
        node.target = torch.ops.fxvino.gru.default
        node.args = (*node.args[:2], list(node.args[2]), *node.args[3:])
        changed = True
    if changed:
        gm.recompile()
    return changed
