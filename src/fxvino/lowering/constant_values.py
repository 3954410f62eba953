"""Which values of a lowered model are computed from constants alone.

Several passes over a lowered model treat such values apart: OpenVINO folds them when it
compiles, by its own rules (casts truncated, NaN tests never folded), so a pass gives them
torch's result in a form that folds, or leaves them alone. Each asks the same question while it
walks the model and rewrites it, so the answer is computed once per node and follows the
rewrites: a node the pass inserted is judged by its inputs when first asked about.
"""

from __future__ import annotations

import openvino as ov

# Constant inputs, yet a new value on each call (state, random draws): never constant.
_NEW_EACH_CALL = frozenset({"ReadValue", "RandomUniform", "Multinomial"})


class ConstantValues:
    """Answers, for nodes of one model, whether each is computed from Constants alone.

    ``through_decompression`` says whether a Convert from integers to a float counts: the
    weights NNCF and torchao compress (``Convert(i8) -> Subtract -> Multiply``) are constant
    either way, but a pass that rounds float constants leaves them in the shape the plugin keeps
    compressed, and so sees them as not constant. ``static_shapes`` counts the ShapeOf of a
    value of static shape as constant, as the plugin folds it when it compiles.
    """

    def __init__(self, through_decompression: bool = True, static_shapes: bool = False) -> None:
        self._through_decompression = through_decompression
        self._static_shapes = static_shapes
        self._known: dict[ov.Node, bool] = {}

    def __call__(self, node: ov.Node) -> bool:
        known = self._known.get(node)
        if known is not None:
            return known
        pending = [node]  # judged inputs first, without recursion: chains run thousands deep
        while pending:
            current = pending[-1]
            if current in self._known:
                pending.pop()
                continue
            inputs = [current.input_value(i).get_node() for i in range(current.get_input_size())]
            unknown = [n for n in inputs if n not in self._known]
            if unknown:
                pending.extend(unknown)
                continue
            self._known[current] = self._judge(current, inputs)
            pending.pop()
        return self._known[node]

    def _judge(self, node: ov.Node, inputs: list[ov.Node]) -> bool:
        kind = node.get_type_name()
        if kind == "Constant":
            return True
        if kind == "ShapeOf" and self._static_shapes and node.get_input_partial_shape(0).is_static:
            return True
        if kind in _NEW_EACH_CALL or not inputs:
            return False
        decompression = kind == "Convert" and not node.input_value(0).get_element_type().is_real()
        if decompression and not self._through_decompression:
            return False
        return all(self._known[n] for n in inputs)
