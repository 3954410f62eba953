"""An exported module made ready for PyTorch's stock PT2E quantizers.

Two things in ordinary models make ``X86InductorQuantizer`` fail on a ``torch.export`` result:

- Dead code. ``torch.export`` keeps ops whose results nothing uses, for example BERT's pooler when
  only the last hidden state is returned. The quantizer then finds a linear+tanh pattern whose
  partition has no output node and raises ``IndexError`` in ``_annotate_linear_unary``.
- Reused modules (``module_calls.separate_module_calls``): one ``nn.ReLU`` applied several times.
"""

from __future__ import annotations

import torch

from fxvino.quantization.module_calls import separate_module_calls


def _keeps(node: torch.fx.Node) -> bool:
    """Dead-code elimination keeps module calls (export's input guards) and impure ops."""
    return node.op == "call_module" or node.is_impure()


def remove_dead_code(gm: torch.fx.GraphModule) -> int:
    """Erase ops whose results are unused; returns how many were erased."""
    before = len(gm.graph.nodes)
    gm.graph.eliminate_dead_code(is_impure_node=_keeps)
    gm.recompile()
    return before - len(gm.graph.nodes)


def ready_for_quantizer(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` (``torch.export.export(...).module()``) without dead code and with each call of a
    reused module separated, edited in place and returned: what ``prepare_pt2e`` gets next."""
    remove_dead_code(gm)
    separate_module_calls(gm)
    return gm
