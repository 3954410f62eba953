"""What OpenVINO GenAI's paged-attention backend needs of the decoder IR.

``LLMPipeline(path, "CPU")`` first tries its continuous-batching backend: OpenVINO's
``SDPAToPagedAttention`` rewrite replaces each ``ScaledDotProductAttention`` and the cache state
feeding it by a ``PagedAttentionExtension`` reading a paged cache, and removes ``beam_idx`` and
``attention_mask`` (sequences are packed, not padded). It fails, and GenAI falls back to its
stateful backend with a warning, when anything else still reads those inputs. The paged backend
computes a prompt's first token several times faster than the stateful one (optimum-intel's IR:
~14 ms against ~63 ms for a 100M Llama and 128 prompt tokens), so the exported decoder is put in a
form the rewrite takes whole (:func:`prepare`), except where it would change results
(:func:`keeps_windows_only_in_its_masks`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov
import openvino.opset16 as ops


def keeps_windows_only_in_its_masks(config: Any) -> bool:
    """Whether the model limits some layers' attention to a sliding window (Mistral, Gemma 2/3).

    The paged rewrite recognises a window only in the mask patterns of the exporters it knows
    (Phi-3's and gpt-oss's, as optimum-intel writes them) and otherwise attends to every past token:
    a windowed model would silently change its results past the window. Such a model is left to
    the stateful backend, where its own masks apply.
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    kinds = getattr(text, "layer_types", None)
    if kinds is not None:
        return any(kind in ("sliding_attention", "chunked_attention") for kind in kinds)
    return getattr(text, "sliding_window", None) is not None and getattr(text, "use_sliding_window", True) is not False


def prepare(model: ov.Model) -> int:
    """Leave ``attention_mask`` feeding nothing but attention masks (in place); returns how many
    attentions were changed.

    The lowering follows attention with ``Select(row has a live key, out, 0)``: PyTorch's 0 for a
    query row whose keys are all masked, where OpenVINO's would be NaN, which in a left-padded batch
    reaches every position through the next layer's values. In a decoder such rows are pad
    positions, whose outputs nothing reads: unmasking them in the mask instead (their output a
    finite average) keeps every other row exact and leaves the Select nothing to do.
    """
    changed = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() == "Select" and _unmask_dead_rows(node):
            changed += 1
    model.validate_nodes_and_infer_types()
    return changed


def _unmask_dead_rows(select: ov.Node) -> bool:
    sdpa, live = select.input_value(1).get_node(), select.input_value(0).get_node()
    if sdpa.get_type_name() != "ScaledDotProductAttention" or sdpa.get_input_size() < 4:
        return False
    if live.get_type_name() != "ReduceLogicalOr" or select.input_value(2).get_node().get_type_name() != "Constant":
        return False
    mask = sdpa.input_value(3)
    if mask.get_element_type() == ov.Type.boolean:
        unmasked = ops.logical_or(mask, ops.logical_not(live.output(0)))
    else:
        zero = ops.constant(np.zeros((), dtype=mask.get_element_type().to_dtype()))
        unmasked = ops.select(live.output(0), mask, zero)
    sdpa.input(3).replace_source_output(unmasked.output(0))
    for target in list(select.output(0).get_target_inputs()):
        target.replace_source_output(sdpa.output(0))
    return True
