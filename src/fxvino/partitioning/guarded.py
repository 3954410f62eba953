"""A compiled partition guarded at run time: if OpenVINO raises, the call runs eagerly.

A model that runs eagerly must not crash under fxvino, and OpenVINO can fail at inference on
inputs it compiled for (a shape its kernels reject). The guard keeps the FX graph to run instead,
and splits the partition around the node to blame for the calls that follow.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from fxvino.partitioning import isolation
from fxvino.partitioning.job import Job
from fxvino.partitioning.support import decline_reasons
from fxvino.report import Fallback
from fxvino.runtime import int32_range
from fxvino.runtime.compiled_partition import CompiledPartition
from fxvino.runtime.position_writes import Absorbed
from fxvino.utils.fx import graph_forward, placeholders_to_attrs

logger = logging.getLogger("fxvino")

_FAILED_CHECKS = (
    "a call failed the OpenVINO partition's checks (an index or divisor torch may reject, or an int64"
    " result beyond the int32 range OpenVINO's CPU plugin computes int64 in): it ran eagerly"
)
_WIDE = "an int64 input beyond the int32 range OpenVINO's CPU plugin computes int64 in: the call ran eagerly"

# Partition ``sub`` again by these reasons and compile its parts (partition.py's splitter).
Resplit = Callable[[torch.fx.GraphModule, dict[torch.fx.Node, str | None], Job, str], torch.fx.GraphModule]


class GuardedPartition:
    """Runs the OpenVINO partition; if OpenVINO raises at run time, runs the FX graph eagerly.

    A model that runs eagerly must not crash under fxvino: a bad input then raises torch's
    own error from the eager run. When the eager run succeeds, OpenVINO was at fault: the first
    such failure is bisected with the call's real inputs, and the partition is split around the
    node to blame (as for compile failures) for the calls that follow. Each distinct failure
    is reported once.
    """

    def __init__(
        self,
        partition: CompiledPartition,
        sub: torch.fx.GraphModule,
        constants: dict[int, Any],
        runtime_positions: list[int],
        name: str,
        job: Job,
        resplit: Resplit,
        checked: bool = False,
    ):
        self.partition = partition
        # The partition returns one more result, whether its indices were in range
        # (lowering/eager_checks.py): if not, the call runs eagerly and torch raises its error.
        self.checked = checked
        # Arguments the plugin would truncate when outside int32 (runtime/int32_range.py).
        self.wide = int32_range.wide_positions(sub, runtime_positions)
        self.sub = sub
        self.constants = constants
        self.runtime_positions = runtime_positions
        self.name = name
        self.job = job
        self.resplit = resplit
        self.seen: set[str] = set()
        self.replacement: Callable | None = None
        self.lock = threading.Lock()
        self.bisected = False
        self.absorbed: Absorbed | None = None

    def absorb(self, absorbed: Absorbed) -> bool:
        """Make the writes ``absorbed`` part of every call (the partition's own after its
        inference; from the results on the eager paths); False when the partition cannot."""
        if not self.partition.absorb(absorbed):
            return False
        self.absorbed = absorbed
        return True

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        if self.replacement is not None:
            result = self.replacement(*args)
            return result if self.absorbed is None else self.absorbed.from_results(args, result)
        if self.wide and not int32_range.fits(args, self.wide):
            return self._unchecked(args, _WIDE)
        try:
            result = self.partition(*args)
        except Exception as e:  # noqa: BLE001
            why = f"OpenVINO inference failed: {type(e).__name__}: {e}"
            full = self._full_args(args)
            result = tuple(self.sub(*full))  # torch's own error for a bad input
            with self.lock:
                if self.replacement is None and not self.bisected:
                    self.bisected = True
                    self.replacement = self._isolate(full, e)
            if self.replacement is None and why not in self.seen:
                self.seen.add(why)
                self.job.report.fallback(Fallback(self.name, "partition", why, "eager"))
            return result if self.absorbed is None else self.absorbed.from_results(args, result)
        if not self.checked:
            return result
        if result[-1]:
            return result[:-1]
        return self._unchecked(args)

    def _unchecked(self, args: tuple[Any, ...], why: str = _FAILED_CHECKS) -> tuple[Any, ...]:
        """A call that failed the partition's checks, run eagerly: torch raises its own error for a
        bad index or divisor. Should it not (an int64 value past int32, which it computes exactly),
        its results are returned, and said once."""
        result = tuple(self.sub(*self._full_args(args)))
        if why not in self.seen:
            self.seen.add(why)
            self.job.report.fallback(Fallback(self.name, "partition", why, "eager"))
        return result if self.absorbed is None else self.absorbed.from_results(args, result)

    def _full_args(self, args: tuple[Any, ...]) -> list[Any]:
        full: list[Any] = [None] * (len(self.constants) + len(self.runtime_positions))
        for i, v in self.constants.items():
            full[i] = v
        for pos, v in zip(self.runtime_positions, args, strict=True):
            full[pos] = v
        return full

    def _isolate(self, full: list[Any], error: Exception) -> Callable | None:
        """Split the partition around the node the failure comes from; None if none is found."""
        job = self.job
        if job.isolations >= isolation.MAX_ISOLATIONS or not isolation.device_infers(job.options):
            return None
        try:
            probe = isolation.infer_probe(job.options, self.constants, full)
            culprit = isolation.blame_by_bisection(self.sub, probe)
            if culprit is None:
                return None
            job.isolations += 1
            reason = (
                f"OpenVINO inference failed with it (found by bisection): {type(error).__name__}: {ov_message(error)}"
            )
            placeholders_to_attrs(self.sub, self.constants, "_fxvino_const_")
            reasons = decline_reasons(self.sub.graph, job.options)
            reasons[culprit] = reason
            return graph_forward(self.resplit(self.sub, reasons, job, self.name))
        except Exception:  # noqa: BLE001 - isolation is an improvement, never a new failure
            logger.warning("fxvino: could not isolate the failure of %s; it keeps running eagerly", self.name)
            return None


def ov_message(error: BaseException) -> str:
    """The line of an OpenVINO exception that says what went wrong: its first lines name only the
    C++ source file that threw ("Exception from src/inference/src/cpp/infer_request.cpp:224:")."""
    lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("Exception from", "Check '")) and not ln.endswith(":")]
    return (useful or lines or [""])[0]
