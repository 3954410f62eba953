"""16-bit floats rounded where PyTorch rounds them, on devices that compute them in f32.

PyTorch rounds a bf16 or f16 value to its type after every op and at every cast. OpenVINO's CPU
plugin, compiling with fxvino's f32 inference precision, computes f16 graphs in f32 on every
CPU, and bf16 graphs in f32 on CPUs without bf16 kernels (AVX2-only ones, AVX-512 without
AVX512-BF16): it drops ``Convert(f32 -> 16-bit -> f32)`` pairs, so ``x.half().float()`` was
``x``, and converts a bf16 output at the boundary by truncation, so ``x.to(torch.bfloat16)``
was biased toward zero on 1,035 of 4,096 random values on a Zen 3.

:func:`round_like_torch` rounds, by f32 arithmetic that no Convert elimination can drop, every
value that leaves 16-bit arithmetic where a user can see it: graph outputs, and casts to and
from the 16-bit type (``.to``, ``type_as``, autocast boundaries). Arithmetic between those
points stays in f32 on such devices (more precise than eager; ``docs/user-guide/guarantees.md``).
Values known to be exact (inputs, constants, rounded casts and what only moves them) are not
rounded again.

Casts of float constants to 16 bits are made by torch on every device (:func:`cast_constants`):
OpenVINO folds them itself, and not as torch rounds.
"""

from __future__ import annotations

from collections.abc import Collection

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.constant_values import ConstantValues
from fxvino.utils.dtypes import ov_type

# Veltkamp's splitter 2**(24 - s) + 1 leaves the high half of an f32 as the f32 rounded to
# nearest (ties to even, checked over whole binades against torch) at s significant bits.
_SPLITTERS = {torch.bfloat16: 65537.0, torch.float16: 8193.0}
# ``x * 65537`` overflows above ~5e33: such values are scaled by 2**-32 into range first.
_BF16_SCALED_ABOVE = 2.0**100
_BF16_SCALE = 2.0**-32
# f16: below its smallest normal (2**-14) values round to multiples of 2**-24 (scaled to integers
# and rounded half to even: the plugin merges an added and subtracted constant into nothing);
# from 65520 on (the tie above its largest finite value, 65504) they round to infinity.
_F16_NORMAL = 2.0**-14
_F16_SUBNORMAL_STEP = 2.0**-24
_F16_OVERFLOW = 65520.0

# Ops that move or select values without computing new ones: exact inputs give exact outputs.
_MOVES = {
    "Reshape": (0,),
    "Squeeze": (0,),
    "Unsqueeze": (0,),
    "Transpose": (0,),
    "Broadcast": (0,),
    "Gather": (0,),
    "StridedSlice": (0,),
    "Slice": (0,),
    "Select": (1, 2),
    "Concat": None,  # every input
}


def split(x: ov.Output, splitter: float) -> tuple[ov.Output, ov.Output]:
    """Veltkamp's split of an f32 ``x`` into a high part of fewer bits and the exact rest.

    Plain multiplies and subtractions: checked to survive the plugin (no FMA contraction)."""
    c = ops.multiply(x, h.const(splitter, torch.float32))
    high = ops.subtract(c, ops.subtract(c, x)).output(0)
    return high, ops.subtract(x, high).output(0)


def round_to(x: ov.Output, dtype: torch.dtype) -> ov.Output:
    """An f32 ``x`` rounded to the nearest ``dtype`` (bf16 or f16) value, as f32; NaN and the
    infinities kept. Subnormal bf16 values are f32 subnormals, which the plugin flushes anyway."""
    f32 = torch.float32
    size = ops.abs(x).output(0)
    if dtype == torch.bfloat16:
        large = ops.less(h.const(_BF16_SCALED_ABOVE, f32), size)
        scale = ops.select(large, h.const(_BF16_SCALE, f32), h.const(1.0, f32)).output(0)
        rounded = ops.divide(split(ops.multiply(x, scale).output(0), _SPLITTERS[dtype])[0], scale).output(0)
        # |x| < inf rather than IsFinite, which OpenVINO does not fold: a weight computed from
        # constants was checked on every call (IsFinite over a 1024x1024 weight per call).
        finite = ops.less(size, h.infinity(f32))
        return ops.select(finite, rounded, x).output(0)
    if dtype == torch.float16:
        rounded = split(x, _SPLITTERS[dtype])[0]
        steps = ops.round(ops.multiply(x, h.const(1 / _F16_SUBNORMAL_STEP, f32)), "half_to_even")
        subnormal = ops.multiply(steps, h.const(_F16_SUBNORMAL_STEP, f32))
        rounded = ops.select(ops.less(size, h.const(_F16_NORMAL, f32)), subnormal, rounded)
        overflow = ops.less_equal(h.const(_F16_OVERFLOW, f32), size)  # infinities too; NaN stays
        return ops.select(overflow, ops.multiply(x, h.infinity(f32)), rounded).output(0)
    raise ValueError(f"round_to rounds to bfloat16 or float16, not {dtype}")


_SIXTEEN_BITS = {ov.Type.bf16: torch.bfloat16, ov.Type.f16: torch.float16}
_WIDE_FLOATS = (ov.Type.f32, ov.Type.f64)
# What a cast to bf16 must round: f16 has three more significand bits than bf16 (a dynamic
# f16 -> bf16 cast truncated 391 of 4,096 values on an AMX Xeon, 779 of 4,096 normal ones).
_FINER_THAN_BF16 = (*_WIDE_FLOATS, ov.Type.f16)
# The sources a cast to each 16-bit type rounds (f16 -> bf16 constants were folded by truncation
# too: 195,863 of 1,048,576 values of a 2 MB f16 buffer cast to bf16, on a Zen 5).
_FINER_THAN = {ov.Type.bf16: _FINER_THAN_BF16, ov.Type.f16: _WIDE_FLOATS}


def cast_constants(model: ov.Model) -> int:
    """Give each Convert of float constants to a narrower bf16 or f16 torch's cast of them.

    OpenVINO folds such a Convert when it compiles, and its bf16 is not torch's: a 4 MB weight
    cast under autocast (fxvino folds only casts up to ``FOLD_MAX_BYTES`` in torch) differed in
    a quarter of its values, on an AMX Xeon as on an AVX2 CPU. A Constant's cast is made here by
    torch; the Convert stays, now from bf16 to bf16 (nothing to do; its output keeps its names).
    A value computed from float Constants alone (a transposed weight, a scaled one) is rounded
    by :func:`round_to`'s f32 arithmetic, which OpenVINO folds exactly, so its Convert then only
    meets values of the 16-bit type. Returns how many casts it gave.
    """
    cast = 0
    # Computed from float Constants alone: a weight decompressed from integers (Convert(i8) ->
    # Subtract -> Multiply) stays in the shape the plugin keeps compressed. An f16 weight widened
    # (``w.float() * s``) passes: cast to 16 bits after, it is folded, and truncated, anyway.
    from_constants = ConstantValues(through_decompression=False)
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Convert":
            continue
        target_type, source = node.get_output_element_type(0), node.input_value(0)
        if source.get_element_type() not in _FINER_THAN.get(target_type, ()):
            continue
        target = _SIXTEEN_BITS[target_type]
        data = h.constant_value(source)
        if data is not None:
            node.input(0).replace_source_output(h.owned_constant(data.to(target)))
        elif from_constants(source.get_node()):
            if source.get_element_type() != ov.Type.f32:  # torch casts f64 and f16 through f32 too
                source = ops.convert(source, ov.Type.f32).output(0)
            node.input(0).replace_source_output(round_to(source, target))
        else:
            continue
        cast += 1
    return cast


# Runtime info of the Converts :func:`op_operand` and :func:`op_result` make inside one op's
# computation, which round_like_torch does not round.
_WITHIN_OP = "fxvino_within_op"


def op_operand(v: h.Value, dtype: torch.dtype = torch.float32) -> ov.Output:
    """A 16-bit operand widened to f32 (or ``dtype``) for an op that computes in f32, as ATen's
    kernels do. Where the device computes the type in f32 the operand is not rounded first (a
    16-bit op's operand would not be either: a chain stays in f32 between observed values;
    rounding each such cast made a chain of three f16 ops 3-4x slower). A Python number is its
    constant."""
    if not h.is_output(v):
        return h.const(v, dtype)
    return _within_op(h.cast(v, dtype), v)


def opmath_operands(node: torch.fx.Node, *values: h.Value) -> list[ov.Output]:
    """``node``'s operands in the type ATen's kernel computes its result type in
    (:func:`helpers.opmath_dtype`: f32 for 16-bit floats), widened as :func:`op_operand` widens
    them; cast the result back with :func:`op_result`. For composites (``erf``, ``softplus``,
    ``atan2``, ...) whose intermediates ATen never rounds to 16 bits."""
    dtype = h.opmath_dtype(h.out_dtype(node))
    return [op_operand(v, dtype) for v in values]


def op_result(v: ov.Output, dtype: torch.dtype) -> ov.Output:
    """An op's result computed in f32, cast to its 16-bit ``dtype``: rounded where the value is
    observed (a Result, a cast), not here, where the device computes ``dtype`` in f32 (see
    :func:`op_operand`)."""
    return _within_op(h.cast(v, dtype), v)


def _within_op(cast: ov.Output, source: ov.Output) -> ov.Output:
    if cast is not source:
        cast.get_node().get_rt_info()[_WITHIN_OP] = ""
    return cast


def round_like_torch(model: ov.Model, widened: Collection[torch.dtype]) -> None:
    """Round ``model``'s values of the ``widened`` types (those its device computes in f32)
    where PyTorch's rounding is observable: before a Convert to such a type, before a Convert
    from it, and before a Result of it. Casts of float constants are torch's on every device."""
    cast = cast_constants(model)
    types = {ov_type(t): t for t in widened}
    if not types:
        if cast:
            model.validate_nodes_and_infer_types()
        return
    exact: set[ov.Node] = set()
    constant = ConstantValues()
    for node in model.get_ordered_ops():
        kind = node.get_type_name()
        if kind == "Convert":
            source = node.input_value(0)
            # Weights decompressed from integers (NNCF, torchao: Convert(i8) -> Subtract -> Multiply,
            # in f16) are left whole: the plugin keeps them compressed inside its products only in
            # that shape, computing them in f32 (within f16's rounding of eager's; tested).
            if constant(source.get_node()):
                continue
            if _WITHIN_OP in node.get_rt_info():
                continue
            if source.get_element_type() in types:  # leaving 16-bit arithmetic
                rounded = _rounded_16bit(source, types[source.get_element_type()], exact)
                if rounded is not None:
                    node.input(0).replace_source_output(rounded)
                    source = rounded
            target = node.get_output_element_type(0)
            if target in types:  # entering it: torch rounds, the plugin may drop or truncate
                if source.get_element_type() != ov.Type.f32:
                    source = ops.convert(source, ov.Type.f32).output(0)
                node.input(0).replace_source_output(round_to(source, types[target]))
                exact.add(node)
        elif kind == "Result":
            value = node.input_value(0)
            dtype = types.get(value.get_element_type())
            if dtype is not None:
                rounded = _rounded_16bit(value, dtype, exact)
                if rounded is not None:
                    back = ops.convert(rounded, value.get_element_type())
                    exact.add(back)
                    node.input(0).replace_source_output(back.output(0))
    model.validate_nodes_and_infer_types()


def round_bf16_casts(model: ov.Model, dynamic_only: bool) -> int:
    """Round the value before each cast of a finer float to bf16 that the CPU plugin would
    truncate (all of them, or with ``dynamic_only`` those of dynamic shape); returns how many.

    The plugin's plain Convert truncates f32 to bf16, on CPUs with bf16 kernels too (1,035 of
    4,096 random values on a Zen 4 with AVX512-BF16), where its snippets round to nearest even,
    as torch does. A cast escapes the snippets when its shape is dynamic or when the graph
    compiles with ``SNIPPETS_MODE=DISABLE`` (training graphs, quantized residual CNNs): every
    autocast boundary of a training forward, and of a dynamic-shape graph, was biased toward
    zero. Casts of constants are torch's already (:func:`cast_constants`); values from bf16
    (``x.float().bfloat16()``) are exact and left alone.
    """
    rounded = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Convert" or node.get_output_element_type(0) != ov.Type.bf16:
            continue
        if dynamic_only and node.get_output_partial_shape(0).is_static:
            continue
        source = node.input_value(0)
        if (
            source.get_element_type() not in _FINER_THAN_BF16
            or _from_bf16(source)
            or h.constant_value(source) is not None
        ):
            continue
        if source.get_element_type() != ov.Type.f32:
            source = ops.convert(source, ov.Type.f32).output(0)
        node.input(0).replace_source_output(_nearest_bf16(source))
        rounded += 1
    if rounded:
        model.validate_nodes_and_infer_types()
    return rounded


def _nearest_bf16(x: ov.Output) -> ov.Output:
    """An f32 ``x`` rounded to the nearest bf16 in five elementwise ops (:func:`round_to` takes
    ten): in a graph without snippets each is a pass over memory of its own, and casts of dynamic
    shape under autocast (BERT: 16 per call) cost 11% of a call this way, 26% with
    :func:`round_to`. Where the split overflows (beyond ~5.2e33 = 2**112 in magnitude) ``x`` is
    left as it is, as are NaN and the infinities: the Convert after it truncates those few values."""
    high = split(x, _SPLITTERS[torch.bfloat16])[0]
    return ops.select(ops.is_nan(high), x, high).output(0)


def _from_bf16(value: ov.Output) -> bool:
    """Whether ``value`` is a Convert of a bf16 value (which every wider float holds exactly)."""
    node = value.get_node()
    return node.get_type_name() == "Convert" and node.input_value(0).get_element_type() == ov.Type.bf16


def _rounded_16bit(value: ov.Output, dtype: torch.dtype, exact: set[ov.Node]) -> ov.Output | None:
    """``value`` (of a widened type) rounded to it, as f32; None when it is known to be exact."""
    if _is_exact(value.get_node(), exact):
        return None
    return round_to(ops.convert(value, ov.Type.f32).output(0), dtype)


def _is_exact(node: ov.Node, exact: set[ov.Node]) -> bool:
    if node in exact or node.get_type_name() in ("Parameter", "Constant"):
        return True
    inputs = _MOVES.get(node.get_type_name(), ())
    if inputs == ():
        return False
    indices = range(node.get_input_size()) if inputs is None else inputs
    if all(_is_exact(node.input_value(i).get_node(), exact) for i in indices):
        exact.add(node)
        return True
    return False
