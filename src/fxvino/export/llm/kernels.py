"""The decoder IR in the forms the CPU plugin fuses into its LLM kernels.

The lowering chooses per graph: under ``torch.compile`` a prompt and a decode step are separate
graphs, and SiLU keeps an explicit beta where the row count is large or unknown, so that the
plugin's gated-MLP kernel (LLMMLP, AMX and bf16 only) is used only for a few rows
(``lowering/ops/activation.py``). An exported decoder is one graph for both, and a generation
spends most of its time in decode steps: there the fused kernel wins (a ~100M Llama in bf16 decoded
1.11-1.12x slower than optimum-intel's IR, which gets the fusion, on GenAI's stateful backend).
"""

from __future__ import annotations

import numpy as np
import openvino as ov

from fxvino.lowering.ops.activation import plain_swish


def gated_mlp_fusable(model: ov.Model) -> int:
    """Make each ``Swish(x, beta=1)`` the one-input Swish the plugin's MLP fusion matches (in
    place); returns how many were changed."""
    changed = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Swish" or node.get_input_size() != 2:
            continue
        beta = node.input_value(1).get_node()
        if beta.get_type_name() != "Constant" or not np.all(beta.get_data() == 1):
            continue
        plain = plain_swish(node.input_value(0))
        for target in list(node.output(0).get_target_inputs()):
            target.replace_source_output(plain)
        changed += 1
    model.validate_nodes_and_infer_types()
    return changed
