"""Graphs that freeze the same weights run on one compiled OpenVINO model (shared_weights.py): by
default ("auto") when one of them can run at the model's top level, with share_weights=True always.

The threshold is lowered so that small models take the path a 1B-parameter model takes; what it
saves in memory is measured by benchmarks/packed_weights.py and benchmarks/generate.py."""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest
import torch

import fxvino
from fxvino.compilation import shared_weights

SHARE = {"share_weights": True}


@pytest.fixture(autouse=True)
def _small_models_share(monkeypatch):
    monkeypatch.setattr(shared_weights, "MIN_SHARED_BYTES", 1 << 10)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).eval()


def _live(report) -> list:
    return [p.compiled for g in report.graphs for p in g.ov_partitions if p.compiled is not None]


def _layer_types(compiled) -> set[str]:
    return {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()}


def test_a_static_and_a_dynamic_graph_of_one_model_run_on_one_compiled_model():
    """Batch 1 keeps its own graph beside the dynamic one (Dynamo specializes 1): both now run on
    one compiled model, each through its own If, and give eager's results in any order."""
    model = _mlp()
    compiled = torch.compile(model, backend="fxvino", options=SHARE)
    with fxvino.collect_reports() as report, torch.no_grad():
        for rows in (1, 3, 1, 5, 1, 2):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert len(report.graphs) == 2, str(report)
    live = _live(report)
    assert len(live) == 2 and live[0] is live[1], str(report)
    assert "If" in _layer_types(live[0])
    assert all(not g.fallbacks and not g.torch_ops for g in report.graphs), str(report)


def _top_level_types(compiled) -> set[str]:
    """Layer types at the top level of a compiled model (an If's bodies are not listed)."""
    return _layer_types(compiled) - {"If", "Input", "Output", "Const", "Convert"}


def test_a_graph_much_cheaper_than_its_partner_runs_at_the_top_level(caplog):
    """Batch 1 beside a graph compiled for 16 rows: the cheap one runs outside any If (no copies
    in or out), idle on example inputs while the other runs, and both give eager's results."""
    model = _mlp()
    compiled = torch.compile(model, backend="fxvino", options=SHARE)
    with caplog.at_level("INFO", logger="fxvino"), fxvino.collect_reports() as report, torch.no_grad():
        for rows in (1, 16, 1, 5, 40, 1, 2):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    live = _live(report)
    assert len(live) == 2 and live[0] is live[1], str(report)
    assert "If" in _layer_types(live[0]) and "FullyConnected" in _top_level_types(live[0])
    assert any("runs at its top level" in r.getMessage() for r in caplog.records)
    assert all(not g.fallbacks and not g.torch_ops for g in report.graphs), str(report)


def test_graphs_of_similar_cost_both_run_inside_ifs():
    """Batch 1 beside a graph compiled for 3 rows (less than TOP_LEVEL_RATIO apart): running one
    of them idle on every call of the other would cost too much, so both sit in Ifs."""
    model = _mlp()
    compiled = torch.compile(model, backend="fxvino", options=SHARE)
    with fxvino.collect_reports() as report, torch.no_grad():
        for rows in (1, 3, 1):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    live = _live(report)
    assert len(live) == 2 and live[0] is live[1], str(report)
    assert "FullyConnected" not in _top_level_types(live[0])


def test_below_the_threshold_graphs_keep_their_own_models(monkeypatch):
    monkeypatch.setattr(shared_weights, "MIN_SHARED_BYTES", 1 << 30)
    model = _mlp()
    compiled = torch.compile(model, backend="fxvino", options=SHARE)
    with fxvino.collect_reports() as report, torch.no_grad():
        for rows in (1, 3):
            compiled(torch.randn(rows, 64))
    live = _live(report)
    assert len(live) == 2 and live[0] is not live[1]
    assert "If" not in _layer_types(live[0])


def test_by_default_only_a_much_cheaper_graph_is_merged():
    """share_weights="auto": batch 1 beside 16 rows shares one model (batch 1 at its top level),
    while batch 1 beside 3 rows, which would need both in Ifs, keeps two models."""
    for second, merged in ((16, True), (3, False)):
        torch._dynamo.reset()  # a fresh compile: Dynamo's graphs of the first model would serve the second
        model = _mlp()
        compiled = torch.compile(model, backend="fxvino")
        with fxvino.collect_reports() as report, torch.no_grad():
            for rows in (1, second, 1):
                x = torch.randn(rows, 64)
                torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        live = _live(report)
        assert len(live) == 2 and (live[0] is live[1]) == merged, (second, str(report))


def test_share_weights_false_never_merges():
    model = _mlp()
    compiled = torch.compile(model, backend="fxvino", options={"share_weights": False})
    with fxvino.collect_reports() as report, torch.no_grad():
        for rows in (1, 16, 1):
            compiled(torch.randn(rows, 64))
    live = _live(report)
    assert len(live) == 2 and live[0] is not live[1]


def test_graphs_computing_in_bf16_keep_their_own_models():
    """In bf16 a merged decode step was slower and the packed copy half the size (PRECISIONS)."""
    model = _mlp()
    compiled = torch.compile(model, backend="fxvino", options={**SHARE, "precision": "bf16"})
    with fxvino.collect_reports() as report, torch.no_grad():
        for rows in (1, 3):
            compiled(torch.randn(rows, 64))
    live = _live(report)
    assert len(live) == 2 and live[0] is not live[1]


def test_a_failed_merge_compiles_each_graph_apart(monkeypatch):
    """The older graph gave up its compiled model before the merge; when the merge fails it is
    compiled alone again, and both graphs still give eager's results."""

    def broken(*_a, **_k):
        raise RuntimeError("merge broke")

    monkeypatch.setattr(shared_weights, "merge", broken)
    model = _mlp()
    compiled = torch.compile(model, backend="fxvino", options=SHARE)
    with fxvino.collect_reports() as report, torch.no_grad():
        for rows in (1, 3, 1, 4):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    live = _live(report)
    assert len(live) == 2 and live[0] is not live[1]
    assert all(not g.fallbacks for g in report.graphs), str(report)


def test_weights_changed_in_place_reach_every_graph_on_the_shared_model():
    """A weight changed after the merge: each graph sees the new values on its next call
    (refreezing compiles it again, together with its partner)."""
    model = _mlp()
    compiled = torch.compile(model, backend="fxvino", options=SHARE)
    with torch.no_grad():
        for rows in (1, 3):
            compiled(torch.randn(rows, 64))
        model[0].weight.mul_(-2.0)
        for rows in (1, 3, 1, 3):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generate_runs_prefill_and_decode_on_one_compiled_model(cache, caplog):
    """Llama with grouped KV heads: tokens equal eager's, two prompts of different lengths; the
    live graphs (prefill and decode) all run on one compiled model, fully on OpenVINO. After the
    16-token prompt the decode graph runs at its top level; the 5-token prompt's prefill is less
    than TOP_LEVEL_RATIO times the decode step, so then both run inside Ifs."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    kwargs = {"do_sample": False, **({"cache_implementation": "static"} if cache == "static" else {})}
    prompts = [torch.randint(0, 128, (1, n), generator=torch.Generator().manual_seed(n)) for n in (16, 5)]
    with torch.no_grad():
        expected = [model.generate(p, max_new_tokens=12, **kwargs) for p in prompts]
    model.forward = torch.compile(model.forward, backend="fxvino", options=SHARE)
    with caplog.at_level("INFO", logger="fxvino"), fxvino.collect_reports() as report, torch.no_grad():
        for p, want in zip(prompts, expected, strict=True):
            assert torch.equal(model.generate(p, max_new_tokens=12, **kwargs), want)
    live = _live(report)
    assert len(live) >= 2 and all(c is live[0] for c in live), str(report)
    assert all(not g.fallbacks and not g.torch_ops for g in report.graphs), str(report)
    merges = [r.getMessage() for r in caplog.records if "shares one compiled model" in r.getMessage()]
    assert "runs at its top level" in merges[0] and "runs at its top level" not in merges[-1], merges


def test_owned_bytes_counts_constants_that_are_not_views_of_the_weights():
    weight = torch.randn(256, 256)
    shared = ops.constant(weight.numpy(), shared_memory=True)
    copied = ops.constant(np.ones((128, 128), np.float32))
    x = ops.parameter([1, 256], ov.Type.f32)
    y = ops.matmul(ops.matmul(x, shared, False, True), ops.concat([copied, copied], 0), False, False)
    model = ov.Model([y], [x])
    assert shared_weights.owned_bytes(model, shared_weights.weights_of({0: weight})) == 128 * 128 * 4


def test_outputs_beside_a_top_level_graph_leave_their_if_packed_and_arrive_whole():
    """Beside a top-level graph the others' outputs (any element type, rank 0 to 3, sizes known
    only at run time) come out of their If as one flat tensor per type plus their sizes, and each
    is read back as its own tensor, equal to the graph's own model's."""
    from fxvino.devices import core
    from fxvino.lowering.convert import InputSpec, OutputSpec
    from fxvino.runtime.compiled_partition import CompiledPartition

    x = ops.parameter([-1, 3], ov.Type.f32)
    outs = [
        ops.multiply(x, np.float32(2)),  # f32 [?, 3]
        ops.reduce_sum(x, np.int64([0, 1]), False),  # f32 scalar
        ops.shape_of(x, "i64"),  # i64 [2]
        ops.greater(ops.unsqueeze(x, np.int64(0)), np.float32(0)),  # boolean [1, ?, 3]
    ]
    cold = ov.Model([ops.result(o) for o in outs], [x])
    y = ops.parameter([1, 3], ov.Type.f32)
    hot = ov.Model([ops.result(ops.relu(y))], [y])
    tensor = [InputSpec("tensor", 0)]
    kinds = [(torch.float32, "tensor"), (torch.float32, "tensor"), (torch.int64, "tensor"), (torch.bool, "tensor")]
    cold_outs = [OutputSpec(kind, i, dtype=dtype) for i, (dtype, kind) in enumerate(kinds)]
    idle = (ov.Tensor(np.zeros((1, 3), np.float32)),)
    merged, bindings = shared_weights.merge(
        [hot, cold], [(tensor, [OutputSpec("tensor", 0, dtype=torch.float32)]), (tensor, cold_outs)], (0, idle)
    )
    assert len(merged.get_results()) == 1 + 4  # hot's output; f32, i64 and boolean flat tensors; sizes
    compiled = core().compile_model(merged, "CPU")
    on_merged = CompiledPartition(compiled, *bindings[1][:2], copied=bindings[1][2], packed=bindings[1][3])
    alone = CompiledPartition(core().compile_model(cold, "CPU"), tensor, cold_outs)
    top = CompiledPartition(compiled, *bindings[0][:2], copied=bindings[0][2], packed=bindings[0][3])
    for rows in (4, 1, 7):
        a = torch.randn(rows, 3)
        for got, want in zip(on_merged(a), alone(a), strict=True):
            assert got.dtype == want.dtype and torch.equal(got, want)
        b = torch.randn(1, 3)
        torch.testing.assert_close(top(b)[0], torch.relu(b))


def test_graphs_over_the_same_int4_weights_run_on_one_compiled_model(monkeypatch, caplog):
    """torchao int4 weights become packed 4-bit constants that every graph over them shares
    (lowering/convert.py), so they are not memory of a graph's own: a prefill and a decode step over
    them merge as over float weights, and the plugin packs them once. The limit on a member's own
    memory is set below the packed constants' size, so counting them as its own keeps the graphs
    apart and fails the test."""
    ao = pytest.importorskip("torchao.quantization")
    model = _mlp()
    ao.quantize_(model, ao.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=ao.PerGroup(32)))
    monkeypatch.setattr(shared_weights, "MAX_OWNED_BYTES", 1 << 10)  # the packed values: 6 kB
    exact = {"config": {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}}  # no int8 activations on the fly
    compiled = torch.compile(model, backend="fxvino", options=exact)
    with caplog.at_level("INFO", logger="fxvino"), fxvino.collect_reports() as report, torch.no_grad():
        for rows in (1, 16, 1, 5, 1):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert all(not g.fallbacks and not g.torch_ops for g in report.graphs), str(report)
    live = _live(report)
    assert len(live) == 2 and live[0] is live[1], str(report)
    assert any("runs at its top level" in r.getMessage() for r in caplog.records)
    first, second = (p.partition_ref().packed_constants for g in report.graphs for p in g.ov_partitions)
    assert len(first) == 2 and [id(v) for v in first] == [id(v) for v in second]
