"""rand, randn and dropout on OpenVINO.

The numbers cannot equal eager's (lowering/ops/random.py), so these tests check what a user relies
on instead: the distribution (moments and a Kolmogorov-Smirnov distance, at sizes where a
broken generator is far outside the bounds), independence between calls and between ops,
reproducibility under ``torch.manual_seed``, and that the in-graph hash computes exactly what
its definition says (OpenVINO's 32-bit integer arithmetic must wrap).
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest
import torch
import torch.nn.functional as F

import fxvino
from fxvino.lowering import helpers as h
from fxvino.lowering.convert import LoweringContext
from fxvino.lowering.ops import random as rnd
from harness import assert_all_on_openvino, largest_constant_bytes, run_fxvino

N = 200_000
# Kolmogorov-Smirnov distance that a correct generator exceeds with probability 1e-6 at size N.
KS_BOUND = 2.7 / N**0.5


def _ks(sorted_values: torch.Tensor, cdf: torch.Tensor) -> float:
    n = sorted_values.numel()
    upper = torch.arange(1, n + 1, dtype=torch.float64) / n
    return float(torch.maximum(upper - cdf, cdf - (upper - 1.0 / n)).abs().max())


def _mix_reference(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(rnd.MIX_1)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(rnd.MIX_2)
    return x ^ (x >> np.uint32(16))


@pytest.mark.parametrize(
    "static, dims",
    [(True, [7, 1000]), (True, [rnd.LONGEST_COUNTER_RANGE + 7]), (False, [7, 1000])],
    ids=["static-shape", "static-1d-padded", "run-time-shape"],
)
def test_hash_is_exactly_its_definition(static, dims):
    """OpenVINO's wrapping i32 multiply and masked shifts give lowbias32 bit for bit, whether the
    element counter is built from rows and columns (a static shape; a padded near-square cut to
    size for a long 1-D one) or from one Range."""
    ctx = LoweringContext("hash")
    shape = h.const(dims, torch.int64) if static else ops.parameter([2], ov.Type.i64, name="shape").output(0)
    bits = rnd.random_bits(ctx, shape, stream=3)
    params = [ctx.seed] if static else [shape.get_node(), ctx.seed]
    compiled = ov.Core().compile_model(ov.Model([bits], params), "CPU")
    seed = np.array([-123456789, 987654321], dtype=np.int32)
    got = compiled([seed] if static else [np.array(dims), seed])[0].view(np.uint32)

    s0, s1 = seed.view(np.uint32)
    with np.errstate(over="ignore"):
        key = _mix_reference(np.array([s0 ^ np.uint32((rnd.GOLDEN * 4) & 0xFFFFFFFF)], dtype=np.uint32))
        key = _mix_reference(key + s1)
        index = np.arange(np.prod(dims), dtype=np.uint32)
        want = _mix_reference(index + key).reshape(dims)
    np.testing.assert_array_equal(got, want)


def _reference_bits(seed: np.ndarray, stream: int, dims: list[int]) -> np.ndarray:
    s0, s1 = seed.view(np.uint32)
    with np.errstate(over="ignore"):
        key = _mix_reference(np.array([s0 ^ np.uint32((rnd.GOLDEN * (stream + 1)) & 0xFFFFFFFF)], dtype=np.uint32))
        key = _mix_reference(key + s1)
        return _mix_reference(np.arange(np.prod(dims), dtype=np.uint32) + key).reshape(dims)


def test_keys_computed_together_are_each_draws_own():
    """share_stream_keys computes every draw's key in one vector: the bits stay lowbias32's."""
    ctx = LoweringContext("keys")
    streams = (0, 3, 11)
    draws = [rnd.random_bits(ctx, h.const([5, 300], torch.int64), stream=s) for s in streams]
    rnd.share_stream_keys(ctx)
    compiled = ov.Core().compile_model(ov.Model(draws, [ctx.seed]), "CPU")
    seed = np.array([-123456789, 987654321], dtype=np.int32)
    got = compiled([seed])
    for i, stream in enumerate(streams):
        np.testing.assert_array_equal(got[i].view(np.uint32), _reference_bits(seed, stream, [5, 300]))


def test_many_draws_share_one_key_computation():
    """Eight dropouts: their keys are one vector chain, not eight scalar ones (the CPU plugin runs
    and keeps every scalar op as a node of its own)."""

    def fn(x):
        for _ in range(8):
            x = F.dropout(x, 0.1, training=True) * 1.5
        return x

    out, report = run_fxvino(fn, torch.ones(64, 256), fullgraph=True)
    assert_all_on_openvino(report)
    kept = (out != 0).float().mean().item()
    assert 0.9**8 - 0.02 < kept < 0.9**8 + 0.02
    runtime = report.graphs[0].ov_partitions[0].compiled.get_runtime_model()
    scalar_ops = [
        op
        for op in runtime.get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "Eltwise"
        and op.get_output_partial_shape(0).is_static
        and np.prod(list(op.get_output_shape(0))) <= 8
    ]
    # One key chain (28 integer ops) and two ops per draw for its counter: 46; before, 256.
    assert len(scalar_ops) <= 60, len(scalar_ops)


def test_dropout_holds_no_counter_constant():
    """The element counter of a large draw stays a run-time value, not a folded constant the size
    of the draw (6 MB per attention dropout of BERT-base's training forward)."""
    x = torch.ones(64, 8192)  # 2 MB
    _, report = run_fxvino(lambda x: F.dropout(x, 0.5, training=True), x, fullgraph=True)
    assert_all_on_openvino(report)
    compiled = report.graphs[0].ov_partitions[0].compiled
    assert largest_constant_bytes(compiled) < 1 << 20
    # A split into two short ranges needs no padding, and so no Slice (a reference kernel: 2 ms per
    # attention dropout of GPT-2's training forward).
    layers = [op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()]
    assert "StridedSlice" not in layers, layers


def test_long_1d_draw_holds_no_counter_constant():
    """``rand(N)`` has no balanced rows x columns split; its counter is a padded square's."""
    n = (1 << 19) + 3
    out, report = run_fxvino(lambda x: torch.rand(n) + x, torch.zeros(1), fullgraph=True)
    assert_all_on_openvino(report)
    assert largest_constant_bytes(report.graphs[0].ov_partitions[0].compiled) < 1 << 20
    assert out.shape == (n,) and 0.49 < float(out.mean()) < 0.51 and float(out.min()) >= 0 and float(out.max()) < 1


def test_rand_is_uniform_and_ran_on_openvino():
    torch.manual_seed(0)
    out, report = run_fxvino(lambda x: torch.rand(N) + x, torch.zeros(1), fullgraph=True)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.rand.default"] == 1
    assert out.min() >= 0.0 and out.max() < 1.0
    assert abs(out.mean() - 0.5) < 0.005 and abs(out.var() - 1 / 12) < 0.002
    values = out.double().sort().values
    assert _ks(values, values) < KS_BOUND
    # consecutive elements are not correlated
    assert abs(np.corrcoef(out[:-1].numpy(), out[1:].numpy())[0, 1]) < 0.02


def test_randn_is_standard_normal():
    torch.manual_seed(1)
    out, report = run_fxvino(lambda x: torch.randn(N) + x, torch.zeros(1), fullgraph=True)
    assert_all_on_openvino(report)
    assert abs(out.mean()) < 0.01 and abs(out.std() - 1) < 0.01
    values = out.double().sort().values
    assert _ks(values, torch.special.ndtr(values)) < KS_BOUND


@pytest.mark.parametrize("dtype, bits", [(torch.float16, 11), (torch.bfloat16, 8), (torch.float64, 24)])
def test_rand_stays_below_one_in_narrow_dtypes(dtype, bits):
    out, report = run_fxvino(lambda x: torch.rand(50_000, dtype=dtype) + x, torch.zeros(1, dtype=dtype))
    assert_all_on_openvino(report)
    assert out.dtype == dtype and out.min() >= 0 and out.max() < 1
    assert out.max() >= 1 - max(2.0**-bits, 1e-3)  # the top of the range is reached
    assert torch.equal(out.double() * 2**bits, (out.double() * 2**bits).round())


def test_calls_draw_anew_and_manual_seed_replays():
    compiled = torch.compile(lambda x: (torch.rand(64) + x, torch.randn(64) + x), backend="fxvino")
    x = torch.zeros(1)
    with torch.no_grad():
        torch.manual_seed(5)
        first, second = compiled(x), compiled(x)
        torch.manual_seed(5)
        replay = compiled(x)
    assert not torch.equal(first[0], second[0]) and not torch.equal(first[1], second[1])
    assert torch.equal(first[0], replay[0]) and torch.equal(first[1], replay[1])


def test_two_draws_in_one_graph_are_independent():
    out, report = run_fxvino(lambda x: (torch.rand(N) + x, torch.rand(N) + x), torch.zeros(1), fullgraph=True)
    assert_all_on_openvino(report)
    a, b = out
    assert not torch.equal(a, b)
    assert abs(np.corrcoef(a.numpy(), b.numpy())[0, 1]) < 0.02


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keeps_one_minus_p_and_scales(p):
    x = torch.randn(400, 500)
    x[0, :50] = float("nan")
    torch.manual_seed(2)
    out, report = run_fxvino(lambda x: F.dropout(x, p, training=True), x, fullgraph=True)
    assert_all_on_openvino(report)
    assert report.ov_ops["aten.native_dropout.default"] == 1
    kept = out != 0
    kept[0, :50] = True
    assert abs(kept[1:].float().mean() - (1 - p)) < 0.01
    torch.testing.assert_close(out[1:][kept[1:]], x[1:][kept[1:]] / (1 - p))
    assert out[0, :50].isnan().all()  # a dropped NaN stays NaN, as in eager


def test_dropout_mask_and_gradient_through_training():
    """nn.Dropout in training: the backward uses the forward's mask (mask / (1 - p))."""
    model = torch.nn.Sequential(torch.nn.Dropout(0.25))
    compiled = torch.compile(model, backend="fxvino", options={"aot_autograd": True})
    x = torch.randn(64, 128, requires_grad=True)
    with fxvino.collect_reports() as report:
        out = compiled(x)
        out.sum().backward()
    assert report.ov_ops["aten.native_dropout.default"] == 1
    assert not report.fallbacks and not report.torch_ops, str(report)
    mask = (out != 0).float()
    torch.testing.assert_close(x.grad, mask / 0.75)
    assert abs(mask.mean() - 0.75) < 0.02


def test_rrelu_draws_slopes_in_training_and_uses_their_mean_in_eval():
    x = torch.randn(400, 500)
    x[0, :10] = float("nan")
    torch.manual_seed(3)
    out, report = run_fxvino(lambda x: F.rrelu(x, 0.1, 0.3, training=True), x, fullgraph=True)
    assert_all_on_openvino(report, ops=["aten.rrelu_with_noise_functional.default"])
    positive, negative = x > 0, x < 0
    torch.testing.assert_close(out[positive], x[positive])
    slope = (out[negative] / x[negative]).double()
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6
    values = ((slope - 0.1) / 0.2).clamp(0, 1).sort().values  # uniform on [0, 1]
    assert _ks(values, values) < 2.7 / values.numel() ** 0.5
    assert out[0, :10].isnan().all()
    out, report = run_fxvino(lambda x: F.rrelu(x, 0.1, 0.3, training=False), x, fullgraph=True)
    torch.testing.assert_close(out, F.rrelu(x, 0.1, 0.3, training=False), equal_nan=True)
    assert_all_on_openvino(report, ops=["aten.rrelu_with_noise_functional.default"])


@pytest.mark.parametrize("training", [True, False])
def test_rrelu_gradient_is_the_forwards_slope(training):
    """The backward scales by the slopes the forward drew (training) or by their mean (eval)."""
    layer = torch.nn.RReLU(0.1, 0.3).train(training)
    compiled = torch.compile(layer, backend="fxvino", options={"aot_autograd": True})
    x = torch.randn(300, 40, requires_grad=True)
    with fxvino.collect_reports() as report:
        out = compiled(x)
        out.sum().backward()
    assert not report.fallbacks and not report.torch_ops, str(report)
    assert report.ov_ops["aten.rrelu_with_noise_backward.default"] == 1
    negative = x.detach() < 0
    slope = torch.where(negative, out.detach() / x.detach(), torch.ones_like(x))
    torch.testing.assert_close(x.grad, slope)
    if not training:
        torch.testing.assert_close(slope[negative], torch.full_like(slope[negative], 0.2))


def test_dynamic_sizes_compile_once():
    compiled = torch.compile(lambda x: x + torch.rand(x.shape[0]), backend="fxvino", dynamic=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for n in (5, 8, 13, 2000):
            out = compiled(torch.zeros(n))
            assert out.shape == (n,) and out.min() >= 0 and out.max() < 1
    assert len(report.graphs) == 1 and report.num_ov_partitions == 1, str(report)


def test_explicit_generator_keeps_its_stream():
    """A user's own torch.Generator is drawn from in PyTorch (Dynamo breaks the graph there), so
    its numbers are exactly eager's."""

    def f(x):
        return x + torch.rand(8, generator=gen)

    gen = torch.Generator().manual_seed(3)
    compiled = torch.compile(f, backend="fxvino")
    with fxvino.collect_reports() as report, torch.no_grad():
        out = compiled(torch.zeros(8))
    assert "aten.rand.default" not in report.ov_ops
    torch.testing.assert_close(out, torch.rand(8, generator=torch.Generator().manual_seed(3)))


Z = torch.zeros(N)
# (name, fn of a zeros tensor of size N, its ATen op, expected mean, expected std) for the
# sampling ops: each must run on OpenVINO and match its distribution's first two moments.
SAMPLERS = [
    ("rand_like", lambda z: torch.rand_like(z), "aten.rand_like.default", 0.5, (1 / 12) ** 0.5),
    ("randn_like", lambda z: torch.randn_like(z), "aten.randn_like.default", 0.0, 1.0),
    ("uniform", lambda z: z.uniform_(-3, 5), "aten.uniform.default", 1.0, 8 / 12**0.5),
    ("normal", lambda z: z.normal_(2.0, 3.0), "aten.normal_functional.default", 2.0, 3.0),
    ("normal_tensor", lambda z: torch.normal(z + 1, z + 2), "aten.normal.Tensor_Tensor", 1.0, 2.0),
    ("bernoulli", lambda z: torch.bernoulli(z, 0.3), "aten.bernoulli.p", 0.3, (0.3 * 0.7) ** 0.5),
    ("exponential", lambda z: z.exponential_(4.0), "aten.exponential.default", 0.25, 0.25),
    ("geometric", lambda z: z.geometric_(0.25), "aten.geometric.default", 4.0, (0.75 / 0.0625) ** 0.5),
    ("log_normal", lambda z: z.log_normal_(0.0, 0.5), "aten.log_normal.default", np.exp(0.125), None),
    ("randint", lambda z: torch.randint(3, 10, (N,)) + z, "aten.randint.low", 6.0, (48 / 12) ** 0.5),
    ("randint_like", lambda z: torch.randint_like(z, 7), "aten.randint_like.default", 3.0, 2.0),
]


@pytest.mark.parametrize("name, fn, op, mean, std", SAMPLERS, ids=[s[0] for s in SAMPLERS])
def test_sampler_moments(name, fn, op, mean, std):
    torch.manual_seed(4)
    out, report = run_fxvino(fn, Z.clone(), fullgraph=True)
    assert_all_on_openvino(report)
    assert report.ov_ops[op] >= 1
    assert out.shape == (N,)
    spread = std if std is not None else float(out.std())
    assert abs(float(out.double().mean()) - mean) < 6 * spread / N**0.5
    if std is not None:
        assert abs(float(out.double().std()) - std) < 0.02 * std
    if name.startswith("randint"):
        low, high = (3, 10) if name == "randint" else (0, 7)
        assert out.min() == low and out.max() == high - 1 and torch.equal(out, out.round())


def test_cauchy_quartiles():
    """Cauchy has no moments: its quartiles are median -+ sigma."""
    out, report = run_fxvino(lambda z: z.cauchy_(1.0, 2.0), Z.clone(), fullgraph=True)
    assert_all_on_openvino(report)
    q = torch.quantile(out[:100_000], torch.tensor([0.25, 0.5, 0.75]))
    torch.testing.assert_close(q, torch.tensor([-1.0, 1.0, 3.0]), atol=0.06, rtol=0)


def test_empty_shapes():
    out, report = run_fxvino(lambda x: (torch.rand_like(x), torch.randn(0, 3) + 1), torch.zeros(0, 5, 0))
    assert_all_on_openvino(report)
    assert out[0].shape == (0, 5, 0) and out[1].shape == (0, 3)
