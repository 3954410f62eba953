"""Op coverage: what the registry lowers, and what PyTorch's OpInfo conformance run proved.

The OpInfo suite (``tests/conformance``) judges *OpInfo cases* — an OpInfo in one dtype, whose
graph holds several ATen ops. This module turns those case outcomes into per-ATen-op verdicts,
for two readers that must agree:

* the suite's end-of-run summary (the Core ATen float32 pass rate, the issue's acceptance
  number, and every non-passing Core ATen op with its reason), and
* ``fxvino ops --markdown docs/ops.md``, one row per op, built from the registry plus the
  compact summary of the last full run committed as ``docs/conformance.json``.

**An op passes in a dtype** when at least one case of that dtype whose ATen graph contains it
passed (every sample ran entirely on OpenVINO and matched eager), and no failing case of that
dtype names it in its failure (a missing lowering, a decline, a lowering or compile error
about it). A decline because a tensor is complex does not count against the op: OpenVINO has
no complex element type at all, the same op passes on real tensors, and the complex OpInfos
(FFTs, ``stft``) keep failing on the ops that are complex-only. An op is *exercised* in a dtype
when some non-skipped case contains it; ops only seen in skipped cases are not judged.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

# docs/conformance.json in a source checkout (src/fxvino/tools/op_coverage.py -> the repository root).
DEFAULT_SUMMARY = Path(__file__).resolve().parents[3] / "docs" / "conformance.json"
DEFAULT_DYNAMIC_TESTS = Path(__file__).resolve().parents[3] / "tests" / "lowering" / "test_dynamic_families.py"

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
_STATUS = {"passed": PASSED, "xpassed": PASSED, "failed": FAILED, "xfailed": FAILED, "skipped": SKIPPED}
_OP = re.compile(r"\b(aten\.[A-Za-z0-9_]+\.[A-Za-z0-9_]+)")


@dataclasses.dataclass(frozen=True)
class Case:
    """One OpInfo in one dtype: its outcome and the ATen ops of its graph."""

    opinfo: str  # "name" or "name.variant"
    dtype: str
    status: str  # PASSED | FAILED | SKIPPED
    message: str = ""  # first line of the failure ("[kind] detail"), empty when it passed
    aten_ops: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the cases of one dtype say about one ATen op."""

    op: str
    passed: bool
    cases: int  # non-skipped cases whose graph contains the op
    passing: int  # of those, how many passed
    reason: str  # why it does not pass ("" when it does)


def status_of(pytest_status: str) -> str:
    """Map the suite's per-case status (passed / xfailed / ...) onto PASSED / FAILED / SKIPPED."""
    return _STATUS.get(pytest_status, SKIPPED)


# ----------------------------------------------------------------------------- per-op verdicts


def blamed_ops(message: str) -> set[str]:
    """ATen ops a failure message holds responsible (complex-dtype declines excluded: see above)."""
    blamed: set[str] = set()
    for part in message.split("; "):
        if "torch.complex" in part:
            continue
        blamed.update(_OP.findall(part))
    return blamed


def verdicts(cases: Iterable[Case], dtype: str = "float32") -> dict[str, Verdict]:
    """Per ATen op exercised by ``dtype``'s cases: does it pass, and if not, why."""
    containing: dict[str, list[Case]] = {}
    for case in cases:
        if case.dtype != dtype or case.status == SKIPPED:
            continue
        for op in case.aten_ops:
            containing.setdefault(op, []).append(case)
    out: dict[str, Verdict] = {}
    for op, group in sorted(containing.items()):
        passing = [c for c in group if c.status == PASSED]
        failing = sorted((c for c in group if c.status == FAILED), key=lambda c: c.opinfo)
        blaming = [c for c in failing if op in blamed_ops(c.message)]
        if blaming:
            reason = f"{blaming[0].opinfo}: {blaming[0].message}"
            if len(blaming) > 1:
                reason += f" (and {len(blaming) - 1} more case(s))"
        elif not passing:
            reason = f"no case using it passes; e.g. {failing[0].opinfo}: {failing[0].message}"
        else:
            reason = ""
        out[op] = Verdict(op, not reason, len(group), len(passing), reason)
    return out


def core_aten_ops() -> set[str]:
    """Every ``torch.Tag.core`` overload of ``torch.ops.aten``, as 'aten.name.overload'.

    Read from the dispatcher's list of every registered op: ``dir(torch.ops.aten)`` holds only the
    packets some code has touched, so the set grew with what the process had run (``resize_`` and
    ``sym_is_contiguous`` were missing from every listing made in a fresh process)."""
    registered = torch._C._dispatch_get_all_op_names()
    packets = {n.split("::", 1)[1].split(".", 1)[0] for n in registered if n.startswith("aten::")}
    names = set()
    for name in packets:
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            if torch.Tag.core in getattr(packet, overload).tags:
                names.add(str(getattr(packet, overload)))
    return names


def core_aten_summary(cases: Iterable[Case], dtype: str = "float32") -> tuple[list[Verdict], list[Verdict]]:
    """(passing, not passing) verdicts of the Core ATen ops exercised in ``dtype``."""
    core = core_aten_ops()
    judged = [v for op, v in verdicts(cases, dtype).items() if op in core]
    return [v for v in judged if v.passed], [v for v in judged if not v.passed]


def format_core_summary(cases: Iterable[Case], dtype: str = "float32") -> list[str]:
    """The acceptance lines: how many exercised Core ATen ops pass, and every other one with its reason."""
    passing, failing = core_aten_summary(list(cases), dtype)
    total = len(passing) + len(failing)
    if not total:
        return []
    lines = [
        f"Core ATen ops exercised by {dtype} OpInfo samples: {total}; pass on OpenVINO: {len(passing)} "
        f"({100.0 * len(passing) / total:.1f}%); not passing: {len(failing)}"
    ]
    declined = declined_ops()
    lines += [f"  {v.op}{' [declined on purpose]' if v.op in declined else ''}: {v.reason}" for v in failing]
    return lines


def declined_ops() -> dict[str, str]:
    """Ops the registry keeps in PyTorch on purpose (``registry.declines``), with the reason."""
    from fxvino.lowering import ensure_registered
    from fxvino.lowering.registry import all_entries, op_name

    ensure_registered()
    return {
        op_name(t): e.validator(None) if e.validator else ""  # a decline's validator ignores the node
        for t, e in all_entries().items()
        if e.family == "declined"
    }


# ----------------------------------------------------------------------------- the committed summary


def merge_summary(path: Path, cases: Iterable[Case], about: Mapping[str, Any]) -> dict[str, Any]:
    """Write ``cases`` into the compact summary at ``path``, replacing the same (OpInfo, dtype)s.

    A full run goes dtype by dtype; merging keeps the other dtypes' outcomes, so the file is
    always "the last run of each case". Returns the written summary.
    """
    old = load_summary(path) if path.exists() else []
    merged = {(c.opinfo, c.dtype): c for c in old}
    merged.update({(c.opinfo, c.dtype): c for c in cases})
    data = _encode(sorted(merged.values(), key=lambda c: (c.opinfo, c.dtype)), about)
    path.write_text(_dump(data))
    return data


def load_summary(path: Path = DEFAULT_SUMMARY) -> list[Case]:
    data = json.loads(Path(path).read_text())
    ops = data["ops"]
    return [
        Case(opinfo, dtype, status, message, tuple(ops[i] for i in op_ids))
        for opinfo, dtype, status, message, op_ids in data["cases"]
    ]


def summary_about(path: Path = DEFAULT_SUMMARY) -> dict[str, Any]:
    return dict(json.loads(Path(path).read_text()).get("about", {}))


def _encode(cases: list[Case], about: Mapping[str, Any]) -> dict[str, Any]:
    ops = sorted({op for c in cases for op in c.aten_ops})
    index = {op: i for i, op in enumerate(ops)}
    rows = [[c.opinfo, c.dtype, c.status, c.message, [index[op] for op in c.aten_ops]] for c in cases]
    return {"about": dict(about), "ops": ops, "cases": rows}


def _dump(data: dict[str, Any]) -> str:
    """One case per line: small, and a new run diffs line by line."""
    head = {k: v for k, v in data.items() if k != "cases"}
    body = ",\n".join("  " + json.dumps(row, separators=(",", ":")) for row in data["cases"])
    text = json.dumps(head, indent=1)[:-2]  # drop the closing "\n}"
    return f'{text},\n "cases": [\n{body}\n ]\n}}\n'


# ----------------------------------------------------------------------------- docs/ops.md


@dataclasses.dataclass(frozen=True)
class Row:
    op: str
    family: str
    dtypes: tuple[str, ...]  # dtypes in which the op passed conformance
    dynamic: str  # "yes" | "—"
    status: str  # lowered | declined | not lowered
    reason: str


DTYPE_ORDER = ("float32", "float16", "bfloat16", "int64", "bool")


def dynamic_ops(path: Path = DEFAULT_DYNAMIC_TESTS) -> set[str] | None:
    """``DYNAMIC_OPS`` of the dynamic-shape tests (ops proven under dynamic=True); None if absent."""
    if not path.exists():
        return None
    import importlib.util
    import sys

    sys.path.insert(0, str(path.parent.parent))  # the tests import their shared `harness`
    try:
        spec = importlib.util.spec_from_file_location("_fxvino_dynamic_families", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        return set(getattr(module, "DYNAMIC_OPS", ()))
    finally:
        sys.modules.pop("_fxvino_dynamic_families", None)
        sys.path.remove(str(path.parent.parent))


def ops_rows(cases: list[Case], dynamic: set[str] | None) -> list[Row]:
    """One row per registered op, per Core ATen op and per ATen op the OpInfo graphs hold, by name."""
    from fxvino.lowering import ensure_registered
    from fxvino.lowering.registry import all_entries, op_name

    ensure_registered()
    dtypes = [d for d in DTYPE_ORDER if any(c.dtype == d for c in cases)]
    passed = {d: {op for op, v in verdicts(cases, d).items() if v.passed} for d in dtypes}
    f32 = verdicts(cases, "float32")
    declined = declined_ops()
    entries = {op_name(t): e for t, e in all_entries().items() if isinstance(t, torch._ops.OpOverload)}
    rows = []
    seen = {op for c in cases for op in c.aten_ops if op.startswith("aten.")}
    for op in sorted(set(entries) | core_aten_ops() | seen):
        entry = entries.get(op)
        if entry is None:
            status, family, reason = "not lowered", "—", "no lowering (runs in PyTorch)"
        elif entry.family == "declined":
            status, family, reason = "declined", "declined", declined[op]
        else:
            status, family = "lowered", entry.family
            verdict = f32.get(op)
            reason = verdict.reason if verdict and not verdict.passed else ""
        rows.append(
            Row(
                op=op,
                family=family,
                dtypes=tuple(d for d in dtypes if op in passed[d]),
                dynamic="—" if dynamic is None else ("yes" if op in dynamic else "no"),
                status=status,
                reason=reason,
            )
        )
    return rows


def _cell(text: str, limit: int = 200) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def markdown(rows: list[Row], cases: list[Case], about: Mapping[str, Any]) -> str:
    """docs/ops.md: the acceptance summary, then the table."""
    passing, failing = core_aten_summary(cases, "float32")
    total = len(passing) + len(failing)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status] = counts.get(r.status, 0) + 1
    lines = [
        "# Op coverage",
        "",
        "Generated by `fxvino ops --markdown docs/ops.md` from the lowering registry and",
        "`docs/conformance.json`, the summary of the last OpInfo conformance run"
        f" ({', '.join(f'{k} {v}' for k, v in sorted(about.items()))}). Do not edit by hand.",
        "",
        "An op *passed conformance in a dtype* when an OpInfo case of that dtype whose graph holds it",
        "ran entirely on OpenVINO and matched eager, and no failing case of that dtype names it",
        "(`src/fxvino/coverage.py`). *dynamic*: proven under `dynamic=True` by",
        "`tests/lowering/test_dynamic_families.py` (`DYNAMIC_OPS`).",
        "",
        f"Ops: {len(rows)} ({', '.join(f'{v} {k}' for k, v in sorted(counts.items()))}).",
    ]
    if total:
        lines += [
            f"Core ATen ops exercised by float32 OpInfo samples: {total}; pass on OpenVINO: {len(passing)}"
            f" ({100.0 * len(passing) / total:.1f}%). Not passing:",
            "",
        ]
        declined = declined_ops()
        lines += [
            f"- `{v.op}`{' (declined on purpose)' if v.op in declined else ''}: {_cell(v.reason, 300)}" for v in failing
        ]
    lines += [
        "",
        "| op | family | passed conformance | dynamic | status | reason |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| `{r.op}` | {r.family} | {', '.join(r.dtypes) or '—'} | {r.dynamic} | {r.status} | {_cell(r.reason)} |"
        )
    return "\n".join(lines) + "\n"


def from_outcomes(
    records: Iterable[Mapping[str, Any]], fallback_ops: Mapping[tuple[str, str], Iterable[str]]
) -> list[Case]:
    """Cases from the suite's per-case records (``FXVINO_CONFORMANCE_JSON``'s format).

    A record without ATen ops (it failed on its first sample outside a float32 regeneration)
    takes its OpInfo's float32 ops from ``fallback_ops``, keyed by (name, variant).
    """
    cases = []
    for r in records:
        status = status_of(r["status"])
        ops = tuple(sorted(r.get("aten_ops") or fallback_ops.get(tuple(r["key"][:2]), ())))
        message = r.get("message", "") if status == FAILED else ""
        cases.append(Case(r["op"], r["dtype"], status, message, ops))
    return cases
