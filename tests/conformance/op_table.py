"""The conformance table: which OpInfos are tested, how, and what is expected of each.

One typed entry (:class:`OpEntry`) per ``op_db`` OpInfo that runs on CPU in at least one of
the dtypes we test, keyed by ``(opinfo name, variant_test_name)``. Expected outcomes are keyed
by ``(opinfo name, variant, dtype name)``:

* ``XFAILS`` — a known failure and why. ``GENERATED_XFAILS`` (in ``xfails_generated.py``) is
  rewritten by ``FXVINO_REGEN_OPTABLE=1``; ``MANUAL_XFAILS`` below is hand-written and wins.
  xfails are strict: when a lowering gets fixed, the test XPASSes, fails, and asks for a regen.
* ``SKIPS`` — only for cases that cannot run at all (they crash the process); every entry says
  why. ``MANUAL_SKIPS`` is hand-written; ``GENERATED_SKIPS`` collects the cases a regeneration
  saw crash. Prefer an xfail.

The per-op knobs (tolerances, random outputs, ops that legitimately compile to an empty
graph) are hand-written here with a reason each, and never generated.

Selection (see README.md): ``FXVINO_CONFORMANCE=slice`` (default) runs float32 for the
OpInfos that are *Core ATen relevant* — the ATen graph fxvino sees for them (after its
``decomposition_table``) contains only ``torch.Tag.core`` ops or ops fxvino lowers; the op
lists come from the last regeneration (``ATEN_OPS``). ``FXVINO_CONFORMANCE=full`` runs every
OpInfo in every dtype of ``FULL_DTYPES``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Literal

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.opinfo.core import OpInfo

from . import xfails_generated as _generated
from .harness import Comparator, TieTolerantSort
from .xfails_generated import ATEN_OPS, GENERATED_SKIPS, GENERATED_XFAILS

OpKey = tuple[str, str]  # (OpInfo.name, OpInfo.variant_test_name)
CaseKey = tuple[str, str, str]  # (OpInfo.name, OpInfo.variant_test_name, dtype name)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "int64": torch.int64,
    "bool": torch.bool,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
SLICE_DTYPES = ("float32",)
FULL_DTYPES = tuple(DTYPES)
SLICE_SAMPLES = 3
FULL_SAMPLES = 5

Mode = Literal["slice", "full"]


# ----------------------------------------------------------------------------- hand-written knobs

# Outputs are random or uninitialised memory: only structure, shapes and dtypes are compared.
META_ONLY: dict[OpKey, str] = {
    **{
        (name, variant): "random output"
        for name, variant in [
            ("bernoulli", ""),
            ("cauchy", ""),
            ("exponential", ""),
            ("geometric", ""),
            ("log_normal", ""),
            ("multinomial", ""),
            ("normal", ""),
            ("normal", "in_place"),
            ("normal", "number_mean"),
            ("uniform", ""),
            ("rand_like", ""),
            ("randn_like", ""),
            ("randint_like", ""),
            ("randint", ""),
            ("randn", ""),
            ("nn.functional.dropout", ""),
            ("nn.functional.dropout2d", ""),
            ("nn.functional.dropout3d", ""),
            ("nn.functional.alpha_dropout", ""),
            ("nn.functional.feature_alpha_dropout", "with_train"),
            ("nn.functional.rrelu", ""),
        ]
    },
    **{
        (name, ""): "uninitialised memory"
        for name in ["empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"]
    },
}

# Ops some of whose samples compile to an empty ATen graph (a view or alias AOTAutograd replays
# outside the graph, a shape computation Dynamo does in Python, an identity). For these a sample
# with no op on OpenVINO is accepted; fallbacks and wrong values still fail.
_ALIAS = "returns its input or a view of it for these samples: AOTAutograd replays the alias outside the graph"
EMPTY_GRAPH_OK: dict[OpKey, str] = {
    ("T", ""): _ALIAS,
    ("H", ""): _ALIAS,
    ("mT", ""): _ALIAS,
    ("mH", ""): _ALIAS,
    ("atleast_1d", ""): _ALIAS,
    ("atleast_2d", ""): _ALIAS,
    ("atleast_3d", ""): _ALIAS,
    ("flatten", ""): _ALIAS + " (0-d / 1-d inputs)",
    ("contiguous", ""): _ALIAS + " (input already contiguous)",
    **{
        (name, ""): _ALIAS + " (conversion to the input's own dtype)"
        for name in ["float", "long", "bool", "half", "bfloat16"]
    },
    ("positive", ""): _ALIAS + " (identity)",
    ("real", ""): _ALIAS + " (real input)",
    ("conj", ""): _ALIAS + " (real input)",
    ("resolve_conj", ""): _ALIAS + " (real input)",
    ("resolve_neg", ""): _ALIAS + " (no negative bit)",
    ("conj_physical", ""): _ALIAS + " (real input: identity)",
    ("cartesian_prod", ""): _ALIAS + " (a single tensor is returned as is)",
    ("masked.prod", ""): _ALIAS + " (prod of a 0-d tensor without mask is the tensor)",
    **{
        key: "samples with training=False (or p=0) are the identity"
        for key in [
            ("nn.functional.dropout", ""),
            ("nn.functional.dropout2d", ""),
            ("nn.functional.dropout3d", ""),
            ("nn.functional.alpha_dropout", ""),
            ("nn.functional.feature_alpha_dropout", "with_train"),
            ("nn.functional.feature_alpha_dropout", "without_train"),
        ]
    },
    ("broadcast_shapes", ""): "pure shape arithmetic on Python ints: Dynamo computes it, no tensor op exists",
}

# Ops whose result is only defined up to an order: (comparator, why). The comparator is strict
# about everything the op does define (see harness.TieTolerantSort).
_TIES = "indices of equal elements are unspecified unless stable=True (ties are common in int64/bool samples)"
COMPARATORS: dict[OpKey, tuple[Comparator, str]] = {
    ("sort", ""): (
        TieTolerantSort(lambda input, dim=-1, descending=False, stable=False: None, "values_indices"),
        _TIES,
    ),
    ("argsort", ""): (
        TieTolerantSort(lambda input, dim=-1, descending=False, stable=False: None, "indices"),
        _TIES,
    ),
    ("topk", ""): (
        TieTolerantSort(lambda input, k, dim=-1, largest=True, sorted=True: None, "values_indices"),
        _TIES + "; with sorted=False the order of the k results is unspecified",
    ),
}

# Per-op tolerances, (atol, rtol, why): only where OpenVINO's approximation is legitimately
# coarser than PyTorch's; keyed by (name, variant, dtype).
TOLERANCES: dict[CaseKey, tuple[float, float, str]] = {
    ("log_softmax", "with_dtype", "float32"): (
        1.3e-6,
        1e-5,
        "float64 output: OpenVINO's CPU plugin computes float64 in float32, so float32's default tolerances apply",
    ),
    ("addbmm", "", "float32"): (
        1.3e-6,
        1e-4,
        "sums of 25 products rounded in another order than MKL's: eager's own error against float64 reaches "
        "5.4e-5 in these samples, fxvino's 2.0e-5",
    ),
}

# Hand-written expected failures; they override generated ones.
# Samples with dropout_p > 0 draw random numbers on OpenVINO, which differ from eager's by
# contract (lowering/ops/random.py); the samples without dropout still have to match eagerly.
_RANDOM_DROPOUT = "[wrong-result] dropout_p > 0 samples draw different random numbers than eager (by contract)"
# torch.combinations under the suite's capture_dynamic_output_shape_ops: Dynamo itself fails
# (torch.compile with backend="eager" too); with Dynamo's defaults it graph-breaks and runs.
_DYNAMO_COMBINATIONS = (
    "[runtime-crash] Dynamo's own PendingUnbackedSymbolNotFound with capture_dynamic_output_shape_ops "
    '(backend="eager" fails the same way)'
)
MANUAL_XFAILS: dict[CaseKey, str] = {
    **{
        (name, "", dt): _RANDOM_DROPOUT
        for name in ["nn.functional.scaled_dot_product_attention", "nn.functional.multi_head_attention_forward"]
        for dt in DTYPES
    },
    **{("combinations", "", dt): _DYNAMO_COMBINATIONS for dt in DTYPES},
}

# Cases that must not run at all (hand-written); GENERATED_SKIPS holds the cases that crashed
# the process during a regeneration.
_SEGFAULT = "segfaults the test process in OpenVINO compile_model ({}); remove once fixed and check with -k"
_CRASHERS: dict[OpKey, str] = {
    ("expand_as", ""): _SEGFAULT.format("0-d tensor expanded to shape ()"),
}
MANUAL_SKIPS: dict[CaseKey, str] = {(*k, dt): why for k, why in _CRASHERS.items() for dt in DTYPES}

SKIPS: dict[CaseKey, str] = {**GENERATED_SKIPS, **MANUAL_SKIPS}

XFAILS: dict[CaseKey, str] = {**GENERATED_XFAILS, **MANUAL_XFAILS}


# ----------------------------------------------------------------------------- the table


@dataclasses.dataclass(frozen=True)
class OpEntry:
    opinfo: OpInfo
    dtypes: tuple[str, ...]  # of DTYPES, those the OpInfo supports on CPU
    aten_ops: tuple[str, ...] | None  # float32 ATen graph at the last regeneration; None: unknown
    meta_only: str | None = None
    empty_graph_ok: str | None = None
    comparator: Comparator | None = None

    @property
    def key(self) -> OpKey:
        return (self.opinfo.name, self.opinfo.variant_test_name)

    @property
    def id(self) -> str:
        name, variant = self.key
        return f"{name}.{variant}" if variant else name

    def core_relevant(self) -> bool | None:
        """All ATen ops of its graph are Core ATen or lowered by fxvino (None: never traced)."""
        if self.aten_ops is None:
            return None
        from .harness import core_or_registered

        return bool(self.aten_ops) and all(core_or_registered(op) for op in self.aten_ops)


def _supported(opinfo: OpInfo) -> tuple[str, ...]:
    cpu = opinfo.supported_dtypes("cpu")
    return tuple(name for name, dt in DTYPES.items() if dt in cpu)


def _build() -> dict[OpKey, OpEntry]:
    table: dict[OpKey, OpEntry] = {}
    for opinfo in op_db:
        key = (opinfo.name, opinfo.variant_test_name)
        dtypes = _supported(opinfo)
        if not dtypes:
            continue
        ops = ATEN_OPS.get(key)
        table[key] = OpEntry(
            opinfo=opinfo,
            dtypes=dtypes,
            aten_ops=tuple(ops) if ops is not None else None,
            meta_only=META_ONLY.get(key),
            empty_graph_ok=EMPTY_GRAPH_OK.get(key),
            comparator=COMPARATORS[key][0] if key in COMPARATORS else None,
        )
    return table


TABLE: dict[OpKey, OpEntry] = _build()


# ----------------------------------------------------------------------------- selection


def mode() -> Mode:
    value = os.environ.get("FXVINO_CONFORMANCE", "slice").strip().lower() or "slice"
    if value not in ("slice", "full"):
        raise ValueError(f"FXVINO_CONFORMANCE must be 'slice' or 'full', got {value!r}")
    return value  # type: ignore[return-value]


def selected_dtypes() -> tuple[str, ...]:
    raw = os.environ.get("FXVINO_CONFORMANCE_DTYPES", "").strip()
    if not raw:
        return SLICE_DTYPES if mode() == "slice" else FULL_DTYPES
    names = tuple(d.strip() for d in raw.split(",") if d.strip())
    bad = [d for d in names if d not in DTYPES]
    if bad:
        raise ValueError(f"FXVINO_CONFORMANCE_DTYPES: unknown {bad}; valid: {', '.join(DTYPES)}")
    return names


def max_samples() -> int:
    raw = os.environ.get("FXVINO_CONFORMANCE_SAMPLES", "").strip()
    if raw:
        return max(1, int(raw))
    return SLICE_SAMPLES if mode() == "slice" else FULL_SAMPLES


def regenerating() -> bool:
    return os.environ.get("FXVINO_REGEN_OPTABLE", "").strip() in ("1", "true", "yes")


def in_slice(entry: OpEntry) -> bool:
    """Core ATen relevant OpInfos. Before the first regeneration (no ATen_OPS) every OpInfo is."""
    if not ATEN_OPS:
        return True
    return bool(entry.core_relevant())


def selected_cases() -> list[tuple[OpEntry, str]]:
    """(entry, dtype) pairs to run, in op_db order; deterministic for a given table and torch."""
    dtypes = selected_dtypes()
    slice_only = mode() == "slice"
    cases = []
    for entry in TABLE.values():
        if slice_only and not in_slice(entry):
            continue
        cases += [(entry, dt) for dt in dtypes if dt in entry.dtypes]
    return cases


# For a generated xfail whose first failing sample was not the first one: the 1-based count of
# judged samples at the failure. A run judging fewer samples does not reach it, so the case must
# pass there (and is not marked xfail).
XFAIL_FROM_SAMPLE: dict[CaseKey, int] = dict(getattr(_generated, "GENERATED_XFAIL_SAMPLE", {}))


def expected_failure(key: CaseKey, samples: int | None = None) -> str | None:
    """The xfail reason of ``key`` when a run judging ``samples`` samples reaches the failure."""
    if key in MANUAL_XFAILS:
        return MANUAL_XFAILS[key]
    reason = GENERATED_XFAILS.get(key)
    if reason is None:
        return None
    limit = max_samples() if samples is None else samples
    return reason if XFAIL_FROM_SAMPLE.get(key, 1) <= limit else None


def class_dependent(key: CaseKey, reason: str) -> bool:
    """Whether a recorded failure may pass on this CPU: a bf16 wrong result recorded where the
    plugin computes bf16 (AVX512-BF16, AMX) is computed in f32 on other CPUs, where it may come
    out as close to eager as float32 is (13 such bf16 cases pass as an AVX2-only CPU)."""
    from harness import cpu_computes_bf16

    return key[2] == "bfloat16" and reason.startswith("[wrong-result]") and not cpu_computes_bf16()


def tolerance(key: CaseKey) -> tuple[float | None, float | None]:
    tol = TOLERANCES.get(key)
    return (tol[0], tol[1]) if tol else (None, None)
