"""What ran where, and why: kept as data so tests, the CLI and users can all read it.

Reports reach a user two ways: :func:`collect_reports` (a context manager that gathers the
report of every graph compiled inside it) and :func:`fxvino.explain`. Collectors live in a
``ContextVar``, so two threads or two models never see each other's reports.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import functools
import logging
import os
import re
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import torch

logger = logging.getLogger("fxvino")


# Kinds of fallback already warned about in this process (log de-duplication only: reports
# always hold every record).
_warned: set[tuple[str, str, str]] = set()
_warned_lock = threading.Lock()


def forget_warnings() -> None:
    """Warn again about fallbacks already warned about (tests that check the log use it)."""
    with _warned_lock:
        _warned.clear()


def warn_once(key: tuple[str, ...], message: str, *args: Any) -> None:
    """Log ``message`` as a warning the first time ``key`` comes in this process, at DEBUG after."""
    with _warned_lock:
        first = key not in _warned
        _warned.add(key)
    logger.log(logging.WARNING if first else logging.DEBUG, message, *args)


@dataclasses.dataclass(frozen=True)
class Note:
    """Something OpenVINO computes differently from PyTorch on purpose, for the report.

    ``warning`` names the kind of a note that costs accuracy the user did not choose to give up
    (int8 products that saturate on this CPU): such a note is logged as well, once per kind and
    process, since a result that is only in a report is one most users never read.
    """

    text: str
    warning: str | None = None

    def log(self, where: str) -> None:
        """Log a warning note for ``where`` (once per kind and process); other notes stay in reports."""
        if self.warning is not None:
            warn_once(("note", self.warning), "fxvino: %s: %s", where, self.text)


@dataclasses.dataclass
class Fallback:
    """Something that did not run on OpenVINO as intended, and where it ran instead."""

    where: str  # node or partition name
    op: str  # the op (or "partition of N nodes")
    reason: str
    ran_on: str  # "pytorch" | "inductor" | "eager"


@dataclasses.dataclass
class PartitionReport:
    name: str
    num_nodes: int
    ops: collections.Counter
    lowering_seconds: float = 0.0
    compile_seconds: float = 0.0
    # Bytes of the frozen weights mapped from a file, kept out of resident memory (weight_pages.py).
    released_weight_bytes: int = 0
    on_openvino: bool = True
    # A training backward run once on zeros when compiled, to free the plugin's input buffers (training/aot.py).
    primed: bool = False
    # The runtime partition, weakly: a report must not keep a compiled model alive after a reset.
    partition_ref: weakref.ref | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def compiled(self) -> Any:
        """The partition's ``ov.CompiledModel`` while it is alive, else None (a partition sharing
        weights with others runs on the model they were compiled into together)."""
        partition = self.partition_ref() if self.partition_ref is not None else None
        return partition.compiled if partition is not None else None


@dataclasses.dataclass
class GraphReport:
    name: str
    kind: str  # "inference" | "forward" | "backward"
    num_nodes: int = 0
    ov_ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    torch_ops: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    partitions: list[PartitionReport] = dataclasses.field(default_factory=list)
    fallbacks: list[Fallback] = dataclasses.field(default_factory=list)
    frozen_inputs: int = 0
    folded_nodes: int = 0  # ops evaluated once at compile time (their inputs were all constants)
    # What OpenVINO does differently from PyTorch's arithmetic on purpose (not a fallback).
    notes: list[str] = dataclasses.field(default_factory=list)
    # Why the compiled models were freed (a dynamic recompile superseded the graph), if they were.
    released: str | None = None
    # PyTorch ops that run on one thread, between OpenVINO inferences (runtime/torch_threads.py).
    one_thread_ops: int = 0

    @property
    def ov_partitions(self) -> list[PartitionReport]:
        return [p for p in self.partitions if p.on_openvino]

    @property
    def lowering_seconds(self) -> float:
        return sum(p.lowering_seconds for p in self.partitions)

    @property
    def compile_seconds(self) -> float:
        return sum(p.compile_seconds for p in self.partitions)

    def fallback(self, fb: Fallback) -> None:
        """Record ``fb``; warn the first time its (op, reason, ran_on) appears in this process.

        Every fallback stays in the report; the log warns once per kind, so a decode loop that
        compiles a graph per shape, or a model with twelve layers of one unsupported op, does not
        repeat the same warning (the repeats go to DEBUG).
        """
        self.fallbacks.append(fb)
        key = (fb.op, fb.reason, fb.ran_on)
        warn_once(key, "fxvino: %s (%s) runs on %s: %s", fb.where, fb.op, fb.ran_on, fb.reason)

    def add_note(self, note: Note) -> None:
        """Record ``note`` once per graph; log it too when it is a warning."""
        if note.text in self.notes:
            return
        self.notes.append(note.text)
        note.log(f"graph {self.name}")

    def summary(self) -> str:
        lines = [
            f"graph {self.name} [{self.kind}]: {self.num_nodes} op nodes, "
            f"{sum(self.ov_ops.values())} on OpenVINO in {len(self.ov_partitions)} partition(s), "
            f"{sum(self.torch_ops.values())} in PyTorch; lowering {self.lowering_seconds:.2f}s, "
            f"OpenVINO compile {self.compile_seconds:.2f}s"
        ]
        if self.frozen_inputs:
            lines.append(f"  {self.frozen_inputs} parameters/buffers frozen into OpenVINO constants")
        released = sum(p.released_weight_bytes for p in self.partitions)
        if released:
            lines.append(f"  {released / 2**20:.0f} MB of them mapped from a file, kept out of resident memory")
        if self.folded_nodes:
            lines.append(f"  {self.folded_nodes} ops on constants only evaluated once at compile time")
        lines.extend(f"  note: {n}" for n in self.notes)
        if self.released:
            lines.append(f"  released: {self.released} (compiled again if it is called again)")
        if self.torch_ops:
            lines.append("  in PyTorch: " + ", ".join(f"{op} x{n}" for op, n in self.torch_ops.most_common()))
        if self.one_thread_ops:
            lines.append(
                f"  its {self.one_thread_ops} PyTorch op(s) run on one thread, between OpenVINO inferences "
                "(PyTorch's idle threads would spin on the cores OpenVINO needs)"
            )
        for fb in self.fallbacks:
            lines.append(f"  fallback: {fb.where} ({fb.op}) -> {fb.ran_on}: {fb.reason}")
        return "\n".join(lines)


@dataclasses.dataclass
class DynamoBreak:
    """Code Dynamo did not hand to fxvino: a graph break (the frame split into graphs with Python
    between them) or a frame it ran eagerly (``recompile_limit`` reached). Both are decided before
    any backend sees a graph, so fxvino can only report them, from Dynamo's own counters."""

    kind: str  # the first line of Dynamo's message: "Data-dependent branching", ...
    where: str  # "file.py:line" of the last user code the message names, "" if it names none
    count: int
    eager_frame: bool  # the whole frame ran eagerly, not just split


@dataclasses.dataclass
class Report:
    """All graphs compiled for one model (or inside one :func:`collect_reports` block)."""

    graphs: list[GraphReport] = dataclasses.field(default_factory=list)
    # What Dynamo left out of those graphs while the block ran (:class:`DynamoBreak`).
    dynamo: list[DynamoBreak] = dataclasses.field(default_factory=list)

    @property
    def fallbacks(self) -> list[Fallback]:
        return [f for g in self.graphs for f in g.fallbacks]

    @property
    def notes(self) -> list[str]:
        return [n for g in self.graphs for n in g.notes]

    @property
    def hints(self) -> list[str]:
        """What the user can change outside fxvino to make these graphs faster (not fallbacks)."""
        in_graphs = any(g.torch_ops and not g.one_thread_ops for g in self.graphs)
        between = in_graphs or any(not b.eager_frame for b in self.dynamo)
        return [OPENMP_SPIN_HINT] if between and openmp_spins() else []

    @property
    def num_ov_partitions(self) -> int:
        return sum(len(g.ov_partitions) for g in self.graphs)

    @property
    def ov_ops(self) -> collections.Counter:
        return sum((g.ov_ops for g in self.graphs), collections.Counter())

    @property
    def torch_ops(self) -> collections.Counter:
        return sum((g.torch_ops for g in self.graphs), collections.Counter())

    def __str__(self) -> str:
        lines = [g.summary() for g in self.graphs] or ["no graphs were compiled by fxvino"]
        for b in self.dynamo:
            what = "ran a frame eagerly" if b.eager_frame else "graph break"
            lines.append(f"dynamo: {what} x{b.count}{f' at {b.where}' if b.where else ''}: {b.kind}")
        lines.extend(f"hint: {h}" for h in self.hints)
        return "\n".join(lines)


OPENMP_SPIN_HINT = (
    "PyTorch runs between OpenVINO inferences here (graph breaks or ops in PyTorch), and its OpenMP threads "
    "spin for milliseconds after each parallel op, on the cores the next inference needs: start Python with "
    "GOMP_SPINCOUNT=10000 in the environment (EnCodec 24 kHz: 111 -> 86-91 ms per call; see the call path page)"
)


def openmp_spins() -> bool:
    """Whether PyTorch's parallel ops leave GNU OpenMP threads spinning at their default length:
    its backend is OpenMP with more than one thread, and neither ``GOMP_SPINCOUNT`` nor
    ``OMP_WAIT_POLICY`` is in the environment (libgomp reads them when it loads, so a value set
    from Python after ``import torch`` changes nothing; the environment is what a process starts with)."""
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ or torch.get_num_threads() < 2:
        return False
    return openmp_backend()


@functools.cache
def openmp_backend() -> bool:
    """Whether PyTorch's parallel ops run on OpenMP (not its native pool or TBB)."""
    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


_collectors: contextvars.ContextVar[tuple[Report, ...]] = contextvars.ContextVar("fxvino_collectors", default=())


# Dynamo's counters of code it left out of graphs, and the kind of message that means a whole
# frame ran eagerly.
_BREAK_COUNTERS = ("graph_break", "unimplemented")
_EAGER_FRAME = "recompile limit exceeded"
_USER_CODE = re.compile(r'File "([^"]+)", line (\d+)')


def _dynamo_counts() -> dict[str, dict[str, int]]:
    from torch._dynamo.utils import counters

    return {name: dict(counters[name]) for name in _BREAK_COUNTERS}


def _dynamo_breaks(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> list[DynamoBreak]:
    """What Dynamo counted between two snapshots, grouped by kind and place. A break is counted in
    ``unimplemented``, and in ``graph_break`` too when it happens inside an inlined call, under
    the same message: a message counts once, as the larger of the two. Dynamo words each message
    per graph (variable names included), so one line of user code can hold many messages."""
    grouped: collections.Counter = collections.Counter()
    for message in set().union(*(after[name] for name in _BREAK_COUNTERS)):
        new = max(after[name].get(message, 0) - before[name].get(message, 0) for name in _BREAK_COUNTERS)
        if new <= 0:
            continue
        kind = message.split("\n", 1)[0].strip()
        places = _USER_CODE.findall(message)
        where = f"{os.path.basename(places[-1][0])}:{places[-1][1]}" if places else ""
        grouped[(kind, where, _EAGER_FRAME in kind.lower())] += new
    return [DynamoBreak(kind, where, n, eager) for (kind, where, eager), n in grouped.most_common()]


@contextlib.contextmanager
def collect_reports() -> Iterator[Report]:
    """Gather the report of every graph fxvino compiles inside the ``with`` block, and what
    Dynamo left out of graphs meanwhile (its counters are per process: another thread compiling
    at the same time shows here too)."""
    report = Report()
    before = _dynamo_counts()
    token = _collectors.set(_collectors.get() + (report,))
    try:
        yield report
    finally:
        _collectors.reset(token)
        report.dynamo = _dynamo_breaks(before, _dynamo_counts())


def publish(graph: GraphReport) -> None:
    for r in _collectors.get():
        r.graphs.append(graph)
