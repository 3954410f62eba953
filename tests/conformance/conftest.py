"""Session bookkeeping for the conformance suite: the end-of-run summary and table regeneration.

* ``pytest_terminal_summary`` prints, per dtype, how many cases passed / xfailed / failed, the
  failures grouped by kind, and which ATen ops lack a lowering (with the OpInfos they block).
* With ``FXVINO_REGEN_OPTABLE=1`` the xfails are not applied, and at the end of the session
  ``xfails_generated.py`` is rewritten: cases that ran and failed become xfails with the first
  line of their error, cases that ran and passed (or were skipped) are dropped, cases that did
  not run this session keep their old entry. float32 runs also refresh ``ATEN_OPS``, which
  decides the slice.
* ``FXVINO_CONFORMANCE_JSON=path`` writes every case's outcome as JSON;
  ``FXVINO_CONFORMANCE_SUMMARY=path`` merges them into the compact summary ``fxvino ops``
  reads (``docs/conformance.json``). The summary also prints the per-Core-ATen-op pass rate
  (``fxvino.tools.op_coverage``), the number the suite exists to prove.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import openvino
import pytest
import torch

from fxvino.tools import op_coverage as coverage

HERE = Path(__file__).resolve().parent
GENERATED = HERE / "xfails_generated.py"


@dataclasses.dataclass
class Outcome:
    nodeid: str
    op: str
    dtype: str
    key: tuple[str, str, str]
    status: str = "unknown"  # passed | failed | xfailed | xpassed | skipped
    kind: str | None = None
    message: str = ""
    aten_ops: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    samples: int = 0  # samples judged (for a failure: up to and including the failing one)


_outcomes: dict[str, Outcome] = {}
_started = time.perf_counter()

# During a regeneration the running case is written here; if the process dies (a segfault in
# OpenVINO), the next regeneration finds it, records the case in GENERATED_SKIPS and goes on.
JOURNAL = HERE / ".regen_running.json"


def pytest_configure(config: pytest.Config) -> None:
    if not _regenerating() or not JOURNAL.exists():
        return
    try:
        crashed = json.loads(JOURNAL.read_text())
        key = tuple(crashed["key"])
    except (ValueError, KeyError, TypeError):
        JOURNAL.unlink()
        return
    import importlib

    generated = importlib.import_module(f"{__package__}.xfails_generated")
    skips = dict(getattr(generated, "GENERATED_SKIPS", {}))
    skips[key] = (
        "crashed the test process during the last regeneration (segfault or abort); run it alone with -v to see where"
    )
    _write_generated(
        generated.GENERATED_XFAILS, skips, generated.ATEN_OPS, getattr(generated, "GENERATED_XFAIL_SAMPLE", {})
    )
    importlib.reload(generated)  # op_table imports it next: it must see the new skip
    JOURNAL.unlink()


def _regenerating() -> bool:
    return os.environ.get("FXVINO_REGEN_OPTABLE", "").strip() in ("1", "true", "yes")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    out = _outcomes.get(item.nodeid)
    if out is None or not _regenerating():
        return (yield)
    JOURNAL.write_text(json.dumps({"nodeid": item.nodeid, "key": list(out.key)}))
    try:
        return (yield)
    finally:
        JOURNAL.unlink(missing_ok=True)


@pytest.fixture(scope="session", autouse=True)
def _memoized_decomposition_table() -> Any:
    """Compute fxvino's decomposition table once per session instead of once per compile.

    ``decomposition_table(options)`` copies its memoized table on every call (it once rebuilt
    ``core_aten_decompositions()``, ~0.3 s, and still must not be shared between compiled
    models). It is a pure function of ``options.decompositions``, so memoizing it changes no
    result. Set
    ``FXVINO_CONFORMANCE_DECOMP_CACHE=0`` to run the unpatched code path.
    """
    from fxvino.capture import decompositions

    original = getattr(decompositions, "decomposition_table", None)
    if original is None or os.environ.get("FXVINO_CONFORMANCE_DECOMP_CACHE", "1").strip() == "0":
        yield
        return
    memo: dict[Any, dict] = {}

    def decomposition_table(options: Any) -> dict:
        key = tuple(options.decompositions)
        if key not in memo:
            memo[key] = original(options)
        return dict(memo[key])

    decompositions.decomposition_table = decomposition_table
    try:
        yield
    finally:
        decompositions.decomposition_table = original


@pytest.fixture(autouse=True)
def _no_constant_folding() -> Any:
    """Judge the lowerings: keep fxvino from evaluating constant-only ops in PyTorch at compile time.

    Per test, not per session: a session fixture would stay active for the tests collected
    after this directory (``make test`` runs them all in one process).

    ``passes.freezing.fold_constants`` (an optimisation) computes ops whose inputs are all constants
    once, in PyTorch. Many OpInfo samples have no tensor input at all (``arange``, ``full``,
    ``eye``, the window functions): folded, nothing would be left for OpenVINO to prove. Set
    ``FXVINO_CONFORMANCE_FOLD=1`` to run with folding as users get it.
    """
    from fxvino.passes import freezing

    original = getattr(freezing, "fold_constants", None)
    if original is None or os.environ.get("FXVINO_CONFORMANCE_FOLD", "").strip() in ("1", "true", "yes"):
        yield
        return
    freezing.fold_constants = lambda gm: 0
    try:
        yield
    finally:
        freezing.fold_constants = original


def _is_conformance(nodeid: str) -> bool:
    return "conformance/test_opinfo.py::test_opinfo" in nodeid


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not _is_conformance(item.nodeid) or not hasattr(item, "callspec"):
            continue
        entry, dtype = item.callspec.params["entry"], item.callspec.params["dtype"]
        _outcomes[item.nodeid] = Outcome(item.nodeid, entry.id, dtype, (*entry.key, dtype))


def _first_line(text: str) -> str:
    from .harness import first_line

    return first_line(text)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    out = _outcomes.get(report.nodeid)
    if out is None:
        return
    record: dict[str, Any] = next((v for k, v in report.user_properties if k == "conformance"), {})
    if record.get("aten_ops"):
        out.aten_ops = list(record["aten_ops"])
    out.samples = max(out.samples, int(record.get("samples", 0)))
    out.seconds += report.duration
    if report.when == "call" or (report.when == "setup" and not report.passed):
        wasxfail = getattr(report, "wasxfail", None)
        if report.skipped and wasxfail is not None:
            out.status = "xfailed"
        elif report.skipped:
            out.status = "skipped"
        elif report.passed and wasxfail is not None:
            from . import op_table

            out.status = "passed" if op_table.class_dependent(out.key, wasxfail) else "xpassed"
        elif report.passed:
            out.status = "passed"
        else:
            out.status = "xpassed" if "XPASS(strict)" in str(report.longrepr) else "failed"
        if report.skipped:
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            out.message = wasxfail if wasxfail is not None else reason.removeprefix("Skipped: ")
            out.kind = record.get("kind")
            if out.status == "xfailed":
                out.message = record.get("message", out.message)
        elif out.status == "failed":
            out.kind = record.get("kind", "harness-error")
            out.message = record.get("message") or _first_line(_crash_message(report))
        elif out.status == "xpassed":
            out.message = "XPASS(strict): passes now; regenerate the table (FXVINO_REGEN_OPTABLE=1)"


def _core_relevant(o: Outcome) -> bool:
    """From this run's ATen ops when it saw them, else from the table's (last regeneration)."""
    from . import op_table
    from .harness import core_or_registered

    if o.aten_ops:
        return all(core_or_registered(op) for op in o.aten_ops)
    entry = op_table.TABLE.get(o.key[:2])
    return bool(entry and entry.core_relevant())


def _cases(outs: list[Outcome]) -> list[coverage.Case]:
    """This run's outcomes as coverage cases; ATen ops it did not see come from the table."""
    from .xfails_generated import ATEN_OPS

    return coverage.from_outcomes([dataclasses.asdict(o) for o in outs], ATEN_OPS)


def _crash_message(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return crash.message if crash is not None else str(report.longrepr)


# ----------------------------------------------------------------------------- summary


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    from . import op_table

    outs = [o for o in _outcomes.values() if o.status != "unknown"]
    if not outs:
        return
    w = terminalreporter.write_line
    terminalreporter.section("fxvino OpInfo conformance")
    w(
        f"mode={op_table.mode()} dtypes={','.join(op_table.selected_dtypes())} "
        f"samples<={op_table.max_samples()} regen={'yes' if op_table.regenerating() else 'no'} "
        f"wall={time.perf_counter() - _started:.0f}s"
    )
    opinfos = {o.key[:2] for o in outs}
    core = {o.key[:2] for o in outs if _core_relevant(o)}
    w(f"OpInfos tested: {len(opinfos)} (Core ATen relevant: {len(core)})")
    statuses = ["passed", "xfailed", "failed", "xpassed", "skipped"]
    w(f"{'dtype':<10}{'cases':>7}" + "".join(f"{s:>9}" for s in statuses))
    by_dtype: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for o in outs:
        by_dtype[o.dtype][o.status] += 1
    for dtype, c in sorted(by_dtype.items()):
        w(f"{dtype:<10}{sum(c.values()):>7}" + "".join(f"{c[s]:>9}" for s in statuses))

    # The acceptance number: per Core ATen op, not per OpInfo case (fxvino.tools.op_coverage says how).
    core_lines = coverage.format_core_summary(_cases(outs))
    if core_lines:
        w("")
        for line in core_lines:
            w(line)

    bad = [o for o in outs if o.status in ("failed", "xfailed")]
    kinds = collections.Counter((o.kind or "unknown", o.status) for o in bad)
    if kinds:
        w("")
        w("failures by kind (failed / xfailed):")
        for kind in sorted({k for k, _ in kinds}):
            w(f"  {kind:<22} {kinds[(kind, 'failed')]:>4} / {kinds[(kind, 'xfailed')]:<4}")

    # Which missing lowering blocks which OpInfos: the lowering authors' to-do list.
    blocking: dict[str, list[str]] = collections.defaultdict(list)
    for o in bad:
        if o.kind == "missing-lowering":
            # "[missing-lowering] aten.a; aten.b; declined: ..." -> the ops before any "kind: ..."
            for part in o.message.split("] ", 1)[-1].split("; "):
                if ": " not in part:
                    blocking[part].append(f"{o.op}[{o.dtype}]")
    if blocking:
        w("")
        w("missing lowerings (ATen op: blocked cases):")
        for op, cases in sorted(blocking.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            shown = ", ".join(cases[:8]) + (f" (+{len(cases) - 8})" if len(cases) > 8 else "")
            w(f"  {op} x{len(cases)}: {shown}")

    if os.environ.get("FXVINO_CONFORMANCE_LIST_XFAILS", "").strip() in ("1", "true", "yes"):
        xfailed = [o for o in outs if o.status == "xfailed"]
        if xfailed:
            w("")
            w(f"expected failures ({len(xfailed)}; * = Core ATen relevant):")
            for o in sorted(xfailed, key=lambda o: (o.kind or "", o.op, o.dtype)):
                w(f"  {'*' if _core_relevant(o) else ' '} {o.op} [{o.dtype}]: {o.message}")

    failed = [o for o in outs if o.status in ("failed", "xpassed")]
    if failed:
        w("")
        w(f"unexpected results ({len(failed)}; * = Core ATen relevant):")
        for o in sorted(failed, key=lambda o: (o.kind or "", o.op, o.dtype)):
            w(f"  {'*' if _core_relevant(o) else ' '} {o.op} [{o.dtype}] {o.status}: {o.message}")

    drift = [
        o
        for o in outs
        if o.status == "xfailed" and o.kind and not op_table.XFAILS.get(o.key, "").startswith(f"[{o.kind}]")
    ]
    if drift:
        w("")
        w(f"xfails failing for another reason than recorded ({len(drift)}; consider regenerating):")
        for o in drift:
            w(f"  {o.op} [{o.dtype}]: now {o.message}; recorded {op_table.XFAILS.get(o.key)}")
    if op_table.regenerating():
        w("")
        w(f"regenerated {GENERATED.relative_to(HERE.parent.parent)}")


# ----------------------------------------------------------------------------- regeneration and JSON


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from . import op_table

    outs = [o for o in _outcomes.values() if o.status != "unknown"]
    path = os.environ.get("FXVINO_CONFORMANCE_JSON")
    if path and outs:
        Path(path).write_text(json.dumps([dataclasses.asdict(o) for o in outs], indent=1))
    summary = os.environ.get("FXVINO_CONFORMANCE_SUMMARY")
    if summary and outs:
        about = {
            "torch": torch.__version__,
            "openvino": openvino.__version__.split("-")[0],
            "samples": op_table.max_samples(),
        }
        coverage.merge_summary(Path(summary), _cases(outs), about)
    if not op_table.regenerating() or not outs:
        return
    from .xfails_generated import ATEN_OPS, GENERATED_SKIPS, GENERATED_XFAILS

    xfails = dict(GENERATED_XFAILS)
    from_sample = dict(op_table.XFAIL_FROM_SAMPLE)
    aten = dict(ATEN_OPS)
    limit = op_table.max_samples()
    for o in outs:
        if o.key in op_table.SKIPS or o.key in op_table.MANUAL_XFAILS or o.key in GENERATED_SKIPS:
            continue
        if o.status == "failed":
            xfails[o.key] = o.message
            from_sample.pop(o.key, None)
            if o.samples > 1:
                from_sample[o.key] = o.samples
        elif o.status == "passed" and o.key in xfails and op_table.class_dependent(o.key, xfails[o.key]):
            continue  # recorded where bf16 is computed in bf16; this CPU computes it in f32
        elif o.status == "skipped" or (o.status == "passed" and from_sample.get(o.key, 1) <= limit):
            # A pass with fewer samples than the recorded failure needed says nothing about it.
            xfails.pop(o.key, None)
            from_sample.pop(o.key, None)
        if o.dtype == "float32" and o.aten_ops:
            aten[o.key[:2]] = tuple(sorted(o.aten_ops))
    from_sample = {k: v for k, v in from_sample.items() if k in xfails}
    _write_generated(xfails, GENERATED_SKIPS, aten, from_sample)


def _write_generated(xfails: dict, skips: dict, aten: dict, from_sample: dict) -> None:
    def fmt(d: dict) -> str:
        if not d:
            return "{}"
        body = "".join(f"    {k!r}: {v!r},\n" for k, v in sorted(d.items()))
        return "{\n" + body + "}"

    text = (
        "# Generated by FXVINO_REGEN_OPTABLE=1 (see tests/conformance/conftest.py); do not edit by hand:\n"
        "# put hand-written expectations in op_table.py (MANUAL_XFAILS, SKIPS), which win over these.\n"
        "# ruff: noqa: E501\n"
        "from __future__ import annotations\n\n"
        "# (OpInfo name, variant, dtype) -> first line of the error.\n"
        f"GENERATED_XFAILS: dict[tuple[str, str, str], str] = {fmt(xfails)}\n\n"
        "# (OpInfo name, variant, dtype) -> the failing sample (1-based, among judged samples) when it\n"
        "# is not the first: runs judging fewer samples expect a pass.\n"
        f"GENERATED_XFAIL_SAMPLE: dict[tuple[str, str, str], int] = {fmt(from_sample)}\n\n"
        "# (OpInfo name, variant, dtype) -> why it cannot run: it crashed the process. Kept until\n"
        "# removed by hand (a crash cannot be observed as a pass).\n"
        f"GENERATED_SKIPS: dict[tuple[str, str, str], str] = {fmt(skips)}\n\n"
        "# (OpInfo name, variant) -> ATen ops of its float32 graph after fxvino's decompositions.\n"
        f"ATEN_OPS: dict[tuple[str, str], tuple[str, ...]] = {fmt(aten)}\n"
    )
    GENERATED.write_text(text)
    _ruff_format(GENERATED)


def _ruff_format(path: Path) -> None:
    """Keep the generated file in the project's format (so a regeneration diffs cleanly)."""
    import shutil
    import subprocess
    import sys

    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        return
    subprocess.run([ruff, "format", "--quiet", str(path)], check=False, cwd=HERE.parent.parent)
