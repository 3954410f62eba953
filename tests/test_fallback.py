"""Fallbacks: what OpenVINO does not take still runs correctly, and is reported."""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys

import pytest
import torch

import fxvino
from fxvino.lowering import ensure_registered, registry
from harness import run_fxvino

aten = torch.ops.aten


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()


def test_disabled_op_runs_in_pytorch_between_two_partitions(caplog):
    model, x = _mlp(), torch.randn(3, 16)
    with caplog.at_level(logging.WARNING, logger="fxvino"):
        out, report = run_fxvino(model, x, options={"disabled_ops": ["aten.relu.default"]})
    torch.testing.assert_close(out, model(x))
    assert report.torch_ops == {"aten.relu.default": 1}
    assert report.num_ov_partitions == 2
    (fb,) = report.fallbacks
    assert fb.reason == "listed in disabled_ops" and fb.ran_on == "pytorch"
    assert "listed in disabled_ops" in caplog.text


def _break_lowering(monkeypatch, op, only: str | None = None) -> None:
    """Make ``op``'s lowering raise (for the node named ``only``, or every node), as a buggy one would."""
    ensure_registered()
    entry = registry.REGISTRY[op]

    def boom(ctx, node, *args, **kwargs):
        if only is None or node.name == only:
            raise RuntimeError("forced failure")
        return entry.fn(ctx, node, *args, **kwargs)

    monkeypatch.setitem(registry.REGISTRY, op, dataclasses.replace(entry, fn=boom))


def _refuse_compile(monkeypatch, refuse) -> list[int]:
    """Make OpenVINO's compile_model raise for the models ``refuse(model)`` picks; returns a call log."""
    from fxvino.compilation import compile_partition
    from fxvino.devices import core
    from fxvino.partitioning import isolation

    real, calls = core(), []

    class Refusing:
        def compile_model(self, model, *a, **k):
            calls.append(1)
            if refuse(model):
                raise RuntimeError("forced compile failure")
            return real.compile_model(model, *a, **k)

    monkeypatch.setattr(compile_partition, "core", lambda: Refusing())
    monkeypatch.setattr(isolation, "core", lambda: Refusing())
    return calls


def test_failed_lowering_isolates_the_node(monkeypatch, caplog):
    _break_lowering(monkeypatch, aten.relu.default)
    model, x = _mlp(), torch.randn(3, 16)
    with caplog.at_level(logging.WARNING, logger="fxvino"):
        out, report = run_fxvino(model, x)
    torch.testing.assert_close(out, model(x))
    (fb,) = report.fallbacks
    assert fb.ran_on == "pytorch" and fb.op == "aten.relu.default"
    assert fb.reason == "lowering failed: RuntimeError: forced failure"
    assert report.torch_ops == {"aten.relu.default": 1}
    assert report.num_ov_partitions == 2  # both linears stay on OpenVINO
    assert "forced failure" in caplog.text


def test_failed_compile_is_bisected_to_the_node(monkeypatch):
    def fn(x, w):
        y = torch.relu(x @ w) + 1
        z = torch.tanh(y) * 2  # OpenVINO "refuses" any model holding a Tanh
        return torch.sigmoid(z @ w) - y.sum()

    calls = _refuse_compile(monkeypatch, lambda m: any(op.get_type_name() == "Tanh" for op in m.get_ops()))
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    out, report = run_fxvino(fn, x, w)
    torch.testing.assert_close(out, fn(x, w))
    (fb,) = report.fallbacks
    assert fb.op == "aten.tanh.default" and fb.ran_on == "pytorch"
    assert "found by bisection" in fb.reason and "forced compile failure" in fb.reason
    assert report.torch_ops == {"aten.tanh.default": 1}
    assert report.num_ov_partitions == 2
    assert len(calls) <= 10, f"{len(calls)} compiles for a 9-node graph"


def test_one_failure_in_a_500_node_model_keeps_99_percent_on_openvino(monkeypatch):
    from fxvino.tools import zoo

    model, (ids,) = zoo.comparable("bert", seq=16, hidden_size=64, num_attention_heads=2, intermediate_size=128)
    _break_lowering(monkeypatch, aten.gelu.default, only="gelu_5")  # the 6th of 12 layers
    with torch.no_grad():
        expected = model(ids)
    out, report = run_fxvino(model, ids)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    (graph,) = report.graphs
    assert graph.num_nodes >= 500, graph.num_nodes
    assert sum(report.ov_ops.values()) >= 0.99 * graph.num_nodes, str(report)
    assert report.torch_ops == {"aten.gelu.default": 1}
    (fb,) = report.fallbacks
    assert fb.where == "gelu_5" and fb.ran_on == "pytorch"


def test_device_wide_compile_failure_runs_on_inductor(monkeypatch):
    _refuse_compile(monkeypatch, lambda m: True)
    model, x = _mlp(), torch.randn(3, 16)
    out, report = run_fxvino(model, x)
    torch.testing.assert_close(out, model(x))
    (fb,) = report.fallbacks
    assert "OpenVINO compile failed: RuntimeError: forced compile failure" in fb.reason
    assert fb.ran_on == "inductor", fb.reason
    assert report.num_ov_partitions == 0


def _inductor_case(name: str):
    from fxvino.tools import zoo

    if name == "cnn":  # batch norm (decomposed by fxvino's table, not Inductor's) and pooling
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(),
            torch.nn.Linear(8, 4),
        ).eval()
        return model, (torch.randn(2, 3, 16, 16),)
    # SDPA, the mask's _to_copy, and symbolic sizes under dynamic=True
    return zoo.comparable("gpt2", seq=16, n_embd=64, n_head=2, n_layer=2)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", ["cnn", "gpt2"])
def test_inductor_fallback_runs_real_models(monkeypatch, name, dynamic):
    torch.manual_seed(0)
    model, args = _inductor_case(name)
    _refuse_compile(monkeypatch, lambda m: True)
    with torch.no_grad():
        expected = model(*args)
    out, report = run_fxvino(model, *args, dynamic=dynamic)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert report.fallbacks and all(f.ran_on == "inductor" for f in report.fallbacks), str(report)


def test_inductor_fallback_runs_random_ops(monkeypatch):
    def fn(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) + torch.randn_like(x)

    _refuse_compile(monkeypatch, lambda m: True)
    x = torch.ones(64, 64)
    out, report = run_fxvino(fn, x)
    assert report.fallbacks and all(f.ran_on == "inductor" for f in report.fallbacks), str(report)
    assert out.shape == x.shape and 0.8 < out.std().item() < 1.7  # dropout's 0 / 2 plus a normal


@torch.library.custom_op("fxvino_test::cube", mutates_args=())
def cube(x: torch.Tensor) -> torch.Tensor:
    return x * x * x


@cube.register_fake
def _(x):
    return torch.empty_like(x)


def test_op_without_lowering_runs_in_pytorch_between_partitions():
    def fn(x):
        return torch.relu(cube(torch.sin(x))) + 1

    x = torch.randn(10)
    out, report = run_fxvino(fn, x)
    torch.testing.assert_close(out, fn(x))
    (fb,) = report.fallbacks
    assert (fb.op, fb.reason, fb.ran_on) == ("fxvino_test.cube.default", "no OpenVINO lowering", "pytorch")
    assert report.num_ov_partitions == 2
    assert report.torch_ops == {"fxvino_test.cube.default": 1}


class _VaeAttentionTail(torch.nn.Module):
    """diffusers' VAE attention block in small: a residual add of a transposed view, then a
    group norm. Traced, the group norm's input is contiguous in fake tensors only, and PyTorch's
    own traced graph (aot_eager) raises on it at run time."""

    def __init__(self):
        super().__init__()
        self.lin, self.norm = torch.nn.Linear(8, 8), torch.nn.GroupNorm(2, 8)

    def forward(self, x):
        h = self.lin(x.flatten(2).transpose(1, 2))
        return self.norm((h.transpose(1, 2).reshape(x.shape) + x) / 1)


@pytest.mark.parametrize(
    "make", [lambda: (_mlp(), torch.randn(3, 16)), lambda: (_VaeAttentionTail().eval(), torch.randn(1, 8, 4, 4))],
    ids=["mlp", "group_norm_of_a_transposed_view"],
)  # fmt: skip
def test_runtime_failure_runs_eagerly_and_is_reported(monkeypatch, make):
    from fxvino.runtime import compiled_partition as runtime

    model, x = make()
    compiled = torch.compile(model, backend="fxvino")
    with fxvino.collect_reports() as report, torch.no_grad():
        compiled(x)

        def fail(self, *args):
            raise RuntimeError("inference exploded")

        monkeypatch.setattr(runtime.CompiledPartition, "__call__", fail)
        out = compiled(x)
        torch.testing.assert_close(out, model(x))
    assert any("inference exploded" in f.reason and f.ran_on == "eager" for f in report.fallbacks)


def test_inference_failure_is_bisected_with_the_real_inputs(monkeypatch):
    """OpenVINO failing at run time on a Tanh: that call runs eagerly, later ones split around the tanh."""
    from fxvino.runtime import compiled_partition as runtime

    real_call = runtime.CompiledPartition.__call__

    def holds_tanh(compiled) -> bool:  # the plugin fuses ops; it keeps their original names
        names = (op.get_rt_info()["originalLayersNames"].astype(str) for op in compiled.get_runtime_model().get_ops())
        return any("Tanh" in n for n in names)

    def failing(self, *args):
        if holds_tanh(self.compiled):
            raise RuntimeError("inference exploded on a Tanh")
        return real_call(self, *args)

    def fn(x, w):
        y = torch.relu(x @ w) + 1
        return torch.sigmoid(torch.tanh(y) @ w) - y.sum()

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    compiled = torch.compile(fn, backend="fxvino")
    with fxvino.collect_reports() as report, torch.no_grad():
        compiled(x, w)  # compiles while inference still works
        monkeypatch.setattr(runtime.CompiledPartition, "__call__", failing)
        outs = [compiled(x * k, w) for k in (1.0, 2.0, 3.0)]
    for k, out in zip((1.0, 2.0, 3.0), outs, strict=True):
        torch.testing.assert_close(out, fn(x * k, w))
    (fb,) = [f for f in report.fallbacks if "bisection" in f.reason]
    assert fb.op == "aten.tanh.default" and fb.ran_on == "pytorch" and "exploded" in fb.reason
    assert report.torch_ops == {"aten.tanh.default": 1}
    assert not [f for f in report.fallbacks if f.ran_on == "eager"], str(report)


def test_each_kind_of_fallback_is_warned_once(monkeypatch, caplog):
    _break_lowering(monkeypatch, aten.relu.default)

    def fn(x):
        return torch.relu(torch.relu(x) + 1) * 2 + torch.relu(x - 1)

    with caplog.at_level(logging.DEBUG, logger="fxvino"):
        out, report = run_fxvino(fn, torch.randn(8))
        run_fxvino(fn, torch.randn(3, 8))  # another graph with the same fallbacks
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "forced failure" in r.getMessage()]
    repeated = [r for r in caplog.records if r.levelno == logging.DEBUG and "forced failure" in r.getMessage()]
    assert len(warned) == 1 and len(repeated) >= 5
    assert len([f for f in report.fallbacks if f.op == "aten.relu.default"]) == 3  # the report keeps them all


def test_a_bug_in_fxvino_runs_the_graph_on_inductor(monkeypatch):
    from fxvino.capture import aot as capture

    def buggy(*args, **kwargs):
        raise KeyError("a bug of ours")

    monkeypatch.setattr(capture, "partition_and_compile", buggy)
    torch.manual_seed(0)
    model, (x,) = _inductor_case("cnn")
    with torch.no_grad():
        expected = model(x)
    out, report = run_fxvino(model, x)
    torch.testing.assert_close(out, expected)
    (fb,) = report.fallbacks
    assert fb.ran_on == "inductor" and "a bug of ours" in fb.reason


_FALLBACK_CHILD = """
import torch, fxvino
x = torch.randn(8, 1000)
fn = lambda t: torch.relu(t) * 2 + 1
with fxvino.collect_reports() as report:
    out = torch.compile(fn, backend="fxvino", options={"config": {"NOT_A_PROPERTY": "1"}})(x)
assert [f.ran_on for f in report.fallbacks] == ["inductor"], str(report)
print("MAXDIFF", (out - fn(x)).abs().max().item())
"""


def test_inductor_fallback_is_right_with_a_cache_another_cpu_class_wrote(tmp_path):
    """Inductor's on-disk graph cache, shared with a machine (or a vector width) of another class.

    The first process compiles with this CPU's vector width; the second, sharing the cache
    directory, as the next narrower class (``ATEN_CPU_CAPABILITY``: AVX2 after AVX-512, no
    vector unit after AVX2). Inductor's cache key leaves the width out, so without fxvino pinning
    it the second runs the first's 16-lane loops over 8-lane vectors (found under QEMU Haswell
    after the native suite: every element wrong) or fails to compile them.
    """
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    narrower = {"AVX512": "avx2"}.get(torch.backends.cpu.get_cpu_capability(), "default")
    for capability in (None, narrower):
        child = dict(env, ATEN_CPU_CAPABILITY=capability) if capability else env
        run = subprocess.run(
            [sys.executable, "-c", _FALLBACK_CHILD], env=child, capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0, run.stderr[-3000:]
        (line,) = [ln for ln in run.stdout.splitlines() if ln.startswith("MAXDIFF")]
        assert float(line.split()[1]) == 0.0, (capability, line)
