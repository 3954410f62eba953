"""16-bit floats are rounded as PyTorch rounds them, on every CPU class.

The CPU plugin computes f16 in f32 everywhere and bf16 in f32 where the CPU has no bf16 kernels
(it then dropped cast pairs and truncated bf16 outputs). Expectations come from eager on the
machine the test runs on; ``make test-avx2`` runs these as an AVX2-only CPU.
"""

from __future__ import annotations

import os

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest
import torch

import fxvino
from fxvino.devices import bf16_capped, core, cpu_features, widened_types
from fxvino.lowering.rounding import round_like_torch, round_to
from harness import WithWeight, assert_all_on_openvino, cpu_computes_bf16, run_fxvino

pytestmark = pytest.mark.numerics

SIXTEEN = [torch.bfloat16, torch.float16]


def _values() -> torch.Tensor:
    """Random values of every magnitude, ties of both types, and the edges of their ranges."""
    torch.manual_seed(0)
    random = torch.randn(2048) * torch.logspace(-8, 8, 2048)
    # An f32 halfway between two bf16 (f16) values: the low 16 (13) bits are 1000...0.
    ties = torch.tensor(
        [1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, -(2.0 + 2.0**-7), 2.0**-20 * 1.5]
    )
    edges = torch.tensor(
        [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 65504.0, 65519.0, 65520.0, -65536.0, 3e38, -3.4e38]
        + [1e34, 6e-5, 6.2e-5, 3e-8, 2.9e-8, -1e-7, 1e-30, 0.1, 1 / 3]
    )
    return torch.cat([random, ties, edges])


def _assert_same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype
    same = (got == want) | (got.isnan() & want.isnan())
    examples = [(got[i].item(), want[i].item()) for i in (~same).nonzero()[:5, 0].tolist()]
    assert same.all(), f"{int((~same).sum())} of {same.numel()} differ (fxvino, eager): {examples}"


@pytest.mark.parametrize("dtype", SIXTEEN, ids=str)
@pytest.mark.parametrize(
    "fn",
    [
        lambda x, dt: x.to(dt),
        lambda x, dt: (x * 2).to(dt),
        lambda x, dt: x.to(dt).float() * 3,
        lambda x, dt: x.to(dt) * x.to(dt),
        lambda x, dt: x.to(dt).type_as(x) + x.flip(0).to(dt).float(),
        lambda x, dt: (x.to(dt) + 0.1).float(),
        lambda x, dt: x.to(dt).to(torch.float16 if dt == torch.bfloat16 else torch.bfloat16),
    ],
    ids=["cast", "computed_cast", "round_trip", "product", "type_as", "constant_then_cast", "between_16bit"],
)
def test_16bit_values_are_rounded_like_torch(fn, dtype):
    """Where the plugin computed in f32, ``x.to(bf16)`` truncated (1,035 of 4,096 values on a
    Zen 3) and ``x.half().float()`` was ``x`` itself (4,095 of 4,096 on an AMX Xeon)."""
    x = _values()
    out, report = run_fxvino(lambda t: fn(t, dtype), x, fullgraph=True)
    _assert_same(out, fn(x, dtype))
    assert_all_on_openvino(report)


def _weight(dtype: torch.dtype) -> torch.Tensor:
    """A 1024x1024 weight of ``_values()`` (within f16's range when it is f16)."""
    weight = _values().repeat(512)[: 1024 * 1024].view(1024, 1024)
    return weight.clamp(-65504, 65504).to(dtype) if dtype == torch.float16 else weight


# (weight, cast): an f16 weight cast to bf16 was folded by truncation too (195,863 of 1,048,576
# values of a random f16 buffer on a Zen 5).
WEIGHT_CASTS = [(torch.float32, torch.bfloat16), (torch.float32, torch.float16), (torch.float16, torch.bfloat16)]
WEIGHT_CAST_IDS = ["f32-bf16", "f32-f16", "f16-bf16"]


@pytest.mark.parametrize("source, dtype", WEIGHT_CASTS, ids=WEIGHT_CAST_IDS)
def test_a_weight_too_large_to_fold_in_torch_is_cast_like_torch(source, dtype):
    """A frozen weight's cast above ``FOLD_MAX_BYTES`` is left to OpenVINO, which folds casts of
    its own constants (and truncated small ones where the CPU has no bf16 kernels)."""
    from fxvino.passes.freezing import FOLD_MAX_BYTES

    weight = _weight(source)
    assert weight.numel() * dtype.itemsize > FOLD_MAX_BYTES

    # times ones: the cast weight itself, through a product
    model, ones = WithWeight(weight, lambda w, x: w.to(x.dtype) * x).eval(), torch.ones(1024, dtype=dtype)
    out, report = run_fxvino(model, ones)
    _assert_same(out.flatten(), model(ones).flatten())
    assert report.graphs[0].frozen_inputs == 1, "the weight was not frozen: OpenVINO did not fold its cast"
    assert_all_on_openvino(report)


@pytest.mark.parametrize("source, dtype", WEIGHT_CASTS, ids=WEIGHT_CAST_IDS)
@pytest.mark.parametrize(
    "chain",
    [lambda w: w.t(), lambda w: w.float() * 3, lambda w: w.double()],
    ids=["transposed", "scaled", "f64"],
)
def test_a_weight_computed_before_its_cast_is_cast_like_torch(chain, source, dtype):
    """A cast of a value computed from a large weight (a transpose, a product) is folded by
    OpenVINO from Constant -> op -> Convert: fxvino rounds it before the Convert, by ops that
    OpenVINO folds as well (an IsFinite in the rounding was left to run on every call)."""
    from fxvino.tools.exec_graph import constant_work

    weight = _weight(source)

    model, ones = WithWeight(weight, lambda w, x: chain(w).to(x.dtype) * x).eval(), torch.ones(1024, dtype=dtype)
    out, report = run_fxvino(model, ones)
    _assert_same(out.flatten(), model(ones).flatten())
    assert report.graphs[0].frozen_inputs == 1, "the weight was not frozen: OpenVINO did not fold its cast"
    assert_all_on_openvino(report)
    assert constant_work(report.graphs[0].ov_partitions[0].compiled) == []


@pytest.mark.parametrize("dtype", SIXTEEN, ids=str)
def test_an_autocast_boundary_rounds_the_16bit_result(dtype):
    """A product under autocast leaves in the 16-bit type and is cast back for a float op: the
    cast sees torch's rounded product. Operands of few bits keep every sum exact in f32, so the
    accumulation order of either GEMM cannot matter: only the rounding can."""
    torch.manual_seed(1)
    x = torch.randint(-64, 64, (8, 2)).float() / 64 * (1 + torch.rand(8, 1).round() / 256)
    w = torch.randint(-64, 64, (16, 2)).float() / 32

    def fn(a, b):
        with torch.autocast("cpu", dtype=dtype):
            y = torch.nn.functional.linear(a, b)
        return y.float() * 7

    out, report = run_fxvino(fn, x, w, fullgraph=True)
    _assert_same(out, fn(x, w))
    assert_all_on_openvino(report)


CASTS = {
    "cast": lambda x: x.to(torch.bfloat16),
    "computed_cast": lambda x: (x * 2).to(torch.bfloat16),
    "cast_sum": lambda x: x.to(torch.bfloat16) + x.flip(0).to(torch.bfloat16),
}


@pytest.mark.parametrize("fn", CASTS.values(), ids=CASTS.keys())
@pytest.mark.parametrize("graph", ["training", "dynamic", "snippets_off"])
def test_bf16_casts_round_where_the_plugin_has_no_snippets(graph, fn):
    """The CPU plugin's plain Convert truncates f32 to bf16, with bf16 kernels too (1,035 of 4,096
    values on a Zen 4); only its snippets round. Training graphs compile without snippets, and a
    cast of dynamic shape is not tokenized: such casts are rounded by the graph itself."""
    x = _values()[:2048]
    x = torch.where(x.isfinite(), x, 0.0).clamp(-1e33, 1e33)  # beyond 2^112 such casts truncate
    _assert_compiled_cast_is_eagers(fn, x, graph)


@pytest.mark.parametrize("graph", ["training", "dynamic", "snippets_off"])
def test_bf16_casts_of_f16_round_where_the_plugin_has_no_snippets(graph):
    """f16 holds three significand bits more than bf16: the plain Convert truncated a dynamic
    f16 -> bf16 cast too (391 of 4,096 values on an AMX Xeon, where f32 sources were rounded)."""
    x = _values().half()
    _assert_compiled_cast_is_eagers(CASTS["cast"], torch.where(x.isfinite(), x, 0.0), graph)


def _assert_compiled_cast_is_eagers(fn, x: torch.Tensor, graph: str) -> None:
    """``fn(x)`` compiled as a training forward, with dynamic shapes or without snippets."""
    want = fn(x)
    options = {"config": {"SNIPPETS_MODE": "DISABLE"}} if graph == "snippets_off" else None
    compiled = torch.compile(fn, backend="fxvino", options=options, dynamic=graph == "dynamic")
    with fxvino.collect_reports() as report, torch.set_grad_enabled(graph == "training"):
        got = compiled(x.requires_grad_(graph == "training"))
    _assert_same(got.detach(), want.detach())
    assert_all_on_openvino(report)
    assert report.graphs[0].kind == ("forward" if graph == "training" else "inference")


def _compiled_rounding(dtype: torch.dtype, x: np.ndarray) -> np.ndarray:
    param = ops.parameter(list(x.shape), ov.Type.f32)
    model = ov.Model([ops.result(round_to(param.output(0), dtype))], [param])
    return core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(x)[0]


@pytest.mark.parametrize("dtype", SIXTEEN, ids=str)
def test_round_to_is_torchs_rounding_over_whole_binades(dtype):
    """f32 values of three binades (one at the type's range edge) rounded in the plugin by
    :func:`round_to` are torch's conversion: every pattern of the bits rounding drops (16 for
    bf16, 13 for f16) with the two bits above them, ties included, at the bottom of each binade
    and at its top, where rounding carries into the exponent. Subnormal f32 are left out: the
    plugin flushes them."""
    low = 2.0**-18 if dtype == torch.float16 else 2.0**-100
    starts = np.array([1.0, 3.0e4 if dtype == torch.float16 else 2.0**110, low], dtype=np.float32)
    span = np.arange(1 << 18, dtype=np.uint32)
    mantissas = np.concatenate([span, np.uint32((1 << 23) - (1 << 18)) + span])
    bits = (starts.view(np.uint32)[:, None] & np.uint32(0xFF800000)) | mantissas
    x = np.concatenate([bits.reshape(-1).view(np.float32), -bits[0].view(np.float32)])
    got = torch.from_numpy(_compiled_rounding(dtype, x))
    want = torch.from_numpy(x).to(dtype).float()
    _assert_same(got, want)


def test_exact_values_are_not_rounded_again():
    """Inputs, and what only moves them, are exact: their casts and outputs add no rounding."""
    a = ops.parameter([4], ov.Type.bf16)
    b = ops.parameter([4], ov.Type.bf16)
    moved = ops.reshape(a, ops.constant(np.array([2, 2], dtype=np.int64)), False)
    outs = [ops.result(moved), ops.result(ops.convert(moved, ov.Type.f32)), ops.result(ops.multiply(a, b))]
    model = ov.Model(outs, [a, b])
    before = len(model.get_ordered_ops())
    round_like_torch(model, {torch.bfloat16})
    kinds = [op.get_type_name() for op in model.get_ordered_ops()]
    # Only the product is rounded: one Convert to f32, the rounding, one Convert back.
    assert kinds.count("Abs") == 1, kinds  # one rounding (``round_to`` takes one magnitude)
    assert len(kinds) > before
    assert [r.input_value(0).get_node().get_type_name() for r in model.get_results()][:2] == ["Reshape", "Convert"]


def test_cpu_features_are_the_ones_the_plugin_sees():
    """fxvino's CPU checks (``devices.cpu_features``) read CPUID, as the plugin does: under QEMU
    Haswell ``/proc/cpuinfo`` still names the host's AVX-512 and AMX, CPUID does not."""
    features, has_bf16 = cpu_features(), cpu_computes_bf16()
    if features & {"avx512_bf16", "amx_tile"}:
        assert has_bf16, features
    if os.environ.get("FXVINO_EMULATED_CPU") == "avx2":
        assert features == {"avx2"} and not has_bf16, features


def test_widened_types_follow_the_cpu_class():
    """f16 is computed in f32 on every CPU under the f32 hint; bf16 only where there are no bf16
    kernels (a oneDNN ISA cap below them counts: ``test_isa_cap.py``). Other devices compute what
    they are given."""
    has_bf16 = "BF16" in core().get_property("CPU", "OPTIMIZATION_CAPABILITIES") and not bf16_capped()
    # make test-avx2 says so: there the emulated CPU must be one without bf16 kernels.
    assert not (has_bf16 and os.environ.get("FXVINO_EMULATED_CPU") == "avx2"), "QEMU did not hide AVX-512/AMX"
    assert widened_types("CPU") == ({torch.float16} if has_bf16 else {torch.float16, torch.bfloat16})
    assert widened_types("AUTO:CPU") == widened_types("CPU")
    assert widened_types("GPU") == frozenset()
