"""Every selected OpInfo, per dtype: fxvino must run it entirely on OpenVINO and match eager.

For up to ``max_samples()`` samples that run eagerly, the test compiles
``fn(*args, **kwargs) = opinfo.op(*args, **kwargs)`` with
``torch.compile(fn, backend="fxvino", fullgraph=True, dynamic=False)`` under ``torch.no_grad()``
and fails on the first sample where

* any op fell back to PyTorch / Inductor / eager (``report.torch_ops`` or ``report.fallbacks``
  non-empty: a missing lowering, a declined node, a lowering or OpenVINO compile error, an
  OpenVINO run-time error),
* nothing ran on OpenVINO (sum of ``ov_ops`` is 0) — unless the table lists the op in
  ``EMPTY_GRAPH_OK`` (views and no-ops that compile to an empty graph),
* the result differs from eager (``torch.testing.assert_close(..., equal_nan=True)``, default
  tolerances unless the table's ``TOLERANCES`` says otherwise with a reason),
* Dynamo or the backend raises.

Samples whose eager run raises are not judged; a case none of whose samples runs eagerly is
skipped. Expected failures come from ``op_table.expected_failure`` (strict xfails).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from . import harness
from .op_table import (
    DTYPES,
    SKIPS,
    OpEntry,
    class_dependent,
    expected_failure,
    max_samples,
    regenerating,
    selected_cases,
    tolerance,
)


def _marks(entry: OpEntry, dtype: str) -> list[pytest.MarkDecorator]:
    key = (*entry.key, dtype)
    if key in SKIPS:
        return [pytest.mark.skip(reason=SKIPS[key])]
    reason = expected_failure(key)
    if reason is not None and not regenerating():
        return [pytest.mark.xfail(reason=reason, strict=not class_dependent(key, reason), raises=AssertionError)]
    return []


CASES = [
    pytest.param(entry, dtype, id=f"{entry.id}-{dtype}", marks=_marks(entry, dtype))
    for entry, dtype in selected_cases()
]


def _describe(sample: object, limit: int = 300) -> str:
    try:
        text = repr(sample)
    except Exception:  # noqa: BLE001
        text = object.__repr__(sample)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("entry", "dtype"), CASES)
def test_opinfo(entry: OpEntry, dtype: str, request: pytest.FixtureRequest) -> None:
    key = (*entry.key, dtype)
    record: dict = {"op": entry.id, "dtype": dtype, "key": key, "aten_ops": [], "samples": 0}
    request.node.user_properties.append(("conformance", record))

    torch.manual_seed(0)
    try:
        samples = iter(entry.opinfo.sample_inputs("cpu", DTYPES[dtype], requires_grad=False))
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"sample_inputs raised {type(e).__name__}: {harness.first_line(e)}")
    atol, rtol = tolerance(key)
    limit = max_samples()
    judged, eager_errors, aten_ops = 0, [], set()
    first_runnable = None
    # Look at no more than 4x the limit so ops whose samples mostly fail eagerly stay cheap.
    for index, sample in enumerate(itertools.islice(samples, 4 * limit)):
        if judged >= limit:
            break
        torch.manual_seed(index)
        try:
            result = harness.run_sample(
                entry.opinfo.op,
                sample,
                values=entry.meta_only is None,
                atol=atol,
                rtol=rtol,
                allow_empty=entry.empty_graph_ok is not None,
                comparator=entry.comparator,
            )
        except harness.EagerFailed as e:
            eager_errors.append(str(e))
            continue
        except harness.ConformanceFailure as e:
            record.update(kind=e.kind, message=str(e), samples=judged + 1)
            if regenerating() and dtype == "float32":
                record["aten_ops"] = sorted(aten_ops | _trace(entry, sample))
            raise AssertionError(f"{e}\n  sample {index}: {_describe(sample)}") from None
        judged += 1
        first_runnable = first_runnable or sample
        aten_ops |= result.aten_ops
        record.update(samples=judged, aten_ops=sorted(aten_ops))
    if judged == 0:
        reason = eager_errors[0] if eager_errors else "no samples"
        pytest.skip(f"no sample runs eagerly ({reason})")


def _trace(entry: OpEntry, sample: object) -> set[str]:
    """ATen ops of a failing sample when fxvino did not get to report them (regeneration only)."""
    try:
        args, kwargs = harness.fresh_args(sample)
        with harness.quiet_logs(), harness.traceable_opinfo_wrappers():
            return harness.trace_aten_ops(harness.make_fn(entry.opinfo.op), args, kwargs)
    except Exception:  # noqa: BLE001 - Dynamo cannot capture it: the ops stay unknown
        return set()
