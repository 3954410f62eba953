"""Graphs of the shape classes that have crashed OpenVINO's CPU plugin (or may), run one by one.

Run as a script (``python tests/shape_class_cases.py``) by ``test_shape_classes.py``: a crash of the
process (a segfault inside OpenVINO) must fail a test, not kill pytest. Each case prints one JSON
line *before* it starts and one with its outcome, so the test knows which case a crash was in.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

import fxvino


def _cases() -> dict[str, tuple[Callable, tuple]]:
    v, w = torch.randn(5), torch.randn(5)
    m = torch.randn(3, 5)
    empty = torch.randn(0, 4)
    return {
        # 0-d results of matmul-family ops (einsum("i,i") crashed compile_model: MatMul -> Reshape([]))
        "einsum_dot": (lambda a, b: torch.einsum("i,i", a, b), (v, w)),
        "einsum_dot_plus": (lambda a, b: torch.einsum("i,i->", a, b) + 1, (v, w)),
        "einsum_trace": (lambda a: torch.einsum("ii", a), (torch.randn(4, 4),)),
        "dot": (torch.dot, (v, w)),
        "vdot": (torch.vdot, (v, w)),
        "inner": (torch.inner, (v, w)),
        "matmul_1d": (torch.matmul, (v, w)),
        "tensordot_all": (lambda a, b: torch.tensordot(a, b, dims=2), (m, m.clone())),
        "mm_1x1_to_0d": (lambda a, b: (a @ b).reshape(()), (torch.randn(1, 5), torch.randn(5, 1))),
        "bmm_to_0d": (lambda a, b: torch.bmm(a, b).view(()), (torch.randn(1, 1, 5), torch.randn(1, 5, 1))),
        "mv_1": (lambda a, b: torch.mv(a, b).squeeze(), (torch.randn(1, 5), w)),
        "addmv_1": (lambda c, a, b: torch.addmv(c, a, b).sum(), (torch.randn(1), torch.randn(1, 5), w)),
        "linear_to_0d": (lambda a, wt: F.linear(a, wt).view(()), (torch.randn(1, 5), torch.randn(1, 5))),
        # empty reductions
        "sum_empty": (lambda a: a.sum(0), (empty,)),
        "mean_empty": (lambda a: a.mean(0), (empty,)),
        "amax_empty_other_dim": (lambda a: a.amax(1), (empty,)),
        "prod_empty": (lambda a: a.prod(0), (empty,)),
        "var_empty_other_dim": (lambda a: a.var(1), (empty,)),
        "sum_all_empty": (lambda a: a.sum(), (empty,)),
        # zero-size inputs to matmul / linear / conv
        "mm_zero_k": (torch.mm, (torch.randn(3, 0), torch.randn(0, 4))),
        "mm_zero_m": (torch.mm, (torch.randn(0, 5), torch.randn(5, 4))),
        "linear_zero_batch": (
            lambda a, wt, b: F.linear(a, wt, b),
            (torch.randn(0, 5), torch.randn(3, 5), torch.randn(3)),
        ),
        "conv_zero_batch": (lambda a, wt: F.conv2d(a, wt), (torch.randn(0, 2, 5, 5), torch.randn(3, 2, 3, 3))),
        # 0-d inputs to elementwise and reduction ops
        "elementwise_0d": (lambda a, b: torch.sigmoid(a) * b + a.exp(), (torch.tensor(0.3), torch.tensor(2.0))),
        "reduction_0d": (lambda a: a.sum() + a.amax() + a.mean(), (torch.tensor(1.5),)),
        "softmax_0d": (lambda a: torch.softmax(a, 0), (torch.tensor(1.5),)),
    }


CASES = list(_cases())


def run(names: list[str]) -> None:
    cases = _cases()
    for name in names:
        fn, args = cases[name]
        print(json.dumps({"case": name, "started": True}), flush=True)
        torch._dynamo.reset()
        expected = fn(*args)
        with fxvino.collect_reports() as report, torch.no_grad():
            out = torch.compile(fn, backend="fxvino")(*args)
        outcome: dict = {"case": name, "shape_ok": tuple(out.shape) == tuple(expected.shape)}
        try:
            torch.testing.assert_close(out, expected, equal_nan=True, rtol=1e-5, atol=1e-5)
            outcome["equal"] = True
        except AssertionError as e:
            outcome["equal"], outcome["error"] = False, str(e).splitlines()[0]
        outcome["fallbacks"] = [f"{f.op}: {f.reason.splitlines()[0]}" for f in report.fallbacks]
        outcome["ov_ops"] = sum(report.ov_ops.values())
        print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    run(sys.argv[1:] or CASES)
