"""argmax/argmin, max/min, topk, sort and cumsum on OpenVINO against eager PyTorch.

Inputs are chosen so that the answers are fully determined: ties where torch specifies the
order (argmax/max.dim take the first index, stable sorts keep index order), distinct values
where it does not (topk, unstable sorts), and NaN/inf rows where OpenVINO's own TopK and
ReduceMax disagree with torch.
"""

from __future__ import annotations

import pytest
import torch

import fxvino
from harness import assert_all_on_openvino, run_fxvino

NAN, INF = float("nan"), float("inf")

# Rows where NaN and infinities decide the answer: all NaN, all -inf, all +inf, NaN behind
# +inf, +inf ahead of NaN, and an ordinary row with ties.
SPECIAL = torch.tensor(
    [
        [NAN, NAN, NAN, NAN, NAN],
        [-INF, -INF, -INF, -INF, -INF],
        [INF, INF, INF, INF, INF],
        [INF, 1.0, -INF, NAN, INF],
        [-INF, NAN, INF, -INF, NAN],
        [2.0, -1.0, 2.0, -1.0, 0.0],
    ]
)


def _ties(dtype: torch.dtype, shape=(6, 9)) -> torch.Tensor:
    return torch.randint(-2, 3, shape, generator=torch.Generator().manual_seed(0)).to(dtype)


def _distinct(shape, dtype=torch.float32) -> torch.Tensor:
    n = torch.Size(shape).numel()
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(1)).reshape(shape)
    return (perm - n // 2).to(dtype) * (0.5 if dtype.is_floating_point else 1)


def _check(fn, *args, ops, dynamic=False):
    expected = fn(*args)
    out, report = run_fxvino(fn, *args, fullgraph=True, dynamic=dynamic)
    torch.testing.assert_close(out, expected, equal_nan=True, rtol=0, atol=0)
    assert_all_on_openvino(report, ops=ops)
    return out


# ----------------------------------------------------------------------------- argmax / argmin


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_argmax_argmin_first_index_of_ties(dtype):
    def fn(x):
        return (
            torch.argmax(x),
            torch.argmax(x, 1),
            torch.argmax(x, 0, keepdim=True),
            torch.argmax(x, keepdim=True),
            torch.argmin(x),
            torch.argmin(x, -1, keepdim=True),
            torch.argmin(x, 0),
        )

    x = _ties(dtype)
    out = _check(fn, x, ops=["aten.argmax.default", "aten.argmin.default"])
    assert out[3].shape == (1, 1)


@pytest.mark.numerics
def test_argmax_argmin_nan_and_inf():
    def fn(x):
        return torch.argmax(x, 1), torch.argmin(x, 1), torch.argmax(x.t(), 0, keepdim=True), torch.argmin(x[3:])

    out = _check(fn, SPECIAL, ops=["aten.argmax.default", "aten.argmin.default"])
    # NaN wins both ways, and a row of equal infinities answers its first index.
    assert out[0].tolist() == [0, 0, 0, 3, 1, 0]
    assert out[1].tolist() == [0, 0, 0, 3, 1, 1]


# ----------------------------------------------------------------------------- max / min


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_max_min_dim(dtype):
    def fn(x):
        return torch.max(x, 1), torch.min(x, 0, keepdim=True), torch.max(x, -1, keepdim=True), torch.min(x, 2)

    _check(fn, _ties(dtype, (3, 7, 5)), ops=["aten.max.dim", "aten.min.dim"])


@pytest.mark.numerics
def test_max_min_dim_nan_and_inf():
    def fn(x):
        return torch.max(x, 1), torch.min(x, 1), torch.max(x, 0)

    out = _check(fn, SPECIAL, ops=["aten.max.dim", "aten.min.dim"])
    assert out[0].values[1].item() == -INF and out[1].values[2].item() == INF


@pytest.mark.parametrize(
    "x",
    [SPECIAL, SPECIAL[1:3], SPECIAL[5:], _ties(torch.int64), _ties(torch.int64) > 0],
    ids=["nan", "only-inf", "finite", "int64", "bool"],
)
def test_max_min_all(x):
    _check(lambda x: (torch.max(x), torch.min(x)), x, ops=["aten.max.default", "aten.min.default"])


def test_zero_dim_inputs():
    def fn(x):
        return (
            torch.argmax(x),
            torch.argmin(x, 0, keepdim=True),
            torch.max(x, 0),
            torch.min(x, -1, keepdim=True),
            torch.topk(x, 1),
            torch.sort(x, descending=True),
            torch.cumsum(x, 0),
            torch.max(x),
        )

    _check(fn, torch.tensor(-2.5), ops=["aten.argmax.default", "aten.max.dim", "aten.topk.default"])


# ----------------------------------------------------------------------------- topk


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_topk(dtype):
    def fn(x):
        return (
            torch.topk(x, 3),
            torch.topk(x, 4, dim=0, largest=False),
            torch.topk(x, 1, dim=1, largest=False),
            torch.topk(x, 12, dim=-1),
            torch.topk(x, 2, dim=-2, sorted=False),  # unspecified order: torch's is sorted here
        )

    _check(fn, _distinct((5, 12), dtype), ops=["aten.topk.default"])


@pytest.mark.numerics
@pytest.mark.parametrize("largest", [True, False])
def test_topk_nan_and_inf(largest):
    x = SPECIAL
    expected = torch.topk(x, 3, largest=largest)
    (values, indices), report = run_fxvino(lambda x: torch.topk(x, 3, largest=largest), x, fullgraph=True)
    assert_all_on_openvino(report, ops=("aten.topk.default",))
    # Values are determined; the order of equal values (and of NaN) is not, in torch either.
    torch.testing.assert_close(values, expected.values, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(torch.gather(x, 1, indices), values, equal_nan=True, rtol=0, atol=0)
    assert all(len(set(row)) == 3 for row in indices.tolist())


# ----------------------------------------------------------------------------- sort


@pytest.mark.numerics
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable_ties_nan_inf(descending):
    def fn(x, y):
        return (
            torch.sort(x, dim=1, descending=descending, stable=True),
            torch.sort(x, dim=0, descending=descending, stable=True),
            torch.argsort(y, dim=-1, descending=descending, stable=True),
        )

    x = torch.cat([SPECIAL, SPECIAL.flip(1), SPECIAL.roll(2, 1)], 1)
    _check(fn, x, _ties(torch.int64, (4, 40)), ops=["aten.sort.stable"])


def test_sort_default():
    def fn(small, large, ints, flags):
        return (
            torch.sort(small),  # up to 16 elements torch's sort keeps ties in index order
            torch.sort(small, 0, descending=True),
            torch.sort(large, descending=True),  # distinct values: the order is determined
            torch.msort(ints),
            torch.sort(flags, 1),
        )

    args = (_ties(torch.float32, (5, 16)), _distinct((3, 3000)), _ties(torch.int64, (16, 3)), _ties(torch.int64) > 0)
    _check(fn, *args, ops=["aten.sort.default"])


def test_stable_sort_beyond_int32_key_stays_in_pytorch():
    x = _ties(torch.float32, (1, 50_000))
    out, report = run_fxvino(lambda x: torch.sort(x, stable=True), x, fullgraph=True)
    torch.testing.assert_close(out, torch.sort(x, stable=True), rtol=0, atol=0)
    assert report.torch_ops["aten.sort.stable"] == 1
    assert any("stable sort of 50000" in fb.reason for fb in report.fallbacks)


def test_sort_empty_and_k_zero():
    def fn(x, y):
        return torch.sort(x, 0), torch.sort(x, 1, descending=True), torch.topk(y, 0), torch.topk(x, 0, dim=0)

    _check(fn, torch.randn(0, 4), torch.randn(3, 5), ops=["aten.sort.default"])


# ----------------------------------------------------------------------------- cumsum


@pytest.mark.parametrize(
    ("x", "dtype"),
    [
        (_ties(torch.float32, (4, 6, 5)), None),
        (_ties(torch.int64, (4, 6, 5)) * 1000, None),
        (_ties(torch.int64, (4, 6, 5)) > 0, None),  # bool -> int64
        (_ties(torch.int32, (4, 6, 5)), torch.float32),
        (_ties(torch.float32, (4, 6, 5)), torch.int64),
    ],
    ids=["float32", "int64", "bool", "int32-to-float32", "float32-to-int64"],
)
def test_cumsum(x, dtype):
    def fn(x):
        return torch.cumsum(x, 0, dtype=dtype), torch.cumsum(x, -1, dtype=dtype), torch.cumsum(x, 1, dtype=dtype)

    out = _check(fn, x, ops=["aten.cumsum.default"])
    assert out[0].dtype == (dtype or (torch.float32 if x.is_floating_point() else torch.int64))


def test_cumsum_long_float32_matches_double_accumulation():
    # torch accumulates float32 in double on CPU; a plain float32 running sum drifts by
    # ~1e-4 here and fails the default tolerances.
    x = torch.randn(3, 5000, generator=torch.Generator().manual_seed(2))
    out, report = run_fxvino(lambda x: torch.cumsum(x, 1), x, fullgraph=True)
    torch.testing.assert_close(out, torch.cumsum(x, 1))
    assert_all_on_openvino(report, ops=("aten.cumsum.default",))
    y = torch.tensor([1.0, 2.0, INF, 3.0, -INF, NAN, 4.0])
    _check(lambda y: torch.cumsum(y, 0), y, ops=["aten.cumsum.default"])


# ----------------------------------------------------------------------------- dynamic shapes


def test_dynamic_shapes():
    def fn(x):
        return (
            torch.argmax(x, 1),
            torch.max(x, 0),
            torch.topk(x, x.shape[1] // 2, dim=1),
            torch.sort(x, dim=1, descending=True),
            torch.cumsum(x, 1),
        )

    compiled = torch.compile(fn, backend="fxvino", fullgraph=True, dynamic=True)
    for i, shape in enumerate([(3, 8), (5, 12), (2, 20)]):
        x = _distinct(shape)
        x[0, 1] = NAN
        with fxvino.collect_reports() as report, torch.no_grad():
            out = compiled(x)
        torch.testing.assert_close(out, fn(x), equal_nan=True, rtol=0, atol=1e-6)
        if i == 0:
            assert_all_on_openvino(
                report,
                ops=(
                    "aten.argmax.default",
                    "aten.topk.default",
                    "aten.sort.default",
                ),
            )
        else:
            assert not report.graphs, "recompiled for a new size"
