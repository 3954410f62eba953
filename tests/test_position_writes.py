"""The batched in-place writes after a graph (runtime/position_writes.py) against PyTorch's own ops:
the native path where it applies, PyTorch's op (and its errors) where it does not."""

from __future__ import annotations

import pytest
import torch

from fxvino import native
from fxvino.runtime.position_writes import PositionWrites, Write

aten = torch.ops.aten
PUT, COPY = aten.index_put_.default, aten.index_copy_.default


def _expected(op, dim, target, index, values):
    out = target.clone()
    if op is PUT:
        aten.index_put_.default(out, [None] * dim + [index], values)
    else:
        aten.index_copy_.default(out, dim, index, values)
    return out


def _native_only(monkeypatch):
    """Fail if a write falls back to PyTorch: the case under test must be the native one."""

    def refuse(*args):
        raise AssertionError("the write fell back to PyTorch's op")

    monkeypatch.setattr(PositionWrites, "_torch", refuse)


@pytest.mark.parametrize("op", [PUT, COPY])
@pytest.mark.parametrize(
    "layout",
    ["contiguous", "target_transposed", "values_transposed", "target_sliced"],
)
def test_native_writes_equal_pytorchs_and_bump_versions(op, layout, monkeypatch):
    assert native.load("index_writes") is not None, "the native helper must build here (a C++ compiler is installed)"
    _native_only(monkeypatch)
    torch.manual_seed(0)
    target = torch.randn(2, 3, 16, 8)
    values = torch.randn(2, 3, 2, 8)
    if layout == "target_transposed":
        target = torch.randn(8, 16, 3, 2).permute(3, 2, 1, 0)
    elif layout == "values_transposed":
        values = torch.randn(2, 3, 8, 2).transpose(2, 3)
    elif layout == "target_sliced":
        target = torch.randn(2, 3, 20, 10)[:, :, 2:18, 1:9]
    index = torch.tensor([5, 11])
    other = torch.randn(4, 6)  # a second write in the same call, along another dimension
    other_values, other_index = torch.randn(4, 1), torch.tensor([2])
    expected = _expected(op, 2, target, index, values)
    other_expected = _expected(op, 1, other, other_index, other_values)
    versions = target._version, other._version
    writes = PositionWrites([Write(op, 2), Write(op, 1)])
    out = writes([target, other], [index, other_index], [values, other_values])
    assert out[0] is target and out[1] is other
    torch.testing.assert_close(target, expected, rtol=0, atol=0)
    torch.testing.assert_close(other, other_expected, rtol=0, atol=0)
    assert (target._version, other._version) == (versions[0] + 1, versions[1] + 1)


def test_negative_positions_count_from_the_end_for_index_put(monkeypatch):
    _native_only(monkeypatch)
    target, values, index = torch.zeros(1, 2, 8, 4), torch.randn(1, 2, 1, 4), torch.tensor([-1])
    expected = _expected(PUT, 2, target, index, values)
    PositionWrites([Write(PUT, 2)])([target], [index], [values])
    torch.testing.assert_close(target, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("op", "case"),
    [
        (COPY, "broadcast"),  # index_copy_ does not broadcast: PyTorch's error
        (PUT, "other_dtype"),  # values of another dtype than the target's
        (PUT, "int32_index"),
        (COPY, "negative"),  # index_copy_ rejects a negative position: PyTorch's error
        (PUT, "out_of_range"),
        (COPY, "out_of_range"),
    ],
)
def test_cases_the_native_path_declines_get_pytorchs_behaviour(op, case):
    target, values, index = torch.zeros(1, 2, 8, 4), torch.randn(1, 2, 1, 4), torch.tensor([3])
    if case == "broadcast":
        values = torch.randn(4)
    elif case == "other_dtype":
        values = values.double()
    elif case == "int32_index":
        index = index.int()
    elif case == "negative":
        index = torch.tensor([-2])
    elif case == "out_of_range":
        index = torch.tensor([8])
    try:
        expected = _expected(op, 2, target, index, values)
    except (IndexError, RuntimeError) as e:
        with pytest.raises(type(e)):
            PositionWrites([Write(op, 2)])([target], [index], [values])
        return
    PositionWrites([Write(op, 2)])([target], [index], [values])
    torch.testing.assert_close(target, expected, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(2, 1, 8), (8,), (1, 1, 1, 8), (2, 1, 1)])
def test_index_put_values_broadcast_natively_as_in_pytorch(shape, monkeypatch):
    """AOTAutograd hands a cache write's values over with leading ones dropped ([2, 1, 8] into a
    [1, 2, 16, 8] cache): broadcast as PyTorch does."""
    _native_only(monkeypatch)
    target, values, index = torch.zeros(1, 2, 16, 8), torch.randn(shape), torch.tensor([9])
    expected = _expected(PUT, 2, target, index, values)
    PositionWrites([Write(PUT, 2)])([target], [index], [values])
    torch.testing.assert_close(target, expected, rtol=0, atol=0)


def test_a_declined_write_keeps_the_order_of_the_others():
    """Writes after one the native path declines are still done, in order (two into one target:
    the later one wins, as it would in PyTorch)."""
    target = torch.zeros(1, 1, 8, 2)
    first, second = torch.full((1, 1, 1, 2), 1.0), torch.full((1, 1, 1, 2), 2.0)
    middle = torch.full((1, 1, 1, 2), 5.0)
    index = torch.tensor([4])
    writes = PositionWrites([Write(PUT, 2), Write(PUT, 2), Write(PUT, 2)])
    writes([target, target, target], [index, index.int(), index], [first, middle, second])  # int32: PyTorch's
    assert target[0, 0, 4].tolist() == [2.0, 2.0]


def test_inference_tensors_written_in_inference_mode_and_refused_outside_it():
    with torch.inference_mode():
        target, values, index = torch.zeros(1, 2, 8, 4), torch.randn(1, 2, 1, 4), torch.tensor([6])
        PositionWrites([Write(PUT, 2)])([target], [index], [values])
    torch.testing.assert_close(target[:, :, 6:7], values, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="[Ii]nference"):  # PyTorch's own error, as eagerly
        PositionWrites([Write(PUT, 2)])([target], [index], [values])


def test_without_the_native_helper_pytorch_does_every_write(monkeypatch):
    target, values, index = torch.zeros(1, 2, 8, 4), torch.randn(1, 2, 1, 4), torch.tensor([1])
    writes = PositionWrites([Write(COPY, 2)])
    monkeypatch.setattr(writes, "native", None)
    writes([target], [index], [values])
    torch.testing.assert_close(target[:, :, 1:2], values, rtol=0, atol=0)
