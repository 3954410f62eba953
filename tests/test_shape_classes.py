"""Shape classes that once crashed the process: each must give eager's result, never a crash.

The cases run in one child process (``shape_class_cases.py``); a segfault there fails the case that
was running and the rest are re-run in a new child, so one crash never hides another.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shape_class_cases import CASES

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def outcomes() -> dict[str, dict]:
    results: dict[str, dict] = {}
    pending = list(CASES)
    env = {**os.environ, "PYTHONPATH": str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    while pending:
        proc = subprocess.run(
            [sys.executable, str(HERE / "shape_class_cases.py"), *pending],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        started = None
        for line in proc.stdout.splitlines():
            if not line.startswith("{"):
                continue
            rec = json.loads(line)
            if rec.get("started"):
                started = rec["case"]
            else:
                results[rec["case"]] = rec
                started = None
        if started is not None:  # the child died inside this case
            results[started] = {"case": started, "crashed": proc.returncode, "stderr": proc.stderr[-2000:]}
        elif proc.returncode != 0:
            pytest.fail(f"case runner failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        pending = [c for c in pending if c not in results]
    return results


@pytest.mark.parametrize("case", CASES)
def test_shape_class(outcomes, case):
    rec = outcomes[case]
    assert "crashed" not in rec, f"{case} killed the process (exit {rec.get('crashed')}):\n{rec.get('stderr')}"
    assert rec["shape_ok"] and rec["equal"], rec
    assert rec["ov_ops"] > 0 and not rec["fallbacks"], rec  # and it ran on OpenVINO
