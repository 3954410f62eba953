"""Buffers a compiled graph writes at a few positions (a StaticCache's decode step) are written in
place, not returned whole by OpenVINO and copied back (input_writes.py)."""

from __future__ import annotations

import copy

import pytest
import torch

import fxvino
from harness import assert_all_on_openvino

SHAPE = (1, 2, 16, 8)


class _Cache(torch.nn.Module):
    """A key cache written at ``pos`` each call, then read whole (as attention reads it)."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.proj = torch.nn.Linear(8, 8)
        self.register_buffer("keys", torch.zeros(SHAPE))
        self.register_buffer("values", torch.zeros(SHAPE))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        k = self.proj(x)
        if self.how == "index_put":
            self.keys[:, :, pos] = k
            self.values[:, :, pos] = k * 3
        elif self.how == "index_copy":
            self.keys.index_copy_(2, pos, k)
            self.values.index_copy_(2, pos, k * 3)
        else:  # accumulate: a read-modify-write of the positions, left to the copy-back path
            self.keys.index_add_(2, pos, k)
            self.values.index_add_(2, pos, k * 3)
        return torch.softmax(self.keys @ self.values.transpose(-1, -2), -1).sum(-1)


def _writes_in_pytorch(fn) -> list[str]:
    """The in-place writes run during ``fn`` (the profiler's names: PyTorch's ops, fxvino's batch).

    Without them, OpenVINO returned each whole updated buffer and AOTAutograd copied it back.
    (That ``copy_`` still runs with them, from the buffer onto itself, which PyTorch skips.)
    """
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    names = ("aten::index_put_", "aten::index_copy_", "fxvino::position_writes")
    return [e.name for e in prof.events() if e.name in names]


@pytest.mark.parametrize("how", ["index_put", "index_copy", "accumulate"])
def test_cache_writes_equal_eager_and_are_done_in_place(how):
    torch.manual_seed(0)
    model = _Cache(how).eval()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino")
    with torch.no_grad(), fxvino.collect_reports() as report:
        for step in range(6):
            x = torch.randn(1, 2, 1, 8)
            pos = torch.tensor([(step * 5) % SHAPE[2]])
            expected = eager(x, pos)
            got = compiled(x, pos)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(model.keys, eager.keys, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(model.values, eager.values, rtol=1e-5, atol=1e-6)
        x, pos = torch.randn(1, 2, 1, 8), torch.tensor([3])
        writes = _writes_in_pytorch(lambda: compiled(x, pos))
    assert_all_on_openvino(report)
    if how == "accumulate":
        assert not writes, "an accumulating write is not a plain store: it stays in OpenVINO, copied back whole"
    else:
        # Both writes in one call after the graph (runtime/position_writes.py), not PyTorch's ops
        assert writes == ["fxvino::position_writes"], f"expected one call doing both writes, got {writes}"


def test_written_buffer_is_the_input_itself_and_eager_sees_it():
    """The write lands in the module's own buffer (same storage), visible to eager code after."""
    model = _Cache("index_put").eval()
    before = model.keys.data_ptr()
    compiled = torch.compile(model, backend="fxvino")
    with torch.no_grad():
        compiled(torch.ones(1, 2, 1, 8), torch.tensor([7]))
    assert model.keys.data_ptr() == before
    expected = model.proj(torch.ones(1, 2, 1, 8))[0, :, 0]
    torch.testing.assert_close(model.keys[0, :, 7], expected)
    assert model.keys[0, :, 6].abs().sum() == 0


def _partitions(report):
    return [p.partition_ref() for g in report.graphs for p in g.partitions if p.partition_ref is not None]


@pytest.mark.parametrize("how", ["index_put", "index_copy"])
def test_the_partition_computing_the_values_writes_them_itself(how):
    """The write's values never leave OpenVINO's result memory as tensors: the partition's call
    writes them into the cache and returns None in their place (position_writes.Absorbed)."""
    model = _Cache(how).eval()
    compiled = torch.compile(model, backend="fxvino")
    with torch.no_grad(), fxvino.collect_reports() as report:
        compiled(torch.randn(1, 2, 1, 8), torch.tensor([2]))
    (partition,) = _partitions(report)
    assert partition.absorbed is not None, "the writes run after the graph instead of inside the partition"
    assert len(partition.absorbed.values) == 2
    assert set(partition.absorbed.values) <= partition.absorbed.dropped


def _explode_on(op_name: str, monkeypatch) -> None:
    """OpenVINO inference fails for compiled models holding ``op_name`` (an original layer name;
    "" for every model)."""
    from fxvino.runtime import compiled_partition as runtime

    real_call = runtime.CompiledPartition.__call__

    def failing(self, *args):
        ops = self.compiled.get_runtime_model().get_ops()
        names = (op.get_rt_info()["originalLayersNames"].astype(str) for op in ops)
        if any(op_name in n for n in names):
            raise RuntimeError(f"inference exploded on {op_name}")
        return real_call(self, *args)

    monkeypatch.setattr(runtime.CompiledPartition, "__call__", failing)


@pytest.mark.parametrize("fails_on", ["Softmax", ""], ids=["split_around_softmax", "every_call_eager"])
def test_writes_the_partition_does_itself_still_happen_when_it_falls_back(fails_on, monkeypatch):
    """The partition's eager fallback (and the split graph that replaces it after bisection) do the
    writes from their own results: the cache equals eager's at every step."""
    torch.manual_seed(0)
    model = _Cache("index_put").eval()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino")
    with torch.no_grad(), fxvino.collect_reports() as report:
        x, pos = torch.randn(1, 2, 1, 8), torch.tensor([0])
        compiled(x, pos)  # compiles while inference still works
        eager(x, pos)
        _explode_on(fails_on, monkeypatch)
        for step in range(1, 5):
            x, pos = torch.randn(1, 2, 1, 8), torch.tensor([step * 3])
            torch.testing.assert_close(compiled(x, pos), eager(x, pos), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(model.keys, eager.keys, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(model.values, eager.values, rtol=1e-5, atol=1e-6)
    split = [f for f in report.fallbacks if "bisection" in f.reason]
    assert (split and split[0].op == "aten._softmax.default") if fails_on else not split, str(report)
    assert any("exploded" in f.reason for f in report.fallbacks), str(report)
