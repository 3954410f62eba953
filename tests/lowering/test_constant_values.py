"""ConstantValues, the shared answer to "is this value computed from constants alone?", on
small OpenVINO graphs built here: its rules, nodes inserted after it answered, and chains deeper
than Python's recursion limit."""

from __future__ import annotations

import sys

import numpy as np
import openvino as ov
import openvino.opset16 as ops

from fxvino.lowering.constant_values import ConstantValues


def _weight(dtype: type = np.float32) -> ov.Output:
    return ops.constant(np.arange(6, dtype=dtype).reshape(2, 3)).output(0)


def test_constants_and_what_they_compute_are_constant_inputs_are_not():
    x = ops.parameter([2, 3], ov.Type.f32)
    scaled = ops.multiply(ops.transpose(_weight(), ops.constant(np.array([1, 0]))), np.float32(2.0))
    mixed = ops.add(_weight(), x)
    judge = ConstantValues()
    assert judge(scaled.output(0).get_node())
    assert not judge(mixed)
    assert not judge(x)


def test_a_decompressed_integer_weight_counts_only_when_asked_to():
    decompressed = ops.multiply(ops.convert(_weight(np.int8), ov.Type.f32), np.float32(0.5))
    assert ConstantValues()(decompressed)
    assert not ConstantValues(through_decompression=False)(decompressed)
    float_cast = ops.convert(_weight(np.float16), ov.Type.f32)
    assert ConstantValues(through_decompression=False)(float_cast)


def test_state_reads_are_new_each_call_though_their_inputs_are_constants():
    read = ops.read_value(_weight(), "state", ov.Type.f32, ov.PartialShape([2, 3]))
    assert not ConstantValues()(ops.add(read, _weight()))


def test_nodes_inserted_after_an_answer_are_judged_by_their_inputs():
    x = ops.parameter([2, 3], ov.Type.f32)
    judge = ConstantValues()
    weight = ops.negative(_weight())
    assert judge(weight)
    assert judge(ops.abs(weight))  # new, over a node already judged
    assert not judge(ops.maximum(ops.abs(weight), x))


def test_a_chain_deeper_than_the_recursion_limit_is_judged():
    value = _weight()
    for _ in range(sys.getrecursionlimit() + 500):
        value = ops.negative(value).output(0)
    assert ConstantValues()(value.get_node())
