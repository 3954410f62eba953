"""Loading OpenVINO's CPU plugin without oneTBB's thread binding, on hosts where that binding
changes nothing.

The plugin runs every inference inside a oneTBB arena made with constraints, and oneTBB's
``tbbbind`` (shipped in OpenVINO's wheel) enforces them through hwloc: each thread entering the
arena, the calling thread on every inference included, has its affinity read and set on entry
and set back on exit, pinned or not. On a host with one NUMA node, one thread per core and one
kind of core, the mask it sets is the process's own, so those three system calls and hwloc's
bitmaps do nothing but cost time: a two-op graph's inference took 8.0 us with them and 4.5
without on a 2-core Zen 4 (and a 1024x1024 product on two threads was no slower). hwloc binds
only when it believes its topology describes this machine, and it decides that once, when
oneTBB loads it with the plugin; ``HWLOC_THISSYSTEM=0`` at that moment keeps it from binding.

OpenVINO's own pinning (``ENABLE_CPU_PINNING=YES``, ``mode="reduce-overhead"``) does not go
through hwloc and still pins. Where a host has NUMA nodes, SMT siblings or two kinds of core,
the binding is what keeps a stream on its node or one thread per core, and it stays. A user's
own ``HWLOC_THISSYSTEM`` is left as it is (``=1`` keeps the binding everywhere).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

VARIABLE = "HWLOC_THISSYSTEM"


def _cpu_list(text: str) -> set[int]:
    """A sysfs CPU list ("0-3,8,10-11") as a set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def binding_changes_nothing(sys_root: Path = Path("/sys"), cpus: set[int] | None = None) -> str | None:
    """None when the binding would set the process's own mask on this host (Linux, one NUMA node,
    no SMT sibling of any CPU this process may run on, one kind of core); else why it matters.
    Anything unreadable counts as mattering."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    try:
        nodes = list((sys_root / "devices/system/node").glob("node[0-9]*"))
        if len(nodes) > 1:
            return f"{len(nodes)} NUMA nodes"
        if (sys_root / "devices/cpu_atom").exists():
            return "two kinds of core"
        cpu_dir = sys_root / "devices/system/cpu"
        capacities = set()
        for cpu in sorted(cpus if cpus is not None else os.sched_getaffinity(0)):
            topology = cpu_dir / f"cpu{cpu}"
            if len(_cpu_list((topology / "topology/thread_siblings_list").read_text())) > 1:
                return "SMT siblings"
            if (topology / "cpu_capacity").exists():
                capacities.add((topology / "cpu_capacity").read_text().strip())
        if len(capacities) > 1:
            return "two kinds of core"
    except (OSError, ValueError) as exc:
        return f"topology unreadable ({exc})"
    return None


def _tbbbind_loaded() -> bool:
    """oneTBB opens tbbbind when it first reads the topology; after that the variable is not read."""
    try:
        return "libtbbbind" in Path("/proc/self/maps").read_text()
    except OSError:
        return False


@contextlib.contextmanager
def plugin_load_without_binding() -> Iterator[str]:
    """Around the CPU plugin's first load in the process: hwloc told this is not its machine
    where the binding changes nothing, the environment restored after. Yields what was decided
    (for reports and benchmarks)."""
    if VARIABLE in os.environ:  # hwloc binds unless it is "0"
        value = os.environ[VARIABLE]
        yield f"{'skipped' if value == '0' else 'kept'}: {VARIABLE}={value} set by the user"
        return
    why = "oneTBB had loaded its binding before fxvino" if _tbbbind_loaded() else binding_changes_nothing()
    if why is not None:
        yield f"kept: {why}"
        return
    os.environ[VARIABLE] = "0"
    try:
        yield "skipped: it would set the process's own mask (one NUMA node, no SMT, one kind of core)"
    finally:
        os.environ.pop(VARIABLE, None)
