"""PyTorch ops between OpenVINO inferences run on one thread.

PyTorch runs its parallel ops on GNU OpenMP threads, which spin for 5-10 ms after each parallel
region before they sleep (libgomp's default spin count, fixed when ``import torch`` loads it). An
OpenVINO inference that starts in that window shares its cores with them and waits for its
slowest thread. In a graph where ops left in PyTorch sit between OpenVINO partitions, every such
op hands the next partition that penalty. On the 2-core Zen 4 (``benchmarks/mixed_graph.py``),
eight 128x960 convolutions with a Snake activation after each, its ``sin`` left in PyTorch, took
25.7-27.6 ms per call on PyTorch's two threads and 16.5-16.9 on one (every op on OpenVINO:
12.6-12.8); a DAC decoder with the 29 ``sin`` of its Snakes in PyTorch 28.2-33.7 -> 24.5-29.4 ms.

So a graph holding OpenVINO partitions runs its PyTorch ops with the calling thread's OpenMP
and MKL thread counts at one (restored on return, exception or not), provided each of them is small: at
most ``ONE_THREAD_WORK`` elements written, or multiply-adds for a product or convolution. A large
product or an op whose size is unknown (a dynamic shape, a fallback partition compiled by
Inductor) keeps PyTorch's threads, which may be worth more than the spin costs.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.fx

from fxvino.report import openmp_backend

aten = torch.ops.aten

# The most work (elements written, or multiply-adds) an op in PyTorch may have for the graph to
# run its PyTorch ops on one thread. Measured on the 2-core Zen 4: with activations of 1,966,080
# elements between convolutions one thread still won (185 against 219 ms per call).
ONE_THREAD_WORK = 2**22

# Node meta key saying what a partition call runs: "openvino", "fallback" (Inductor or eager), or
# the GraphModule of a partition split around a node that failed to compile (partition.py).
RUNS = "fxvino_runs"

# The operand whose last dimension (or, for a convolution, whose weight's) each output element
# sums over.
_PRODUCTS: dict[Any, int] = {
    aten.mm.default: 0,
    aten.bmm.default: 0,
    aten.addmm.default: 1,
    aten.baddbmm.default: 1,
}


def pytorch_ops_between_inferences(gm: torch.fx.GraphModule) -> int:
    """How many ops of ``gm`` (a partitioned graph) should run on one thread: its PyTorch ops
    when it also runs OpenVINO partitions and each of them is small, else 0."""
    counts = _scan(gm.graph) if available() else None
    if counts is None:
        return 0
    ops, partitions = counts
    return ops if partitions else 0


def _scan(graph: torch.fx.Graph) -> tuple[int, int] | None:
    """(small PyTorch ops, OpenVINO partitions) of ``graph``, None if any op is large or unsized."""
    ops = partitions = 0
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        runs = node.meta.get(RUNS)
        if runs == "openvino":
            partitions += 1
            continue
        if isinstance(runs, torch.fx.GraphModule):
            inner = _scan(runs.graph)
            if inner is None:
                return None
            ops, partitions = ops + inner[0], partitions + inner[1]
            continue
        if runs is not None:
            return None  # a fallback partition: its work is Inductor's, not sized here
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            if isinstance(target, torch._ops.HigherOrderOperator):
                return None
            continue  # getitem, arithmetic on sizes
        if target.is_view:
            continue
        work = _work(node)
        if work is None or work > ONE_THREAD_WORK:
            return None
        ops += 1
    return ops, partitions


def _work(node: torch.fx.Node) -> int | None:
    """Elements ``node`` writes, times the elements each sums over for a product or convolution;
    None when a size is symbolic or unknown."""
    if "val" not in node.meta:
        return None
    written = 0
    for value in torch.utils._pytree.tree_leaves(node.meta["val"]):
        if isinstance(value, torch.Tensor):
            n = value.numel()
            if not isinstance(n, int):
                return None
            written += n
    inner = 1
    if node.target in _PRODUCTS:
        inner = _static_dim(node.args[_PRODUCTS[node.target]], -1)
    elif node.target is aten.convolution.default:
        weight = node.args[1].meta.get("val") if isinstance(node.args[1], torch.fx.Node) else None
        dims = list(weight.shape[1:]) if isinstance(weight, torch.Tensor) else [None]
        inner = math.prod(dims) if all(isinstance(d, int) for d in dims) else None
    return None if inner is None else written * inner


def _static_dim(arg: Any, dim: int) -> int | None:
    value = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    size = value.shape[dim] if isinstance(value, torch.Tensor) and value.dim() else None
    return size if isinstance(size, int) else None


_SetThreads = Callable[[int], Any]


@functools.cache
def _thread_setters() -> tuple[_SetThreads, _SetThreads | None] | None:
    """The calling thread's own thread-count setters of the libraries PyTorch's parallel ops run
    on: OpenMP's ``omp_set_num_threads`` and, where PyTorch links MKL (whose vector math computes
    ``sin``, ``exp``, ... of a float tensor on its own OpenMP team), ``mkl_set_num_threads_local``
    (returns the previous count, 0 for MKL's global one). None if PyTorch's parallel backend is
    not OpenMP or its runtime is not found.

    Not ``torch.set_num_threads``: that also stores the count as the default of every thread that
    first uses PyTorch later, so a server thread starting while a graph runs would keep one thread
    for good."""
    if not openmp_backend():
        return None
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return None
    loaded = {line.split()[-1] for line in maps if "/lib" in line}
    torch_dir = str(Path(torch.__file__).parent)
    omp = _function(
        sorted(
            (p for p in loaded if Path(p).name.startswith(("libgomp", "libiomp5", "libomp"))),
            key=lambda p: not p.startswith(torch_dir),  # PyTorch's own first
        ),
        "omp_set_num_threads",
        None,
    )
    if omp is None:
        return None
    # MKL's C name: its lower-case names are the Fortran interface, which takes a pointer.
    libtorch = sorted(p for p in loaded if Path(p).name.startswith("libtorch_cpu"))
    mkl = _function(libtorch, "MKL_Set_Num_Threads_Local")
    return omp, mkl


def _function(paths: list[str], name: str, restype: Any = ctypes.c_int) -> _SetThreads | None:
    for path in paths:
        try:
            fn = getattr(ctypes.CDLL(path), name)
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int], restype
        return fn
    return None


def available() -> bool:
    """Whether graphs can run their PyTorch ops on one thread here."""
    return _thread_setters() is not None


def one_thread(forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` run with the calling thread's OpenMP and MKL counts at one, restored after
    (~1 us for the sets and restores; the setters are looked up here, once)."""
    setters = _thread_setters()
    if setters is None:
        return forward

    @functools.wraps(forward)
    def run(*args: Any) -> Any:
        saved = _to_one_thread(setters)
        if saved is None:
            return forward(*args)
        try:
            return forward(*args)
        finally:
            _restore(setters, saved)

    return run


@contextlib.contextmanager
def one_thread_here() -> Iterator[None]:
    """The block's PyTorch ops on the calling thread alone, its counts restored after: for
    PyTorch work right before an inference, such as a server decoding requests (``fxvino.serving``:
    a parallel normalize of the input cost the next ResNet-50 f32 call 3.5 ms, on one thread 0.1)."""
    setters = _thread_setters()
    saved = _to_one_thread(setters) if setters is not None else None
    try:
        yield
    finally:
        if saved is not None:
            _restore(setters, saved)  # type: ignore[arg-type]  # not None when saved is not


_Setters = tuple[_SetThreads, _SetThreads | None]


def _to_one_thread(setters: _Setters) -> tuple[int, int] | None:
    """Set the calling thread's counts to one; the (OpenMP, MKL) counts to restore, None if
    PyTorch runs one thread already. ``torch.get_num_threads`` first: it settles the counts of a
    thread new to PyTorch, which would otherwise be set at its first parallel op."""
    threads = torch.get_num_threads()
    if threads == 1:
        return None
    omp, mkl = setters
    omp(1)
    return threads, (mkl(1) if mkl is not None else 0)


def _restore(setters: _Setters, saved: tuple[int, int]) -> None:
    omp, mkl = setters
    omp(saved[0])
    if mkl is not None:
        mkl(saved[1])
