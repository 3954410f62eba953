"""PyTorch ops between OpenVINO partitions run on one thread (runtime/torch_threads.py)."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import pytest
import torch

import fxvino
from fxvino.runtime import torch_threads
from harness import run_fxvino

# What ``threads_seen`` saw: PyTorch's intra-op thread count while it ran, and MKL's (which
# computes ``sin`` and its kin of float tensors on its own OpenMP team), where PyTorch links MKL.
_SEEN: list[int] = []
_SEEN_MKL: list[int] = []
try:
    _mkl_threads = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so")).MKL_Get_Max_Threads
except (OSError, AttributeError):
    _mkl_threads = None
# What a thread that first used PyTorch while ``threads_seen`` ran got as its count.
_NEW_THREAD: list[int] = []


@torch.library.custom_op("fxvino_test::threads_seen", mutates_args=())
def threads_seen(x: torch.Tensor, fail: bool = False) -> torch.Tensor:
    _SEEN.append(torch.get_num_threads())
    if _mkl_threads is not None:
        _SEEN_MKL.append(_mkl_threads())
    thread = threading.Thread(target=lambda: _NEW_THREAD.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    if fail:
        raise RuntimeError("threads_seen was asked to fail")
    return x * 2


@threads_seen.register_fake
def _(x, fail=False):
    return torch.empty_like(x)


def _between_partitions(x, fail=False):
    return torch.relu(threads_seen(torch.sin(x) * 3, fail)) + 1


@pytest.fixture
def two_threads():
    """PyTorch on two threads (what the ops would run on without fxvino's choice), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    _SEEN.clear()
    _SEEN_MKL.clear()
    _NEW_THREAD.clear()
    yield
    torch.set_num_threads(before)


def test_pytorch_ops_between_partitions_run_on_one_thread(two_threads):
    x = torch.randn(64, 64)
    out, report = run_fxvino(_between_partitions, x)
    torch.testing.assert_close(out, _between_partitions(x))
    assert report.num_ov_partitions == 2 and report.torch_ops == {"fxvino_test.threads_seen.default": 1}
    assert _SEEN[0] == 1 and _SEEN[-1] == 2  # under fxvino, then eagerly
    assert _SEEN_MKL in ([], [1, 2])
    assert torch.get_num_threads() == 2  # the caller's count is back
    # Only the calling thread's count changed: a thread new to PyTorch meanwhile got the default.
    assert _NEW_THREAD[0] == 2
    (graph,) = report.graphs
    assert graph.one_thread_ops == 1 and "1 PyTorch op(s) run on one thread" in str(report)
    assert report.hints == []  # nothing of this graph spins between inferences


def test_the_callers_thread_count_is_restored_when_the_graph_raises(two_threads):
    compiled = torch.compile(_between_partitions, backend="fxvino")
    x = torch.randn(64, 64)
    with torch.no_grad():
        compiled(x)  # compiles with fail=False
        with pytest.raises(RuntimeError, match="asked to fail"):
            compiled(x, True)
    assert _SEEN[:2] == [1, 1] and torch.get_num_threads() == 2


def test_a_graph_without_openvino_partitions_keeps_pytorchs_threads(two_threads):
    out, report = run_fxvino(lambda x: threads_seen(x) + 1, torch.randn(64, 64), options={"disabled_ops": ["aten.add"]})
    assert report.num_ov_partitions == 0 and _SEEN == [2]
    assert report.graphs[0].one_thread_ops == 0


def test_a_large_pytorch_op_keeps_pytorchs_threads(two_threads, monkeypatch):
    monkeypatch.setattr(torch_threads, "ONE_THREAD_WORK", 64 * 64 - 1)
    _, report = run_fxvino(_between_partitions, torch.randn(64, 64))
    assert report.num_ov_partitions == 2 and _SEEN == [2]
    assert report.graphs[0].one_thread_ops == 0


@pytest.mark.parametrize(("n", "one_thread"), [(64, True), (256, False)])
def test_a_product_counts_its_multiply_adds(n, one_thread):
    """A 64x64x64 product (262,144 multiply-adds) is small; a 256x256x256 one (16.8 million) keeps
    PyTorch's threads, although it writes fewer elements than the limit."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    fn = lambda a, b: torch.relu(torch.mm(torch.sin(a), b)) + 1  # noqa: E731
    out, report = run_fxvino(fn, a, b, options={"disabled_ops": ["aten.mm"]})
    torch.testing.assert_close(out, fn(a, b))
    assert report.num_ov_partitions == 2 and report.torch_ops == {"aten.mm.default": 1}
    assert report.graphs[0].one_thread_ops == (1 if one_thread else 0)


def test_a_dynamic_shape_keeps_pytorchs_threads(two_threads):
    """A symbolic size says nothing of a call's work: PyTorch keeps its threads."""
    compiled = torch.compile(_between_partitions, backend="fxvino", dynamic=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for n in (48, 64):
            compiled(torch.randn(n, 64))
    assert report.num_ov_partitions >= 2 and set(_SEEN) == {2}
    assert all(g.one_thread_ops == 0 for g in report.graphs)
