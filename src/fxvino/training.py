"""What the training path (``aot_autograd=True``) asks of AOTAutograd beyond inference.

AOTAutograd's default partitioner saves for the backward whatever the forward computed that the
backward reads. In eager PyTorch or Inductor a saved ``weight.t()`` is a free view; from an
OpenVINO forward every saved tensor is a computed output that the runtime copies into a torch
tensor, so BERT's forward spent most of its transfers materialising and copying transposed
weights (two 3072x768 transposes took 100 ms of a 550 ms forward). The min-cut partitioner
Inductor uses saves the weight itself (an input: nothing to copy) and redoes cheap ops such as
views and pointwise ops in the backward, where OpenVINO fuses them; it also saves fewer
activations, which is peak memory. Random ops are never recomputed (their outputs, dropout masks
included, are saved), so forward and backward still see one draw.

It still saves permutations of activations (``x.t()`` for a weight gradient, attention heads
permuted for a batched product): free views in PyTorch, a Transpose copy in an OpenVINO forward
(GPT-2 small: 84 of them, ~220 ms of a 1.5 s training forward on 2 AVX2 cores). The forward now
saves the tensor under the view, and the backward takes the view itself, where the Transpose
feeds a product and OpenVINO folds it into the product's operand order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

aten = torch.ops.aten
PERMUTATIONS = (aten.permute.default, aten.t.default, aten.transpose.int)


def aot_partitioning() -> dict[str, Callable[..., Any]]:
    """Keyword arguments for ``aot_autograd`` when fxvino compiles the backward too."""
    return {"partition_fn": partition}


def partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any):
    """Inductor's min-cut partition, then saved permutations moved to the backward."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    forward, backward = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
    save_bases_of_permutations(forward, backward)
    return forward, backward


def save_bases_of_permutations(forward: torch.fx.GraphModule, backward: torch.fx.GraphModule) -> int:
    """Saved tensors that are permutations of another forward tensor are saved as that tensor, and
    the backward permutes it on entry; returns how many. A saved value reaches the backward as a
    placeholder of the same name (AOTAutograd's partitioner names them so); values also returned
    to the caller are left alone (only their saved copy would move)."""
    output = forward.graph.output_node()
    outputs = list(output.args[0])
    times = Counter(outputs)
    entries = {n.name: n for n in backward.graph.find_nodes(op="placeholder")}
    if not entries:
        return 0
    last_entry = list(entries.values())[-1]
    moved: list[torch.fx.Node] = []
    for i, value in enumerate(outputs):
        if not (
            isinstance(value, torch.fx.Node)
            and value.op == "call_function"
            and value.target in PERMUTATIONS
            and times[value] == 1
            and value.name in entries
        ):
            continue
        base = value.args[0]
        if not isinstance(base, torch.fx.Node) or "val" not in base.meta:
            continue
        entry = entries[value.name]
        with backward.graph.inserting_after(last_entry):
            view = backward.graph.call_function(value.target, (entry, *value.args[1:]), dict(value.kwargs))
        last_entry = view
        view.meta = dict(value.meta)
        entry.replace_all_uses_with(view, delete_user_cb=lambda user, view=view: user is not view)
        entry.meta = {**entry.meta, "val": base.meta["val"]}
        if "tensor_meta" in base.meta:
            entry.meta["tensor_meta"] = base.meta["tensor_meta"]
        outputs[i] = base
        moved.append(value)
    if moved:
        output.args = (type(output.args[0])(outputs), *output.args[1:])
        for value in moved:
            if not value.users:
                forward.graph.erase_node(value)
        forward.recompile()
        backward.recompile()
    return len(moved)
