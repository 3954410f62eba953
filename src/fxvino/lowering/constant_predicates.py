"""NaN and infinity tests of constant values, put in forms OpenVINO folds.

OpenVINO's constant folding evaluates an op only when the op can compute itself, and IsNaN,
IsInf and IsFinite cannot: over a value computed from constants alone they stay in the
executable graph and test the whole value on every call (``Select(IsFinite(w), w, 0) + x`` over
a 1024x1024 weight kept an Eltwise layer, 4 MB read per call), and they stop folding of what
reads them. Lowerings use them freely (NaN-aware sorting and scans, ``nan_to_num``,
``log_softmax``'s guard, float remainders); fxvino folds constants in torch only up to
``FOLD_MAX_BYTES``, so a larger weight reached them. Once a graph is lowered, each such test of a
value computed from constants is rewritten in comparisons, which fold:

- ``IsNaN(x)`` as ``x != x`` (only NaN differs from itself);
- ``IsInf(x)`` as ``|x| == inf`` (or ``x == inf``, ``x == -inf`` for one sign);
- ``IsFinite(x)`` as ``|x| < inf`` (false for NaN as for the infinities).

Tests of run-time values keep the plugin's own kernels.
"""

from __future__ import annotations

import openvino as ov
import openvino.opset16 as ops

from fxvino.lowering import helpers as h
from fxvino.lowering.constant_values import ConstantValues

_PREDICATES = frozenset({"IsNaN", "IsInf", "IsFinite"})


def fold_constant_predicates(model: ov.Model) -> int:
    """Rewrites ``model`` in place (see the module doc); returns how many tests it rewrote."""
    from_constants = ConstantValues()
    rewritten = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() not in _PREDICATES or not from_constants(node):
            continue
        foldable = _foldable(node)
        if foldable is None:
            continue
        node.output(0).replace(foldable)
        rewritten += 1
    if rewritten:
        model.validate_nodes_and_infer_types()
    return rewritten


def _foldable(test: ov.Node) -> ov.Output | None:
    """``test``'s result as comparisons of its input; None for an IsInf that detects no sign."""
    x = test.input_value(0)
    kind = test.get_type_name()
    if kind == "IsNaN":
        return ops.not_equal(x, x).output(0)
    inf = h.infinity(h.dtype_of(x))
    if kind == "IsFinite":
        return ops.less(ops.abs(x), inf).output(0)
    attributes = test.get_attributes()
    positive, negative = attributes["detect_positive"], attributes["detect_negative"]
    if positive and negative:
        return ops.equal(ops.abs(x), inf).output(0)
    if positive or negative:
        return ops.equal(x, inf if positive else h.infinity(h.dtype_of(x), positive=False)).output(0)
    return None
