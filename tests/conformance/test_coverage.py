"""fxvino.tools.op_coverage: per-op verdicts from OpInfo cases, and the committed summary's round trip."""

from __future__ import annotations

import json

from fxvino.tools import op_coverage as coverage
from fxvino.tools.op_coverage import FAILED, PASSED, SKIPPED, Case

ADD, MUL, VIEW, NONZERO = "aten.add.Tensor", "aten.mul.Tensor", "aten.view.default", "aten.nonzero.default"


def test_an_op_passes_when_a_case_passes_and_no_failure_names_it():
    cases = [
        Case("a", "float32", PASSED, "", (ADD, VIEW)),
        Case("b", "float32", FAILED, f"[lowering-error] partition of 2 nodes: lowering view ({VIEW}) failed", (VIEW,)),
        Case("c", "float32", FAILED, "[wrong-result] Tensor-likes are not close!", (MUL,)),
        Case("d", "float32", FAILED, f"[declined] {NONZERO}: data-dependent output shape", (ADD, NONZERO)),
        Case("e", "float32", SKIPPED, "", (MUL, ADD)),
    ]
    v = coverage.verdicts(cases)
    assert v[ADD].passed and (v[ADD].cases, v[ADD].passing) == (2, 1)  # d names nonzero, not add
    assert not v[VIEW].passed and v[VIEW].reason.startswith("b: [lowering-error]")  # passed in a, blamed in b
    assert not v[MUL].passed and "no case using it passes" in v[MUL].reason  # skipped e is not judged
    assert not v[NONZERO].passed
    assert set(v) == {ADD, VIEW, MUL, NONZERO}
    assert coverage.verdicts(cases, "int64") == {}


def test_complex_dtype_declines_do_not_blame_the_op():
    message = (
        f"[declined] aten._fft_r2c.default: dtype torch.complex64 has no OpenVINO element type; "
        f"declined: {VIEW}: dtype torch.complex64 has no OpenVINO element type; lowering-error: {ADD} failed"
    )
    assert coverage.blamed_ops(message) == {ADD}
    cases = [Case("fft", "float32", FAILED, message, (VIEW, ADD)), Case("v", "float32", PASSED, "", (VIEW, ADD))]
    v = coverage.verdicts(cases)
    assert v[VIEW].passed and not v[ADD].passed


def test_core_summary_counts_core_aten_ops_only():
    randperm = "aten.randperm.default"  # declined on purpose (registry.declines)
    cases = [
        Case("a", "float32", PASSED, "", (ADD, "aten.linalg_vector_norm.default", "aten.not_an_op.x")),
        Case("n", "float32", FAILED, f"[declined] {randperm}: a random permutation needs a sort", (randperm,)),
    ]
    passing, failing = coverage.core_aten_summary(cases)
    assert [v.op for v in passing] == [ADD]  # linalg_vector_norm is not Core ATen
    assert [v.op for v in failing] == [randperm]
    lines = coverage.format_core_summary(cases)
    assert lines[0].endswith("2; pass on OpenVINO: 1 (50.0%); not passing: 1")
    assert lines[1].startswith(f"  {randperm} [declined on purpose]: n: [declined]")


def test_summary_merges_by_opinfo_and_dtype(tmp_path):
    path = tmp_path / "conformance.json"
    coverage.merge_summary(
        path,
        [Case("a", "float32", PASSED, "", (ADD,)), Case("a", "int64", FAILED, "[x] y", (ADD, MUL))],
        {"torch": "t"},
    )
    coverage.merge_summary(path, [Case("a", "int64", PASSED, "", (MUL,)), Case("b", "bool", SKIPPED, "", ())], {})
    assert json.loads(path.read_text())["ops"] == [ADD, MUL]
    assert coverage.load_summary(path) == [
        Case("a", "float32", PASSED, "", (ADD,)),
        Case("a", "int64", PASSED, "", (MUL,)),
        Case("b", "bool", SKIPPED, "", ()),
    ]


def test_from_outcomes_falls_back_to_the_table_ops():
    records = [
        {"op": "x.v", "key": ["x", "v", "int64"], "dtype": "int64", "status": "xfailed", "message": "[m] z"},
        {"op": "y", "key": ["y", "", "bool"], "dtype": "bool", "status": "passed", "message": "", "aten_ops": [MUL]},
    ]
    cases = coverage.from_outcomes(records, {("x", "v"): (VIEW, ADD)})
    assert cases == [Case("x.v", "int64", FAILED, "[m] z", (ADD, VIEW)), Case("y", "bool", PASSED, "", (MUL,))]


def test_committed_ops_page_is_what_the_registry_generates():
    """docs/ops.md is generated (``fxvino ops --markdown docs/ops.md``): a lowering added without
    regenerating it leaves the page behind (``aten._grouped_mm`` was missing from it, and the
    command looked for its inputs under src/ after the package moved there)."""
    summary = coverage.DEFAULT_SUMMARY
    assert summary.exists(), f"{summary}: the committed conformance summary"
    dynamic = coverage.dynamic_ops()
    assert dynamic, f"{coverage.DEFAULT_DYNAMIC_TESTS}: no DYNAMIC_OPS found"
    cases = coverage.load_summary(summary)
    page = coverage.markdown(coverage.ops_rows(cases, dynamic), cases, coverage.summary_about(summary))
    committed = (summary.parent / "ops.md").read_text()
    assert page == committed, "docs/ops.md is stale: run `fxvino ops --markdown docs/ops.md`"
