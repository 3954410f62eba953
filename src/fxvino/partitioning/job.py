"""What every partition of one graph shares while it is split and compiled (and split again)."""

from __future__ import annotations

import dataclasses

from fxvino.options import Options
from fxvino.partitioning import isolation
from fxvino.report import GraphReport
from fxvino.runtime.compiled_partition import CompiledPartition


@dataclasses.dataclass
class Job:
    """What every partition of one graph shares: options, the report, and the isolation budget."""

    options: Options
    report: GraphReport
    isolations: int = 0
    device_ok: bool | None = None  # whether the device compiles anything (asked once, lazily)
    partitions: list[CompiledPartition] = dataclasses.field(default_factory=list)

    def device_compiles(self) -> bool:
        if self.device_ok is None:
            self.device_ok = isolation.device_compiles(self.options)
        return self.device_ok
