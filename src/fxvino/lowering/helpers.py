"""Shape and dtype helpers shared by every op family.

Lowered values are ``ov.Output`` objects for tensors and symbolic ints (i64 scalars), and
plain Python values for static arguments. These helpers accept either, so lowerings read
like the ATen schema they implement. Add a helper here only if no existing one fits.
"""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import torch
import torch.fx

from fxvino.utils.dtypes import SIXTEEN_BIT_FLOATS, ov_type, to_numpy, torch_dtype

Value = Any  # ov.Output | int | float | bool | None | list

_NUMPY: dict[torch.dtype, Any] = {
    torch.float32: np.float32,
    torch.float16: np.float16,
    torch.float64: np.float64,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.int16: np.int16,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}


def is_output(v: Any) -> bool:
    return isinstance(v, ov.Output)


def const(value: Any, dtype: torch.dtype) -> ov.Output:
    """A constant of ``dtype`` from a Python scalar, list or numpy array."""
    if dtype == torch.bfloat16:
        # Rounded by torch: OpenVINO's constant folding of a Convert to bf16 truncates (0.1
        # became 0.099609375, not torch's 0.10009765625).
        return owned_constant(torch.from_numpy(np.asarray(value, dtype=np.float32)).bfloat16())
    return ops.constant(np.asarray(value, dtype=_NUMPY[dtype])).output(0)


def constant_value(v: ov.Output) -> torch.Tensor | None:
    """The value of a Constant's output as a (read-only) torch view of its data; None for any
    other producer."""
    node = v.get_node()
    if node.get_type_name() != "Constant":
        return None
    data = node.get_data()
    with warnings.catch_warnings():  # the Constant's own bytes: read, never written
        warnings.simplefilter("ignore", UserWarning)
        if v.get_element_type() == ov.Type.bf16:  # numpy shows bf16 as 16-bit integers
            return torch.from_numpy(data.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(data)


def owned_constant(t: torch.Tensor) -> ov.Output:
    """A Constant of a copy of ``t`` in memory OpenVINO owns (bf16 passed as its bits).

    A Constant made from an ov.Tensor over torch's memory does not keep that memory alive: for
    a tensor nobody else keeps (a rounded or contiguous copy), the Constant must own its data."""
    t = t.detach().contiguous()
    owned = ov.Tensor(ov_type(t.dtype), ov.Shape(list(t.shape)))
    owned.data[...] = to_numpy(t).view(owned.data.dtype)
    return ops.constant(owned).output(0)


def i64(value: Any) -> ov.Output:
    """An i64 tensor from ints, symbolic ints (scalar Outputs) or a list mixing both."""
    if is_output(value):
        return cast(value, torch.int64)
    if isinstance(value, (list, tuple)):
        return as_shape(value)
    return const(value, torch.int64)


def dtype_of(v: Value) -> torch.dtype:
    if is_output(v):
        return torch_dtype(v.get_element_type())
    if isinstance(v, bool):
        return torch.bool
    if isinstance(v, int):
        return torch.int64
    return torch.float32


def cast(v: Value, dtype: torch.dtype) -> ov.Output:
    """``v`` as an Output of ``dtype``; a no-op when it already is one."""
    if not is_output(v):
        return const(v, dtype)
    if v.get_element_type() == ov_type(dtype):
        return v
    if dtype == torch.bool and v.get_element_type().is_real():
        # torch: any nonzero is True, NaN included; the plugin converts NaN to False.
        return ops.not_equal(v, const(0, dtype_of(v))).output(0)
    return ops.convert(v, ov_type(dtype)).output(0)


def cast_like(v: Value, like: ov.Output) -> ov.Output:
    return cast(v, dtype_of(like))


def rank(x: ov.Output) -> int:
    r = x.get_partial_shape().rank
    if r.is_dynamic:
        raise NotImplementedError("tensors of dynamic rank are not supported")
    return r.get_length()


def static_shape(x: ov.Output) -> list[int | None]:
    """Dims known at lowering time, None where the dimension is dynamic."""
    return [d.get_length() if d.is_static else None for d in x.get_partial_shape()]


def one_element(v: Value) -> bool:
    """Whether ``v`` is a Python number or an output of one element (every dim statically 1)."""
    return not is_output(v) or all(d == 1 for d in static_shape(v))


def holds(dtype: torch.dtype, number: float | int | bool) -> bool:
    """Whether ``dtype`` holds the Python ``number`` exactly (0.1 is no bf16 or f16 value)."""
    return float(torch.tensor(float(number)).to(dtype)) == number


def shape_of(x: ov.Output) -> ov.Output:
    return ops.shape_of(x, ov.Type.i64).output(0)


def dim(x: ov.Output, d: int) -> ov.Output:
    """Size of dimension ``d`` of ``x`` as an i64 scalar (a constant when static)."""
    d = norm_dim(d, rank(x))
    known = static_shape(x)[d]
    if known is not None:
        return const(known, torch.int64)
    return ops.gather(shape_of(x), const(d, torch.int64), const(0, torch.int64)).output(0)


def as_shape(values: Sequence[Value]) -> ov.Output:
    """A 1-D i64 tensor from a list of ints and symbolic ints, folded to a constant when static."""
    if all(isinstance(v, int) for v in values):
        return const(list(values), torch.int64)
    parts = []
    for v in values:
        if is_output(v):
            v = cast(v, torch.int64)
            parts.append(ops.reshape(v, const([1], torch.int64), False).output(0) if rank(v) == 0 else v)
        else:
            parts.append(const([int(v)], torch.int64))
    return ops.concat(parts, 0).output(0)


def norm_dim(d: int, r: int) -> int:
    if r == 0 and d in (0, -1):
        return 0
    if not -r <= d < r:
        raise IndexError(f"dimension {d} out of range for rank {r}")
    return d % r


def norm_dims(dims: int | Sequence[int] | None, r: int) -> list[int]:
    if dims is None:
        return list(range(r))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({norm_dim(d, r) for d in dims})


def sym_key(v: Any) -> str | None:
    """The key a symbolic size is known by (its expression), or None for anything else."""
    return str(v.node.expr) if isinstance(v, torch.SymInt) else None


def meta(node: torch.fx.Node) -> Any:
    return node.meta["val"]


def out_dtype(node: torch.fx.Node, index: int = 0) -> torch.dtype:
    val = meta(node)
    if isinstance(val, (list, tuple)):
        val = val[index]
    return val.dtype


def used_outputs(node: torch.fx.Node) -> set[int]:
    """Which elements of a multi-output node its users read (via getitem)."""
    used = set()
    for u in node.users:
        if u.target is operator.getitem:
            used.add(u.args[1])
        else:
            return set(range(len(meta(node))))
    return used


def promote(node: torch.fx.Node, *values: Value) -> list[ov.Output]:
    """Cast operands to the type torch's default promotion gives for ``node``'s inputs."""
    dtype = promoted_dtype(node)
    return [cast(v, dtype) for v in values]


def promoted_dtype(node: torch.fx.Node) -> torch.dtype:
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    operands = []
    for a in node.args:
        if isinstance(a, torch.fx.Node):
            operands.append(meta(a))
        elif isinstance(a, (int, float, bool)):
            operands.append(a)
    if not operands:
        return out_dtype(node)
    return elementwise_dtypes(*operands, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]


def to_out(node: torch.fx.Node, *values: Value) -> list[ov.Output]:
    """Cast operands to ``node``'s output dtype (arithmetic computes in the result type)."""
    dtype = out_dtype(node)
    return [cast(v, dtype) for v in values]


# The CPU plugin's 8-bit integer arithmetic saturates (uint8 250 + 10 gives 255, int8 -(-128)
# gives 127); torch's wraps (4 and -128). Such arithmetic runs in i32, whose Convert back to 8
# bits wraps.
_SATURATING = (torch.uint8, torch.int8)


def wrapping_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype in which arithmetic producing ``dtype`` computes so that overflow wraps."""
    return torch.int32 if dtype in _SATURATING else dtype


def to_wrapping(node: torch.fx.Node, *values: Value) -> list[ov.Output]:
    """Like :func:`to_out`, in :func:`wrapping_dtype`: the result is cast back with :func:`cast`."""
    dtype = wrapping_dtype(out_dtype(node))
    return [cast(v, dtype) for v in values]


def opmath_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a composite op computes ``dtype`` in: ATen's CPU kernels compute 16-bit floats in
    f32 and round once (``opmath_type``), where OpenVINO would round each intermediate and each
    constant (ln 2 or SELU's scale) to 16 bits."""
    return torch.float32 if dtype in SIXTEEN_BIT_FLOATS else dtype


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def unsqueeze(x: ov.Output, axes: int | Sequence[int]) -> ov.Output:
    return ops.unsqueeze(x, const(axes, torch.int64)).output(0)


def squeeze(x: ov.Output, axes: int | Sequence[int]) -> ov.Output:
    return ops.squeeze(x, const(axes, torch.int64)).output(0)


def reshape(x: ov.Output, shape: Sequence[Value]) -> ov.Output:
    """torch's reshape: a 0 in ``shape`` is a zero-size dim (special_zero=False), not "copy it".

    To a 0-d result, a static all-ones tensor is squeezed instead: the CPU plugin crashes the
    process (SIGSEGV in compile_model) on MatMul -> Reshape([]), which is what
    ``einsum("i,i")`` and other dot products that end in a 0-d view lower to.
    """
    if len(shape) == 0 and rank(x) > 0 and all(d == 1 for d in static_shape(x)):
        return squeeze(x, list(range(rank(x))))
    return ops.reshape(x, as_shape(shape), False).output(0)


def transpose(x: ov.Output, order: Sequence[int]) -> ov.Output:
    return ops.transpose(x, const(list(order), torch.int64)).output(0)


def _quotient_estimate(a: ov.Output, b: ov.Output) -> ov.Output:
    """``floor(a / b)`` through f32, off by a few units once ``|a|`` passes 2**24."""
    f32 = ops.divide(ops.convert(a, "f32"), ops.convert(b, "f32"))
    return ops.convert(ops.floor(f32), a.get_element_type()).output(0)


def divmod_floor(a: ov.Output, b: ov.Output) -> tuple[ov.Output, ov.Output]:
    """Python's ``divmod`` of integers, exact in the int32 range.

    The CPU plugin computes integer Divide, FloorMod and Mod in f32, so they are exact only
    below 2**24 (``123456789 % 1000`` gave 792). Here a first f32 estimate of the quotient
    leaves an exact remainder ``a - q * b`` (integer Multiply and Subtract are exact, wrapping
    included) small enough that a second estimate is off by at most one, which the remainder's
    sign and size then correct. The corrections add 0 or 1 rather than Select, and compare only
    with 0: the plugin may run a Select or a comparison of i32 values in f32 too. Dividing by
    zero is undefined (PyTorch raises).
    """
    a = a if is_output(a) else a.output(0)  # a Node from ops.* straight
    b = cast_like(b, a)
    q = _quotient_estimate(a, b)
    r = ops.subtract(a, ops.multiply(q, b)).output(0)
    q2 = _quotient_estimate(r, b)
    q = ops.add(q, q2).output(0)
    r = ops.subtract(r, ops.multiply(q2, b)).output(0)
    zero = const(0, dtype_of(a))
    below = cast_like(
        ops.logical_and(ops.not_equal(r, zero), ops.not_equal(ops.less(r, zero), ops.less(b, zero))).output(0), a
    )
    q = ops.subtract(q, below).output(0)
    r = ops.add(r, ops.multiply(below, b)).output(0)
    above = cast_like(ops.greater_equal(ops.subtract(ops.abs(r), ops.abs(b)), zero).output(0), a)
    q = ops.add(q, above).output(0)
    r = ops.subtract(r, ops.multiply(above, b)).output(0)
    return q, r


def divmod_trunc(a: ov.Output, b: ov.Output) -> tuple[ov.Output, ov.Output]:
    """C's integer quotient and remainder (rounded toward zero), exact in the int32 range."""
    q, r = divmod_floor(a, b)
    a = a if is_output(a) else a.output(0)
    b = cast_like(b, a)
    zero = const(0, dtype_of(a))
    inexact = ops.logical_and(ops.not_equal(r, zero), ops.not_equal(ops.less(a, zero), ops.less(b, zero)))
    inexact = cast_like(inexact.output(0), a)
    return ops.add(q, inexact).output(0), ops.subtract(r, ops.multiply(inexact, b)).output(0)


def floor_div(a: ov.Output, b: ov.Output) -> ov.Output:
    """Integer floor division (:func:`divmod_floor`)."""
    return divmod_floor(a, b)[0]


def floor_mod(a: ov.Output, b: ov.Output) -> ov.Output:
    """Integer remainder with the divisor's sign (:func:`divmod_floor`)."""
    return divmod_floor(a, b)[1]


def trunc(x: ov.Output) -> ov.Output:
    """Float rounding toward zero (OpenVINO has no Trunc op)."""
    return ops.multiply(ops.sign(x), ops.floor(ops.abs(x))).output(0)


def trunc_div(a: ov.Output, b: ov.Output) -> ov.Output:
    """Integer division rounding toward zero (C semantics, :func:`divmod_trunc`)."""
    return divmod_trunc(a, b)[0]


def trunc_mod(a: ov.Output, b: ov.Output) -> ov.Output:
    """Integer remainder with the dividend's sign (C's ``%``, :func:`divmod_trunc`)."""
    return divmod_trunc(a, b)[1]


def wrap_negative(index: Value, size: Value) -> Value:
    """``index + size`` where ``index < 0``; Python ints fold when they can."""
    if isinstance(index, int):
        if index >= 0:
            return index
        if isinstance(size, int):
            return index + size
        return ops.add(i64(size), const(index, torch.int64)).output(0)
    index = cast(index, torch.int64)
    zero = const(0, torch.int64)
    return ops.select(ops.less(index, zero), ops.add(index, i64(size)), index).output(0)


def arange(n: Value) -> ov.Output:
    """``arange(n)`` as i64, for an int or an i64 scalar Output ``n``."""
    if isinstance(n, int):
        return const(np.arange(n, dtype=np.int64), torch.int64)
    return ops.range(const(0, torch.int64), i64(n), const(1, torch.int64), "i64").output(0)


def broadcast_shape(*values: ov.Output) -> ov.Output:
    """The numpy-broadcast shape of ``values`` (any ranks), as a 1-D i64 tensor."""
    zero = const(0, torch.int64)
    acc = ops.broadcast(zero, shape_of(values[0])).output(0)
    for v in values[1:]:
        acc = ops.add(acc, ops.broadcast(zero, shape_of(v))).output(0)
    return shape_of(acc)


def infinity(dtype: torch.dtype, positive: bool = True) -> ov.Output:
    return const(float("inf") if positive else float("-inf"), dtype)


def reduce_plain_extreme(plain: ov.Output, axes: ov.Output, largest: bool, keepdims: bool) -> ov.Output:
    """ReduceMax (ReduceMin) of a NaN-free tensor, right for slices made of infinities.

    The CPU plugin starts ReduceMax from the lowest finite value, so a slice of -inf comes out
    as -FLT_MAX (+FLT_MAX for ReduceMin over +inf): when no element equals the result, the
    slice is all infinities.
    """
    reduce = ops.reduce_max if largest else ops.reduce_min
    m = reduce(plain, axes, True).output(0)
    if not plain.get_element_type().is_real():
        return m if keepdims else ops.squeeze(m, axes).output(0)
    found = ops.reduce_logical_or(ops.equal(plain, m), axes, keepdims)
    if not keepdims:
        m = ops.squeeze(m, axes).output(0)
    return ops.select(found, m, infinity(dtype_of(plain), not largest)).output(0)


def reduce_extreme(x: ov.Output, axes: ov.Output, largest: bool, keepdims: bool) -> ov.Output:
    """torch.amax/amin semantics: a NaN anywhere in a slice makes its result NaN."""
    if not x.get_element_type().is_real():
        if dtype_of(x) == torch.bool:
            reduce = ops.reduce_logical_or if largest else ops.reduce_logical_and
            return reduce(x, axes, keepdims).output(0)
        return reduce_plain_extreme(x, axes, largest, keepdims)
    nan = ops.is_nan(x).output(0)
    plain = ops.select(nan, infinity(dtype_of(x), not largest), x).output(0)
    m = reduce_plain_extreme(plain, axes, largest, keepdims)
    any_nan = ops.reduce_logical_or(nan, axes, keepdims)
    return ops.select(any_nan, const(float("nan"), dtype_of(x)), m).output(0)


def always_true(model: ov.Model) -> ov.Output | None:
    """A boolean scalar that OpenVINO cannot fold: ``x == x or x != x`` of a run-time input's first
    element (true for NaN too). Where no input is static and non-empty (``dynamic=True``, empty
    inputs), the same test of an input's first zero or one elements, reduced with And, which is
    true over none. None when the model has no input of a known element type."""
    params = model.get_parameters()
    for param in params:
        shape = param.get_output_partial_shape(0)
        if shape.is_static and math.prod(shape.to_shape()) > 0:
            first = ops.gather(reshape(param.output(0), [-1]), const(0, torch.int64), const(0, torch.int64))
            return ops.logical_or(ops.equal(first, first), ops.not_equal(first, first)).output(0)
    for param in params:
        if param.get_output_element_type(0).is_dynamic():
            continue
        head = ops.slice(reshape(param.output(0), [-1]), i64([0]), i64([1]), i64([1]))
        same = ops.logical_or(ops.equal(head, head), ops.not_equal(head, head))
        return ops.reduce_logical_and(same, i64([0]), False).output(0)
    return None
