"""Fallbacks: what OpenVINO does not take still runs correctly, and is reported."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

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


@pytest.fixture
def broken_relu():
    """Make the relu lowering raise, as a buggy lowering would."""
    ensure_registered()
    entry = registry.REGISTRY[aten.relu.default]

    def boom(ctx, node, x):
        raise RuntimeError("forced failure")

    registry.REGISTRY[aten.relu.default] = dataclasses.replace(entry, fn=boom)
    yield
    registry.REGISTRY[aten.relu.default] = entry


def test_failed_lowering_falls_back_to_inductor(broken_relu, caplog):
    model, x = _mlp(), torch.randn(3, 16)
    with caplog.at_level(logging.WARNING, logger="fxvino"):
        out, report = run_fxvino(model, x)
    torch.testing.assert_close(out, model(x))
    (fb,) = report.fallbacks
    assert fb.ran_on == "inductor"
    assert "lowering relu (aten.relu.default) failed: RuntimeError: forced failure" in fb.reason
    assert report.num_ov_partitions == 0
    assert "forced failure" in caplog.text


def test_failed_openvino_compile_falls_back(monkeypatch):
    from fxvino import partition

    class NoCompile:
        def compile_model(self, *a, **k):
            raise RuntimeError("device lost")

    monkeypatch.setattr(partition, "core", lambda: NoCompile())
    model, x = _mlp(), torch.randn(3, 16)
    out, report = run_fxvino(model, x)
    torch.testing.assert_close(out, model(x))
    (fb,) = report.fallbacks
    assert "OpenVINO compile failed: RuntimeError: device lost" in fb.reason
    assert fb.ran_on in ("inductor", "eager")


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


def test_runtime_failure_runs_eagerly_and_is_reported(monkeypatch):
    from fxvino import runtime

    model, x = _mlp(), torch.randn(3, 16)
    compiled = torch.compile(model, backend="fxvino")
    import fxvino

    with fxvino.collect_reports() as report, torch.no_grad():
        compiled(x)

        def fail(self, *args):
            raise RuntimeError("inference exploded")

        monkeypatch.setattr(runtime.CompiledPartition, "__call__", fail)
        out = compiled(x)
    torch.testing.assert_close(out, model(x))
    assert any("inference exploded" in f.reason and f.ran_on == "eager" for f in report.fallbacks)
