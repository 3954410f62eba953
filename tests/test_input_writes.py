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
    """The in-place writes PyTorch ran during ``fn`` (the profiler's op names).

    Without them, OpenVINO returned each whole updated buffer and AOTAutograd copied it back.
    (That ``copy_`` still runs with them, from the buffer onto itself, which PyTorch skips.)
    """
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return [e.name for e in prof.events() if e.name in ("aten::index_put_", "aten::index_copy_")]


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
        # index_copy_ reaches the graph decomposed into index_put: either in-place op is the write
        assert len(writes) == 2, f"expected two in-place writes after the graph, got {writes}"


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
