"""``helpers.always_true``: the run-time true that three passes use to keep OpenVINO from folding.

It must be true for every input (NaN and empty ones included), and stay in the compiled graph: a
folded one would bring back the constants those passes keep out."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest

from fxvino.lowering import helpers as h

SHAPES = {
    "static": ([2, 3], [(2, 3)]),
    "dynamic": ([-1, 3], [(0, 3), (1, 3), (4, 3)]),  # what dynamic=True graphs get
    "static_empty": ([0, 3], [(0, 3)]),
}


@pytest.mark.parametrize("kind", list(SHAPES))
@pytest.mark.parametrize("dtype", [ov.Type.f32, ov.Type.i64, ov.Type.boolean])
def test_it_is_true_for_every_input_and_is_not_folded(kind, dtype):
    shape, runs = SHAPES[kind]
    x = ops.parameter(shape, dtype)
    true = h.always_true(ov.Model([], [x]))
    assert true is not None
    compiled = ov.Core().compile_model(ov.Model([ops.convert(true, ov.Type.i32)], [x]), "CPU")
    result = compiled.get_runtime_model().get_results()[0]
    assert result.input_value(0).get_node().get_rt_info()["layerType"].astype(str) != "Const"
    for run in runs:
        value = np.full(run, np.nan if dtype == ov.Type.f32 else 0).astype(dtype.to_dtype())
        assert int(compiled([value])[0]) == 1, run


def test_a_model_without_inputs_has_none():
    assert h.always_true(ov.Model([ops.constant(np.ones(2, np.float32))], [])) is None
