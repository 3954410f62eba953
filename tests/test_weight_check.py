"""The per-call frozen-weight check (weight_check.py, native/weight_stamp.cpp): both paths give the
same answers for every kind of change PyTorch tracks, and the native one is what compiled graphs
use wherever a C++ compiler exists (CI's machines: it is what keeps the check at a few µs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import fxvino
from fxvino import native
from fxvino.runtime.weight_check import NativeCheck, PythonCheck, weight_check

HAS_COMPILER = any(shutil.which(c) for c in ("c++", "g++", "clang++"))


def _params(n: int = 6) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.nn.Parameter(torch.randn(4, 3)) for _ in range(n))


def _make(kind: str, tensors: tuple[torch.Tensor, ...], positions: tuple[int, ...]):
    if kind == "python":
        return PythonCheck(tensors, positions)
    helper = native.load("weight_stamp")
    if helper is None:
        pytest.skip("no C++ compiler here: the native helper cannot be built")
    return NativeCheck(helper, tensors, positions)


KINDS = ["native", "python"]


def _edit_add(ts):
    with torch.no_grad():
        ts[2].add_(1.0)


def _edit_copy(ts):
    with torch.no_grad():
        ts[0].copy_(torch.zeros(4, 3))


def _edit_add_in_inference_mode(ts):
    with torch.inference_mode():
        ts[1].mul_(2.0)


def _edit_new_data(ts):
    ts[3].data = torch.randn(4, 3)


def _edit_same_storage_other_offset(ts):
    base = torch.randn(5, 3)
    ts[4].data = base[:4]
    ts[4].data = base[1:]  # same storage, another offset


def _edit_resized_storage(ts):
    storage = ts[5].untyped_storage()
    size = storage.nbytes()
    storage.resize_(0)  # what FSDP does to free a parameter's data and gather it back
    storage.resize_(size)


EDITS = [_edit_add, _edit_copy, _edit_add_in_inference_mode, _edit_new_data, _edit_resized_storage]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("edit", EDITS, ids=lambda f: f.__name__[6:])
def test_every_tracked_change_is_seen_until_taken(kind, edit):
    ts = _params()
    args = [torch.randn(2), *ts]  # the graph's inputs: a live one, then the weights
    check = _make(kind, ts, tuple(range(1, 7)))
    assert check.same(args) and check.same(tuple(args))
    edit(ts)
    assert not check.same(args), f"{edit.__name__} went unseen"
    assert check.identical(args), "contents changed, not identity"
    check.take()
    assert check.same(args) and check.same(tuple(args))


@pytest.mark.parametrize("kind", KINDS)
def test_a_view_at_another_offset_of_the_same_storage_is_a_change(kind):
    ts = _params()
    base = torch.randn(5, 3)
    ts[4].data = base[:4]
    check = _make(kind, ts, tuple(range(6)))
    _edit_same_storage_other_offset(ts)
    assert not check.same(list(ts))


@pytest.mark.parametrize("kind", KINDS)
def test_other_tensors_or_short_arguments_are_not_the_same(kind):
    ts = _params()
    check = _make(kind, ts, tuple(range(6)))
    other = list(ts)
    other[2] = torch.nn.Parameter(ts[2].detach().clone())  # equal values, another tensor
    assert not check.same(other) and not check.identical(other)
    assert not check.same(list(ts[:4])) and not check.identical(list(ts[:4]))
    assert check.same(list(ts) + [torch.randn(1)])


@pytest.mark.parametrize("kind", KINDS)
def test_inference_tensors_are_checked_by_their_data(kind):
    with torch.inference_mode():
        ts = tuple(torch.randn(3, 3) for _ in range(3))
    check = _make(kind, ts, (0, 1, 2))
    assert check.same(list(ts))
    with torch.inference_mode():
        ts[1].set_(torch.randn(3, 3))
    assert not check.same(list(ts))


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler")
def test_compiled_graphs_use_the_native_check_and_python_for_subclasses():
    from torch.testing._internal.two_tensor import TwoTensor

    ts = _params(3)
    assert isinstance(weight_check(ts, (0, 1, 2)), NativeCheck)
    wrapped = (*ts, TwoTensor(torch.randn(2), torch.randn(2)))
    assert isinstance(weight_check(wrapped, (0, 1, 2, 3)), PythonCheck)  # no plain storage to read


@pytest.mark.skipif(not HAS_COMPILER, reason="no C++ compiler")
def test_native_build_is_cached_and_failures_name_the_cause(tmp_path, monkeypatch):
    first = native.build("weight_stamp", tmp_path)
    stamp = first.stat().st_mtime_ns
    assert native.build("weight_stamp", tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name], "no temporary file is left behind"
    module = native.import_built("weight_stamp", first)
    ts = _params(2)
    assert module.same(module.make(ts, (0, 1)), list(ts))

    with pytest.raises(native.BuildError, match="no source nonexistent.cpp.*available: .*weight_stamp"):
        native.build("nonexistent", tmp_path)
    monkeypatch.setenv("CXX", str(Path(shutil.which("false") or "/bin/false")))
    with pytest.raises(native.BuildError, match="failed with exit code 1"):
        native.build("weight_stamp", tmp_path / "other")
    monkeypatch.setenv("FXVINO_NATIVE", "0")
    assert native.load.__wrapped__("weight_stamp") is None


def test_weights_built_under_inference_mode_run_on_openvino_and_stay_current():
    """Their tensors have no version counter; they once sent the whole graph to eager."""
    torch.manual_seed(0)
    with torch.inference_mode():
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
    compiled = torch.compile(model, backend="fxvino")
    x = torch.randn(3, 8)
    with torch.inference_mode(), fxvino.collect_reports() as report:
        torch.testing.assert_close(compiled(x), model(x))
    assert report.graphs and not report.fallbacks and not report.torch_ops, str(report)
    assert report.graphs[0].frozen_inputs == 4, str(report)
    with torch.inference_mode():
        model[0].weight.add_(1.0)  # untracked for inference tensors, until told
    fxvino.weights_changed(model)
    with torch.inference_mode(), fxvino.collect_reports() as again:
        torch.testing.assert_close(compiled(x), model(x))
    assert len(again.graphs) == 1, "the change compiles the graph again"


@pytest.mark.parametrize("weights", ["f32", "torchao-int8"])
def test_under_a_guard_filter_replaced_weights_stay_current_and_resized_ones_raise(weights):
    """PyTorch's guard filter for module trees (what docs/performance/call-path.md offers to cut
    Dynamo's per-call guards) also drops the guards on weights: fxvino's own check keeps a weight
    replaced or edited in place current, and a weight of other sizes, which the traced graph no
    longer fits, raises an error naming the filter (it used to crash in OpenVINO's shape checks or
    compute with the traced sizes)."""
    from fxvino.runtime.frozen_weights import WeightLayoutChanged

    torch.manual_seed(0)

    def make(out_features: int) -> torch.nn.Linear:
        layer = torch.nn.Linear(32, out_features).eval()
        if weights == "torchao-int8":
            from torchao.quantization import Int8WeightOnlyConfig, quantize_

            quantize_(layer, Int8WeightOnlyConfig())
        return layer

    model = torch.nn.Sequential(make(32), torch.nn.ReLU(), make(32)).eval()
    compiled = torch.compile(
        model, backend="fxvino", options={"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
    )
    x = torch.randn(3, 32)
    tol = dict(atol=1e-5, rtol=1e-5) if weights == "f32" else dict(atol=2e-2, rtol=2e-2)
    with fxvino.collect_reports() as report, torch.no_grad():
        before = compiled(x)
        torch.testing.assert_close(before, model(x), **tol)
        model[2].weight = make(32).weight  # another tensor of the same sizes
        replaced = compiled(x)
        torch.testing.assert_close(replaced, model(x), **tol)
        assert (replaced - before).abs().max() > 0.05  # the new weight's result, not the frozen one's
        model[0].bias.mul_(-1)  # edited in place
        torch.testing.assert_close(compiled(x), model(x), **tol)
        smaller = make(8)
        model[2].weight, model[2].bias = smaller.weight, smaller.bias
        with pytest.raises(WeightLayoutChanged, match=r"guard_filter_fn.*torch._dynamo.reset\(\)") as raised:
            compiled(x)
    assert "[32, 32]" in str(raised.value) and "[8, 32]" in str(raised.value), str(raised.value)
    assert not report.fallbacks and not report.torch_ops, str(report)
