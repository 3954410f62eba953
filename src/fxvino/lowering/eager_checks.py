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
"""

from __future__ import annotations

import functools
from typing import Any

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h

# The ``value`` of the OutputSpec of a graph's checks (a string survives the model cache's JSON).
CHECKS = "fxvino_checks"


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


def checked(outputs: Any) -> bool:
    """Whether a graph's output specs end with its checks' result."""
    return bool(outputs) and outputs[-1].value == CHECKS


def combined(checks: list[ov.Output]) -> ov.Output:
    """All of ``checks`` as one boolean scalar."""
    return functools.reduce(lambda a, b: ops.logical_and(a, b).output(0), checks)
