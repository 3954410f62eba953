"""The exporter's errors: what could not be exported, said once for the whole graph.

A standalone IR has no PyTorch to fall back to, so an op that does not lower is an error
rather than a partition left in PyTorch. The error lists every such op at once, with the line
of the model's source it came from: fixing them one export at a time would cost an export
(seconds to minutes) per op.
"""

from __future__ import annotations

import dataclasses
import os
import re

import torch

# Frames inside torch itself say where torch implements an op, not where the model calls it.
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')


class ExportError(ValueError):
    """A model that cannot be exported as one OpenVINO IR; ``unsupported`` lists the ops to blame."""

    def __init__(self, message: str, unsupported: list[UnsupportedOp] | None = None):
        super().__init__(message)
        self.unsupported = list(unsupported or [])


@dataclasses.dataclass(frozen=True)
class UnsupportedOp:
    """One graph node the lowering declined or failed on."""

    node: str  # the FX node's name
    op: str  # the ATen op, e.g. "aten.relu.default"
    reason: str  # decline_reason's words, or the lowering's failure
    source: str | None  # "file:line in function: code", from the node's stack trace

    def __str__(self) -> str:
        where = f"\n      at {self.source}" if self.source else ""
        return f"{self.node} ({self.op}): {self.reason}{where}"


def source_line(stack_trace: str | None) -> str | None:
    """The model's line that made a node: the last frame of its stack trace outside torch.

    torch.export records the Python stack of each op; its last frame is often torch's own
    module code (``nn.Linear.forward``), which names no line a user can change, so frames in
    torch's directory are skipped unless there are no others.
    """
    if not stack_trace:
        return None
    lines = stack_trace.strip().splitlines()
    frames = []
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m is None:
            continue
        code = lines[i + 1].strip() if i + 1 < len(lines) and _FRAME.match(lines[i + 1]) is None else ""
        where = f"{m['file']}:{m['line']} in {m['func']}"
        frames.append((m["file"], f"{where}: {code}" if code else where))
    if not frames:
        return lines[-1].strip() or None
    outside = [text for file, text in frames if not file.startswith(_TORCH_DIR)]
    return (outside or [frames[-1][1]])[-1]


def unsupported_error(unsupported: list[UnsupportedOp], total: int) -> ExportError:
    """One error naming every op that kept the graph from lowering."""
    ops = sorted({u.op for u in unsupported})
    lines = [
        f"fxvino.export: {len(unsupported)} of {total} op nodes cannot run on OpenVINO "
        f"({', '.join(ops)}); an exported IR has no PyTorch to fall back to:"
    ]
    lines += [f"  {u}" for u in unsupported]
    return ExportError("\n".join(lines), unsupported)
