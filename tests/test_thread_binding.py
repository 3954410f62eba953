"""oneTBB's per-inference thread binding: skipped where it sets the process's own mask, kept
elsewhere (``fxvino/utils/thread_binding.py``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fxvino.utils.thread_binding import binding_changes_nothing


def _sysfs(root: Path, siblings: dict[int, str], nodes: int = 1, capacities: dict[int, int] | None = None) -> Path:
    for cpu, text in siblings.items():
        topology = root / f"devices/system/cpu/cpu{cpu}/topology"
        topology.mkdir(parents=True)
        (topology / "thread_siblings_list").write_text(text + "\n")
        if capacities:
            (topology.parent / "cpu_capacity").write_text(f"{capacities[cpu]}\n")
    for node in range(nodes):
        (root / f"devices/system/node/node{node}").mkdir(parents=True)
    return root


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's sysfs")
def test_the_binding_is_skipped_only_on_one_node_without_smt_or_two_kinds_of_core(tmp_path):
    plain = _sysfs(tmp_path / "plain", {0: "0", 1: "1"})
    assert binding_changes_nothing(plain, {0, 1}) is None
    assert binding_changes_nothing(_sysfs(tmp_path / "smt", {0: "0,2", 1: "1,3"}), {0, 1}) == "SMT siblings"
    assert binding_changes_nothing(_sysfs(tmp_path / "ranges", {0: "0-1", 1: "0-1"}), {0, 1}) == "SMT siblings"
    assert binding_changes_nothing(_sysfs(tmp_path / "numa", {0: "0", 1: "1"}, nodes=2), {0, 1}) == "2 NUMA nodes"
    arm = _sysfs(tmp_path / "arm", {0: "0", 1: "1"}, capacities={0: 1024, 1: 446})
    assert binding_changes_nothing(arm, {0, 1}) == "two kinds of core"
    hybrid = _sysfs(tmp_path / "hybrid", {0: "0", 1: "1"})
    (hybrid / "devices/cpu_atom").mkdir(parents=True)
    assert binding_changes_nothing(hybrid, {0, 1}) == "two kinds of core"
    assert binding_changes_nothing(plain, {0, 1, 2}).startswith("topology unreadable")  # cpu2 has no entry


_CALLS = 1000
_SCRIPT = textwrap.dedent(
    f"""
    import os, torch, fxvino
    from fxvino import devices
    mode = os.environ.get("PROBE_MODE")
    side = int(os.environ.get("PROBE_SIDE", "4"))
    w = torch.randn(side, side)
    f = lambda x: torch.relu(x @ w) + 1
    fn = torch.compile(f, backend="fxvino", **({{"mode": mode}} if mode else {{}}))
    x = torch.randn(side, side)
    def pinned():
        return sum(len(os.sched_getaffinity(int(t))) == 1 for t in os.listdir("/proc/self/task"))

    # Read between the last calls, while the plugin's worker is in its arena: it leaves it, and
    # is found unpinned again, once idle for a while (read once after the calls, on a loaded
    # machine, it was gone); after eager had run too it was unpinned, with the binding on and off alike.
    single = 0
    with torch.no_grad():
        for i in range({_CALLS}):
            y = fn(x)
            if i >= {_CALLS} - 20:
                single = max(single, pinned())
    torch.testing.assert_close(y, f(x), rtol=1e-4, atol=1e-4)  # a product summed in another order
    print("DECIDED", devices.thread_binding())
    print("ENV", os.environ.get("HWLOC_THISSYSTEM"))
    print("SINGLE", single)
    """
)


def _traced(tmp_path: Path, env: dict[str, str]) -> tuple[int, dict[str, str]]:
    """sched_setaffinity calls made by a process that compiles the probe and calls it _CALLS times."""
    counts = tmp_path / "strace.txt"
    done = subprocess.run(
        ["strace", "-f", "-c", "-e", "trace=sched_setaffinity", "-o", str(counts), sys.executable, "-c", _SCRIPT],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.split(" ", 1)[0].isupper())
    found = re.search(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)(?:\s+\d+)?\s+sched_setaffinity$", counts.read_text(), re.M)
    return (int(found.group(1)) if found else 0), said


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    return subprocess.run(["strace", "-o", os.devnull, "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _strace_works(), reason="needs strace (and ptrace allowed) to count the plugin's system calls")
def test_inference_sets_no_affinity_where_the_binding_changes_nothing(tmp_path):
    """The plugin's binding costs two ``sched_setaffinity`` per inference; where it would set the
    process's own mask, fxvino loads the plugin without it (and leaves the environment as it was).
    ``HWLOC_THISSYSTEM=1`` (the user's word) keeps it, which is also how this test could fail."""
    host = binding_changes_nothing()
    calls, said = _traced(tmp_path, {})
    assert said["ENV"] == "None", "the environment was not restored"
    kept_calls, kept = _traced(tmp_path, {"HWLOC_THISSYSTEM": "1"})
    assert kept["DECIDED"] == "kept: HWLOC_THISSYSTEM=1 set by the user"
    assert kept_calls >= 2 * _CALLS, f"the plugin's binding made {kept_calls} calls in {_CALLS} inferences"
    if host is None:
        assert said["DECIDED"].startswith("skipped"), said
        assert calls < _CALLS // 4, f"{calls} sched_setaffinity calls in {_CALLS} inferences: the binding is on"
    else:
        assert said["DECIDED"] == f"kept: {host}", said
        assert calls >= 2 * _CALLS


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs to be seen")
def test_openvinos_own_pinning_still_pins_without_the_binding(tmp_path):
    """``mode="reduce-overhead"`` asks OpenVINO to pin its threads; that is the plugin's own
    call, not hwloc's, so it holds whichever way the binding was decided."""
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        # A 512x512 product: above the work fxvino runs on one unpinned thread (plugin_config.TINY).
        env={**os.environ, "PROBE_MODE": "reduce-overhead", "PROBE_SIDE": "512"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.split(" ", 1)[0].isupper())
    assert int(said["SINGLE"]) >= 1, f"no thread pinned to one CPU ({said})"
