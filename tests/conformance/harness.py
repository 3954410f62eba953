"""Run one OpInfo sample eagerly and under ``torch.compile(backend="fxvino")`` and judge the result.

Everything here is plain functions so the pytest module, the conftest summary and the
table regeneration all classify failures the same way. A failure is raised as
:class:`ConformanceFailure` whose ``kind`` is one of :data:`KINDS` and whose message's first
line is what ends up in the summary and in the generated xfail table.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import operator
import re
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

import fxvino
from fxvino.report import Report

# Failure kinds, most actionable first. The summary groups failures by these.
KINDS = {
    "missing-lowering": "an ATen op of the graph has no OpenVINO lowering and ran in PyTorch",
    "declined": "an op has a lowering but decline_reason() refused the node (dtype, validator)",
    "lowering-error": "a lowering function raised while building the OpenVINO model",
    "ov-compile-error": "OpenVINO rejected the model at compile_model()",
    "ov-inference-error": "the compiled OpenVINO model raised at run time (fxvino re-ran it eagerly)",
    "aot-capture-error": "AOTAutograd could not capture the Dynamo graph (fxvino ran it eagerly)",
    "ran-in-pytorch": "a supported op was left out of every OpenVINO partition",
    "wrong-result": "OpenVINO's output differs from eager PyTorch",
    "nothing-on-openvino": "the compiled graph had no op that ran on OpenVINO",
    "dynamo-error": "Dynamo could not capture the call with fullgraph=True (not fxvino's fault)",
    "backend-crash": "fxvino raised out of the backend instead of degrading",
    "runtime-crash": "the compiled function raised",
}


class ConformanceFailure(AssertionError):
    def __init__(self, kind: str, detail: str):
        assert kind in KINDS, kind
        self.kind = kind
        self.detail = detail
        super().__init__(f"[{kind}] {detail}")


@dataclasses.dataclass
class SampleResult:
    """What one sample did, for the summary (only set when the sample ran to the end)."""

    aten_ops: set[str]
    ov_ops: int


def first_line(text: object, limit: int = 240) -> str:
    line = next((s.strip() for s in str(text).splitlines() if s.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


_OV_NOISE = ("Exception from ", "Check '", "While validating node")


def stable(text: str) -> str:
    """Drop what changes from run to run (addresses, OpenVINO node ids) so reasons diff cleanly."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
    return re.sub(r"(?<=[A-Za-z])_\d{3,}\b", "_N", text)


def condense(text: str, limit: int = 300) -> str:
    """One line from a multi-line error: its prefix plus its most specific line.

    OpenVINO errors read "Exception from <file>:<line>:" (repeated) then, last, what went wrong;
    the first line alone says nothing.
    """
    lines = [s.strip() for s in str(text).splitlines() if s.strip()]
    if not lines:
        return ""
    head = lines[0]
    for marker in _OV_NOISE:
        cut = head.find(marker)
        if cut > 0:
            head = head[:cut].rstrip()
    specific = [s for s in lines[1:] if not s.startswith(_OV_NOISE)]
    if not specific and lines[0] != head:
        specific = [lines[0][len(head) :].strip()]
    line = f"{head} {specific[-1]}" if specific else head
    return first_line(stable(line), limit)


# ----------------------------------------------------------------------------- inputs


def _detach_clone(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    return x


def fresh_args(sample: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(input, *args), kwargs`` of a SampleInput with every tensor detached and copied.

    Each run gets its own copy so an op that writes to an input cannot leak into the other run.
    """
    args = pytree.tree_map(_detach_clone, (sample.input, *sample.args))
    kwargs = pytree.tree_map(_detach_clone, dict(sample.kwargs))
    return tuple(args), kwargs


def make_fn(op: Callable) -> Callable:
    def fn(*args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs)

    return fn


# ----------------------------------------------------------------------------- comparison


def _meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.dtype)
    return x


def compare(actual: Any, expected: Any, *, values: bool, atol: float | None, rtol: float | None) -> None:
    try:
        if values:
            torch.testing.assert_close(actual, expected, equal_nan=True, atol=atol, rtol=rtol)
        else:
            # Random or uninitialised outputs: only the structure, shapes and dtypes must agree.
            a, b = pytree.tree_map(_meta, actual), pytree.tree_map(_meta, expected)
            if a != b:
                raise AssertionError(f"shape/dtype mismatch: compiled {a} vs eager {b}")
    except Exception as e:  # noqa: BLE001 - assert_close raises AssertionError, TypeError, ValueError
        lines = [s.strip() for s in str(e).splitlines() if s.strip()]
        # assert_close's message: "Tensor-likes are not close!" then the numbers; keep both.
        detail = stable("; ".join(lines[:3]))
        raise ConformanceFailure("wrong-result", detail) from None


Comparator = Callable[[Any, Any, tuple, dict], None]


def _as_wrong_result(fn: Callable[[], None]) -> None:
    try:
        fn()
    except ConformanceFailure:
        raise
    except Exception as e:  # noqa: BLE001
        lines = [s.strip() for s in str(e).splitlines() if s.strip()]
        raise ConformanceFailure("wrong-result", stable("; ".join(lines[:3]))) from None


@dataclasses.dataclass(frozen=True)
class TieTolerantSort:
    """Compare sort-like results whose indices PyTorch leaves unspecified under ties.

    ``signature`` is a Python stub of the op (e.g. ``lambda input, dim=-1, descending=False,
    stable=False: None``) used to find ``dim``, ``stable`` and ``sorted`` in a sample's
    arguments. Values must match exactly; indices must pick the same input values (and match
    exactly when ``stable=True``); with ``sorted=False`` the order of the k results is free too.
    """

    signature: Callable[..., None]
    returns: str  # "values_indices" | "indices"

    def __call__(self, actual: Any, expected: Any, args: tuple, kwargs: dict) -> None:
        import inspect

        bound = inspect.signature(self.signature).bind(*args, **kwargs)
        bound.apply_defaults()
        x, dim = bound.arguments["input"], bound.arguments["dim"]
        exact = bound.arguments.get("stable") or not isinstance(x, torch.Tensor) or x.dim() == 0
        if exact:
            return compare(actual, expected, values=True, atol=None, rtol=None)
        if self.returns == "indices":
            a_val = e_val = None
            a_idx, e_idx = actual, expected
        else:
            (a_val, a_idx), (e_val, e_idx) = actual, expected
        if not bound.arguments.get("sorted", True):
            # Unsorted top-k: any order of the k results is valid; sort both before comparing.
            a_val, order_a = a_val.sort(dim)
            e_val, order_e = e_val.sort(dim)
            a_idx, e_idx = a_idx.gather(dim, order_a), e_idx.gather(dim, order_e)

        def check() -> None:
            assert a_idx.dtype == e_idx.dtype and a_idx.shape == e_idx.shape, (
                f"indices: compiled {a_idx.dtype}{tuple(a_idx.shape)} vs eager {e_idx.dtype}{tuple(e_idx.shape)}"
            )
            picked = torch.take_along_dim(x, a_idx, dim)
            torch.testing.assert_close(picked, torch.take_along_dim(x, e_idx, dim), equal_nan=True, atol=0, rtol=0)
            if a_val is not None:
                torch.testing.assert_close(a_val, e_val, equal_nan=True, atol=0, rtol=0)
                torch.testing.assert_close(picked, a_val, equal_nan=True, atol=0, rtol=0)

        _as_wrong_result(check)


# ----------------------------------------------------------------------------- report checks


def _fallback_kind(reason: str, ran_on: str) -> str:
    if reason == "no OpenVINO lowering":
        return "missing-lowering"
    if reason.startswith("lowering "):
        return "lowering-error"
    if reason.startswith("OpenVINO compile failed"):
        return "ov-compile-error"
    if reason.startswith("OpenVINO inference failed"):
        return "ov-inference-error"
    if ran_on == "eager" and "AOTAutograd" in reason:
        return "aot-capture-error"
    return "declined"


def check_report(report: Report, *, allow_empty: bool) -> None:
    """Fail unless every op ran on OpenVINO and at least one did."""
    problems: list[tuple[str, str]] = []
    seen_missing: set[str] = set()
    for g in report.graphs:
        for fb in g.fallbacks:
            kind = _fallback_kind(fb.reason, fb.ran_on)
            if fb.where == "graph" and fb.op == "AOTAutograd capture":
                kind = "aot-capture-error"
            if kind == "missing-lowering":
                seen_missing.add(fb.op)
                problems.append((kind, fb.op))
            elif kind == "declined":
                problems.append((kind, f"{fb.op}: {fb.reason}"))
            else:
                problems.append((kind, f"{fb.op}: {condense(fb.reason)}"))
    torch_ops = report.torch_ops
    left_out = sorted(op for op in torch_ops if op not in seen_missing)
    if torch_ops and not problems:
        problems.append(("ran-in-pytorch", ", ".join(left_out)))
    if problems:
        order = list(KINDS)
        problems.sort(key=lambda p: order.index(p[0]))
        kind = problems[0][0]
        # One line, the primary kind first; all missing ops listed so a fix can be complete.
        same = sorted({d for k, d in problems if k == kind})
        others = sorted({f"{k}: {d}" for k, d in problems if k != kind})
        raise ConformanceFailure(kind, "; ".join(same + others))
    if sum(report.ov_ops.values()) == 0 and not allow_empty:
        if not report.graphs:
            detail = "no graph reached fxvino (Dynamo folded the call away)"
        else:
            nodes = sum(g.num_nodes for g in report.graphs)
            detail = f"{len(report.graphs)} graph(s) with {nodes} op node(s), none ran on OpenVINO"
        raise ConformanceFailure("nothing-on-openvino", detail)


# ----------------------------------------------------------------------------- tracing


def aten_ops_of(report: Report) -> set[str]:
    """The ATen ops of the graphs fxvino saw (after its decompositions), from the report."""
    ops: set[str] = set()
    for g in report.graphs:
        ops.update(g.ov_ops)
        ops.update(g.torch_ops)
    ops.discard("getitem")
    ops.discard(operator.getitem.__name__)
    return ops


def trace_aten_ops(fn: Callable, args: tuple, kwargs: dict) -> set[str]:
    """ATen targets after fxvino's decomposition table, without compiling anything.

    Used by the table regeneration to classify OpInfos whose fxvino compile failed early.
    """
    from torch._dynamo.backends.common import aot_autograd

    from fxvino.capture.decompositions import decomposition_table
    from fxvino.lowering.registry import op_name
    from fxvino.options import Options

    seen: set[str] = set()

    def record(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable:
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target is not operator.getitem:
                seen.add(op_name(n.target))
        return gm.forward

    backend = aot_autograd(fw_compiler=record, decompositions=decomposition_table(Options()))
    torch._dynamo.reset()
    with torch.no_grad(), capture_data_dependent():
        torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)(*args, **kwargs)
    return seen


def capture_data_dependent() -> Any:
    """Dynamo captures ``nonzero``-like ops and ``.item()`` into the graph (fxvino lowers them)
    instead of graph-breaking, which ``fullgraph=True`` would turn into an error."""
    return torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True)


@functools.cache
def registered_ops() -> frozenset[str]:
    from fxvino.lowering import ensure_registered
    from fxvino.lowering.registry import all_entries, op_name

    ensure_registered()
    # registry.declines() records ops kept in PyTorch on purpose under the family "declined".
    return frozenset(op_name(t) for t, e in all_entries().items() if e.family != "declined")


def core_or_registered(op: str) -> bool:
    """True when ``op`` (a name like 'aten.add.Tensor') is Core ATen or has an fxvino lowering."""
    if op in registered_ops():
        return True
    overload = resolve(op)
    return overload is not None and torch.Tag.core in overload.tags


def resolve(op: str) -> torch._ops.OpOverload | None:
    parts = op.split(".")
    if len(parts) != 3:
        return None
    ns, name, overload = parts
    try:
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    except AttributeError:
        return None


# ----------------------------------------------------------------------------- one sample


def dynamo_message(e: BaseException) -> str:
    """Dynamo's first line plus its "Explanation:" line, which says what it could not trace."""
    text = str(e)
    head = f"{type(e).__name__}: {first_line(text)}"
    explanation = next((s.strip() for s in text.splitlines() if s.strip().startswith("Explanation:")), None)
    if explanation:
        head = f"{head} ({explanation.removeprefix('Explanation:').strip()})"
    return first_line(stable(head), 300)


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """Keep pytest's log capture away from fxvino's fallback warnings and Dynamo's trace log.

    fxvino logs every fallback (the test reports them itself). pytest >= 9 attaches its capture
    handlers to non-propagating loggers too, among them ``torch.__trace``; torch then builds
    every structured-trace payload (graph dumps) on each compile and pytest prints thousands of
    DEBUG lines under a failure. Only pytest's handlers are detached; TORCH_TRACE still works.
    """
    fx_logger = logging.getLogger("fxvino")
    trace_logger = logging.getLogger("torch.__trace")
    old_level = fx_logger.level
    old_handlers = list(trace_logger.handlers)
    fx_logger.setLevel(logging.CRITICAL)
    for h in old_handlers:
        if type(h).__module__.startswith("_pytest"):
            trace_logger.removeHandler(h)
    try:
        yield
    finally:
        fx_logger.setLevel(old_level)
        for h in old_handlers:
            if h not in trace_logger.handlers:
                trace_logger.addHandler(h)


class EagerFailed(Exception):
    """The sample does not run eagerly: it is skipped, not judged."""


def _traceable_wrapper_set_seed(op: Callable, *args: Any, **kwargs: Any) -> Any:
    # What torch.testing._utils.wrapper_set_seed does minus freeze_rng_state, which Dynamo cannot
    # trace (no_dispatch / _DisableFuncTorch). The caller seeds before each run instead.
    return op(*args, **kwargs)


@contextlib.contextmanager
def traceable_opinfo_wrappers() -> Iterator[None]:
    """Let Dynamo trace OpInfos whose ``op`` calls ``wrapper_set_seed`` (random ops, SDPA, ...).

    The OpInfo lambdas look the name up in their module's globals, so it is swapped there.
    """
    import sys

    from torch.testing._utils import wrapper_set_seed

    patched = [
        m
        for name, m in list(sys.modules.items())
        if name.startswith("torch.testing._internal") and getattr(m, "wrapper_set_seed", None) is wrapper_set_seed
    ]
    for m in patched:
        m.wrapper_set_seed = _traceable_wrapper_set_seed
    try:
        yield
    finally:
        for m in patched:
            m.wrapper_set_seed = wrapper_set_seed


LOW_PRECISION = (torch.float16, torch.bfloat16)
# The slack the float64 comparison allows over eager's own error, as in Inductor's OpInfo tests.
EAGER_ERROR_MULTIPLIER = 2.0


def _low_precision(out: Any) -> bool:
    return any(isinstance(t, torch.Tensor) and t.dtype in LOW_PRECISION for t in pytree.tree_leaves(out))


def _float64_reference(fn: Callable, sample: Any) -> Any:
    """The op on the sample's float16/bfloat16 tensors upcast to float64; None if that fails."""

    def up(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype in LOW_PRECISION:
            return x.detach().to(torch.float64)
        return x

    args, kwargs = fresh_args(sample)
    try:
        torch.manual_seed(42)
        with torch.no_grad():
            return fn(*pytree.tree_map(up, args), **pytree.tree_map(up, kwargs))
    except Exception:  # noqa: BLE001
        return None


def _no_worse_than_eager(actual: Any, expected: Any, reference: Any, direct: str) -> None:
    """float16/bfloat16: OpenVINO may compute in another precision (often float32) than eager.

    A result that differs from eager's passes when, element by element, its distance to the
    float64 reference is within the dtype's default tolerance or at most
    EAGER_ERROR_MULTIPLIER times eager's own distance to it.
    """
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    r_leaves, _ = pytree.tree_flatten(reference)
    assert a_spec == e_spec and len(r_leaves) == len(e_leaves), f"output structure differs: {direct}"
    for a, e, r in zip(a_leaves, e_leaves, r_leaves, strict=True):
        if not (isinstance(e, torch.Tensor) and e.dtype in LOW_PRECISION and isinstance(r, torch.Tensor)):
            torch.testing.assert_close(a, e, equal_nan=True)
            continue
        assert isinstance(a, torch.Tensor) and a.dtype == e.dtype and a.shape == e.shape, direct
        a64, e64, r64 = a.double(), e.double(), r.double()
        rtol = 1e-3 if e.dtype == torch.float16 else 1.6e-2  # assert_close's defaults
        allowed = EAGER_ERROR_MULTIPLIER * (e64 - r64).abs() + 1e-5 + rtol * r64.abs()
        ok = ((a64 - r64).abs() <= allowed) | (a64 == r64) | (a64.isnan() & r64.isnan())
        if not bool(ok.all()):
            bad = int((~ok).sum())
            worst = float(((a64 - r64).abs() - allowed).masked_fill(ok, float("-inf")).max())
            raise AssertionError(
                f"{direct}; vs float64 reference: {bad} element(s) worse than {EAGER_ERROR_MULTIPLIER:g}x "
                f"eager's error, by up to {worst:.3g}"
            )


def run_sample(
    op: Callable,
    sample: Any,
    *,
    values: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
    allow_empty: bool = False,
    comparator: Comparator | None = None,
) -> SampleResult:
    """Eager vs fxvino for one sample; raises ConformanceFailure or EagerFailed."""
    with quiet_logs(), traceable_opinfo_wrappers():
        return _run_sample(
            op, sample, values=values, atol=atol, rtol=rtol, allow_empty=allow_empty, comparator=comparator
        )


def _run_sample(
    op: Callable,
    sample: Any,
    *,
    values: bool,
    atol: float | None,
    rtol: float | None,
    allow_empty: bool,
    comparator: Comparator | None,
) -> SampleResult:
    fn = make_fn(op)
    args, kwargs = fresh_args(sample)
    try:
        torch.manual_seed(42)
        with torch.no_grad():
            expected = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        raise EagerFailed(f"{type(e).__name__}: {first_line(e)}") from None

    eager_args, eager_kwargs = args, kwargs
    args, kwargs = fresh_args(sample)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="fxvino", fullgraph=True, dynamic=False)
    torch.manual_seed(42)
    with fxvino.collect_reports() as report, torch.no_grad(), capture_data_dependent():
        try:
            actual = compiled(*args, **kwargs)
        except torch._dynamo.exc.BackendCompilerFailed as e:
            inner = e.inner_exception
            raise ConformanceFailure("backend-crash", condense(f"{type(inner).__name__}: {inner}")) from None
        except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError, torch._dynamo.exc.TorchRuntimeError) as e:
            raise ConformanceFailure("dynamo-error", dynamo_message(e)) from None
        except Exception as e:  # noqa: BLE001
            raise ConformanceFailure("runtime-crash", condense(f"{type(e).__name__}: {e}")) from None
    torch._dynamo.reset()
    check_report(report, allow_empty=allow_empty)
    if comparator is not None and values:
        comparator(actual, expected, eager_args, eager_kwargs)
    elif values and atol is None and _low_precision(expected):
        try:
            compare(actual, expected, values=True, atol=None, rtol=None)
        except ConformanceFailure as failure:
            detail = failure.detail
            reference = _float64_reference(fn, sample)
            if reference is None:
                raise
            _as_wrong_result(lambda: _no_worse_than_eager(actual, expected, reference, detail))
    else:
        compare(actual, expected, values=values, atol=atol, rtol=rtol)
    return SampleResult(aten_ops_of(report), sum(report.ov_ops.values()))
