"""What eager checks at run time, checked in the graph: indices eager rejects and integer
division by zero raise eager's error.

OpenVINO's gathers and scatters take an index out of range without a word (a Gather returns
zeros, a scatter skips the update), where PyTorch raises and Inductor's kernels assert: an
embedding of a token id past the vocabulary would otherwise come back as a silent result. Each
lowering of data-dependent indexing adds the condition its indices meet (``in_range``, which also
hands the op an index with nothing out of range), as does an ``_assert_async`` PyTorch's
decompositions put in a graph (``holds``: ``one_hot``'s classes), and an integer division or
remainder its divisor's (``nonzero``: eager raises ``ZeroDivisionError``, the plugin returned a
number). ``lower_graph`` returns their conjunction as one more boolean result after the graph's
own (``CHECKS`` marks its spec), and the partition's guard (partitioning/guarded.py) runs the
partition in PyTorch when it is false: torch then raises its own error.

The same machinery keeps int64 exact. The CPU plugin computes int64 as int32 (a sum past 2**31
wrapped, ``x * 2**33`` saturated, a float cast to int64 gave -2**31), so an int64 result that can
leave the int32 range (``stays_int32``: sums, products, running sums, casts from floats) adds the
condition that an f32 estimate of it stays inside: when it does not, the partition runs eagerly
and returns torch's values (reported once). Inputs are checked before the call
(runtime/int32_range.py), frozen constants while lowering.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h

# The ``value`` of the OutputSpec of a graph's checks (a string survives the model cache's JSON).
CHECKS = "fxvino_checks"
# How far from zero an f32 estimate of an int64 result may be for the exact value to fit in int32:
# the estimates are off by a few hundred at most near 2**31 (f32's spacing there is 128 or 256).
INT32_ESTIMATE_LIMIT = float(2**31 - 4096)


def in_range(ctx: Any, index: Any, size: Any, negative: bool = False) -> Any:
    """Require ``0 <= index < size`` (``-size <= index`` with ``negative``) of every element, and
    return the index with every element out of range replaced by 0: the op never sees one (the
    CPU plugin's GatherElements stopped the inference on it, leaving later results unwritten)."""
    if ctx.checks is None or not h.is_output(index):
        return index
    i = h.cast(index, torch.int64)
    n = h.i64(size)
    low = ops.negative(n).output(0) if negative else h.const(0, torch.int64)
    ok = ops.logical_and(ops.greater_equal(i, low), ops.less(i, n)).output(0)
    holds(ctx, ok)
    return ops.select(ok, i, h.const(0, torch.int64)).output(0)


def along(ctx: Any, x: Any, dim: int, index: Any, negative: bool = False) -> Any:
    """``in_range`` for an index into ``x`` along ``dim`` (a 0-d ``x`` has one position)."""
    size = h.dim(x, h.norm_dim(dim, h.rank(x))) if h.rank(x) > 0 else 1
    return in_range(ctx, index, size, negative)


def each_along(ctx: Any, x: Any, indices: Any) -> list[Any]:
    """``along`` for advanced indexing's per-dim indices (``x[i, j]``, negative ones wrapping);
    None and boolean masks pass as they are (a mask picks positions it cannot miss)."""
    return [
        i if i is None or h.dtype_of(i) in (torch.bool, torch.uint8) else along(ctx, x, d, i, True)
        for d, i in enumerate(indices)
    ]


def holds(ctx: Any, condition: Any) -> None:
    """Require a condition PyTorch asserts (every element true)."""
    if ctx.checks is None or not h.is_output(condition):
        return
    flat = h.reshape(h.cast(condition, torch.bool), [-1])
    ctx.checks.append(ops.reduce_logical_and(flat, h.const([0], torch.int64), False).output(0))


def nonzero(ctx: Any, divisor: Any) -> None:
    """Require an integer divisor with no zero element (PyTorch raises ``ZeroDivisionError``)."""
    if ctx.checks is not None and h.is_output(divisor):
        holds(ctx, ops.not_equal(divisor, h.const(0, h.dtype_of(divisor))).output(0))


def stays_int32(ctx: Any, node: Any, estimate: Callable[[], Any]) -> None:
    """For an int64 result (which the CPU plugin computes in int32), require ``estimate()`` (an f32
    value as large as the result's, made only when checked) to stay inside int32."""
    if ctx.checks is None or h.out_dtype(node) != torch.int64:
        return
    value = estimate()
    fits = ops.less_equal(ops.abs(value), h.const(INT32_ESTIMATE_LIMIT, torch.float32)).output(0)
    holds(ctx, fits)


def total_magnitude(x: Any, axes: Any) -> ov.Output:
    """An f32 bound on every partial sum of ``x`` along ``axes`` (for ``stays_int32``): the sum of
    magnitudes."""
    return _widened(ops.reduce_sum(ops.abs(as_f32(x)), axes, False).output(0), x)


def accumulated_magnitude(x: Any, added: Any) -> ov.Output:
    """An f32 bound on ``x`` with ``added`` summed into its elements (a scatter's sum): every
    magnitude of both."""
    return ops.add(total_magnitude(x, _all_axes(x)), total_magnitude(added, _all_axes(added))).output(0)


def _all_axes(x: Any) -> ov.Output:
    return h.const(list(range(h.rank(x))), torch.int64)


def product_magnitude(x: Any, axes: Any, running: bool = False) -> ov.Output:
    """An f32 bound on the product of ``x`` along ``axes`` (for ``stays_int32``); with ``running``,
    on every partial product too (a factor below 1 counts as 1: ``[2**20, 2**20, 0]``'s second
    partial product is 2**40)."""
    magnitudes = ops.abs(as_f32(x)).output(0)
    if running:
        magnitudes = ops.maximum(magnitudes, h.const(1.0, torch.float32)).output(0)
    return _widened(ops.reduce_prod(magnitudes, axes, False).output(0), x)


def _widened(value: ov.Output, x: Any) -> ov.Output:
    """``value``, a sum or product of ``x``'s elements in f32, widened by its worst rounding
    (``n`` terms: ``n * 2**-24`` relative, doubled)."""
    n = h.cast(ops.reduce_prod(h.shape_of(x), h.const(0, torch.int64), False).output(0), torch.float32)
    widen = ops.add(h.const(1.0, torch.float32), ops.multiply(n, h.const(2.0**-23, torch.float32)))
    return ops.multiply(value, widen).output(0)


def as_f32(v: Any) -> Any:
    """``v`` (an Output, or a Python number exactly as given) as f32, for ``stays_int32``."""
    return h.cast(v, torch.float32) if h.is_output(v) else h.const(float(v), torch.float32)


def checked(outputs: Any) -> bool:
    """Whether a graph's output specs end with its checks' result."""
    return bool(outputs) and outputs[-1].value == CHECKS


def combined(checks: list[ov.Output]) -> ov.Output:
    """All of ``checks`` as one boolean scalar."""
    return functools.reduce(lambda a, b: ops.logical_and(a, b).output(0), checks)
