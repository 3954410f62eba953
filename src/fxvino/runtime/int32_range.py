"""int64 inputs the CPU plugin would change.

OpenVINO's CPU plugin computes int64 as int32, and converts an int64 input by dropping its high
half (``2**40 + 7`` became 7, a hashed id past 2**31 another id). A partition's lowerings keep
their own int64 results inside int32 or fail their checks (lowering/eager_checks.py); what comes
in is checked here, before the call, and a call with a value outside int32 runs eagerly
(partitioning/guarded.py). One int64 scalar costs ~0.2 us, a larger tensor a min and max.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from fxvino.utils.dtypes import in_int32


def wide_positions(sub: torch.fx.GraphModule, runtime_positions: Sequence[int]) -> tuple[int, ...]:
    """Which of a partition's runtime arguments are int64 tensors or symbolic ints."""
    placeholders = list(sub.graph.find_nodes(op="placeholder"))
    wide = []
    for i, pos in enumerate(runtime_positions):
        val = placeholders[pos].meta.get("val")
        if isinstance(val, torch.SymInt) or (isinstance(val, torch.Tensor) and val.dtype == torch.int64):
            wide.append(i)
    return tuple(wide)


def fits(args: Sequence[Any], positions: Sequence[int]) -> bool:
    """Whether every value of ``args`` at ``positions`` lies in the int32 range."""
    for i in positions:
        a = args[i]
        if isinstance(a, torch.Tensor):
            n = a.numel()
            if n == 1:
                low = high = int(a)
            elif n == 0:
                continue
            else:
                lo, hi = torch.aminmax(a)
                low, high = int(lo), int(hi)
        elif isinstance(a, int):
            low = high = a
        else:
            continue
        if not in_int32(low, high):
            return False
    return True
