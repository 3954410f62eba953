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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def aot_partitioning() -> dict[str, Callable[..., Any]]:
    """Keyword arguments for ``aot_autograd`` when fxvino compiles the backward too."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return {"partition_fn": min_cut_rematerialization_partition}
