"""Shared test helpers: compile with fxvino, and prove what ran on OpenVINO."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

import fxvino


def run_fxvino(
    fn: Callable,
    *args: Any,
    options: Mapping[str, Any] | None = None,
    dynamic: bool | None = None,
    fullgraph: bool = False,
    **kwargs: Any,
) -> tuple[Any, fxvino.Report]:
    """Compile ``fn`` with fxvino, call it once under no_grad; return the output and the report."""
    compiled = torch.compile(fn, backend="fxvino", options=dict(options or {}), dynamic=dynamic, fullgraph=fullgraph)
    with fxvino.collect_reports() as report, torch.no_grad():
        out = compiled(*args, **kwargs)
    return out, report


class WithWeight(torch.nn.Module):
    """``fn(weight, x)`` of a frozen parameter ``weight``: the way a weight reaches a graph as a
    constant (a weight above ``FOLD_MAX_BYTES`` is left for OpenVINO to fold)."""

    def __init__(self, weight: torch.Tensor, fn: Callable[[torch.Tensor, torch.Tensor], Any]):
        super().__init__()
        self.w = torch.nn.Parameter(weight.clone(), requires_grad=False)
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(self.w, x)


def sixteen_bit_numerics(*dtypes: torch.dtype) -> list[Any]:
    """``dtypes`` as parameters, the 16-bit float ones marked ``numerics``: where an op is built of
    comparisons, selections and exact arithmetic, only they compute differently by CPU class
    (bf16 in f32 without bf16 kernels), so only they run again as an AVX2-only CPU."""
    import pytest

    return [
        pytest.param(d, id=str(d).removeprefix("torch."), marks=[pytest.mark.numerics] if d in SIXTEEN_BIT else [])
        for d in dtypes
    ]


SIXTEEN_BIT = (torch.float16, torch.bfloat16)


def python_command() -> list[str]:
    """The interpreter for a child process that must be the same CPU class as this one. Under
    ``make test-avx2`` this process is an emulated Haswell, but ``sys.executable`` starts a native
    child: a model cache entry it writes is keyed for the host's class, and this process misses it."""
    if os.environ.get("FXVINO_EMULATED_CPU") == "avx2":
        return [str(Path(__file__).with_name("qemu-python"))]
    return [sys.executable]


def cpu_computes_bf16() -> bool:
    """Whether OpenVINO's CPU plugin has bf16 kernels here (AVX512-BF16 or AMX, and no oneDNN ISA
    cap below them); elsewhere it runs a bf16 request in f32, so tests of bf16 numerics expect f32
    results on such machines."""
    from fxvino.devices import widened_types

    return torch.bfloat16 not in widened_types("CPU")


def assert_all_on_openvino(report: fxvino.Report, partitions: int | None = 1, ops: Sequence[str] = ()) -> None:
    """Nothing fell back, everything compiled ran in OpenVINO partitions (``ops`` among them)."""
    assert report.graphs, "fxvino compiled no graph"
    for op in ops:
        assert report.ov_ops[op] > 0, f"{op} did not run on OpenVINO: {dict(report.ov_ops)}"
    assert not report.fallbacks, f"unexpected fallbacks:\n{report}"
    assert not report.torch_ops, f"ops left in PyTorch: {dict(report.torch_ops)}"
    assert sum(report.ov_ops.values()) > 0, f"nothing ran on OpenVINO:\n{report}"
    if partitions is not None:
        assert report.num_ov_partitions == partitions, str(report)


def largest_constant_bytes(compiled: Any) -> int:
    """The size of the largest constant an ``ov.CompiledModel`` holds after the plugin's folding."""
    import math

    largest = 0
    for op in compiled.get_runtime_model().get_ordered_ops():
        if op.get_rt_info()["layerType"].astype(str) == "Const":
            out = op.output(0)
            largest = max(largest, math.prod(out.get_partial_shape().to_shape()) * out.get_element_type().size)
    return largest


def most_bytes_live(compiled: Any) -> int:
    """The most bytes of values inside an ``ov.CompiledModel`` alive at once in the plugin's
    execution order (outputs excluded): what its memory plan must hold at its peak."""
    import numpy as np

    nodes = list(compiled.get_runtime_model().get_ordered_ops())
    at = {n.get_friendly_name(): int(n.get_rt_info()["execOrder"].astype(str)) for n in nodes}
    live = np.zeros(max(at.values()) + 1, dtype=np.int64)
    for node in nodes:
        if node.get_rt_info()["layerType"].astype(str) in ("Const", "Input", "Output"):
            continue
        for value in node.outputs():
            readers = [r.get_node().get_friendly_name() for r in value.get_target_inputs()]
            if value.get_partial_shape().is_static and readers:
                size = int(np.prod(list(value.get_shape()))) * value.get_element_type().size
                live[at[node.get_friendly_name()] : max(at[r] for r in readers) + 1] += size
    return int(live.max())
