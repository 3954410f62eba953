"""cumprod, cummax/cummin, logcumsumexp, kthvalue, median, nanmedian, mode, searchsorted and
bucketize on OpenVINO against eager PyTorch.

Expectations come from eager on the same inputs. Inputs hold ties, NaN, infinities, zeros and
negatives; where torch leaves an index unspecified (equal values in kthvalue and median), the
indices are checked by the values they pick.
"""

from __future__ import annotations

import pytest
import torch

import fxvino
from harness import assert_all_on_openvino, run_fxvino, sixteen_bit_numerics

# Marked ``numerics`` (run again as an AVX2-only CPU): the 16-bit cases, and the float products
# and log-add-exps (the plugin's arithmetic and Exp/Log kernels). Comparison-built scans and
# integer ones give the same on every class.

NAN, INF = float("nan"), float("inf")

SPECIAL = torch.tensor(
    [
        [NAN, NAN, NAN, NAN, NAN, NAN],
        [-INF, -INF, -INF, -INF, -INF, -INF],
        [INF, INF, INF, INF, INF, INF],
        [INF, 1.0, -INF, NAN, INF, 2.0],
        [-INF, NAN, INF, -INF, NAN, 0.0],
        [2.0, -1.0, 2.0, -1.0, 0.0, 2.0],
        [0.0, -3.0, 1.5, 0.0, -0.5, -2.0],
    ]
)


def _ties(dtype: torch.dtype, shape=(6, 9), low=-2, high=3) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(0)).to(dtype)


def _randn(shape, dtype=torch.float32, seed=3) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _check(fn, *args, ops, exact=True, **kwargs):
    expected = fn(*args)
    out, report = run_fxvino(fn, *args, fullgraph=True)
    tol = {"rtol": 0, "atol": 0} if exact else {}
    torch.testing.assert_close(out, expected, equal_nan=True, **tol, **kwargs)
    assert_all_on_openvino(report, ops=ops)
    return out


def _check_picks(fn, x, sources, *, ops):
    """(values, indices) results whose indices torch leaves unspecified under ties: the values
    must match, and the indices must pick those values. ``sources`` gives, per result, the
    tensor it reduced (a slice of ``x``) and the dim."""
    expected = fn(x)
    out, report = run_fxvino(fn, x, fullgraph=True)
    assert_all_on_openvino(report, ops=ops)
    for (values, indices), (e_values, e_indices), (src, dim) in zip(out, expected, sources, strict=True):
        torch.testing.assert_close(values, e_values, equal_nan=True, rtol=0, atol=0)
        assert indices.dtype == e_indices.dtype and indices.shape == e_indices.shape
        src = src(x)
        kept = indices.dim() == src.dim()
        picked = src.gather(dim, indices if kept else indices.unsqueeze(dim))
        torch.testing.assert_close(picked if kept else picked.squeeze(dim), values, equal_nan=True, rtol=0, atol=0)
    return out


def _whole(x):
    return x


# ----------------------------------------------------------------------------- cumprod


@pytest.mark.numerics
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cumprod_float(dtype):
    def fn(x, y):
        return torch.cumprod(x, 1), torch.cumprod(x, 0), torch.cumprod(y, -1), torch.cumprod(y, 1)

    y = (_randn((3, 37, 4), seed=4) * 0.5 + 1).to(dtype)  # products of ~37 factors: no overflow
    _check(fn, SPECIAL.to(dtype), y, ops=["aten.cumprod.default"], exact=False)


@pytest.mark.parametrize(
    ("x", "dtype"),
    [
        (_ties(torch.int64, (5, 11)), None),
        (_ties(torch.int32, (5, 11)), None),  # promotes to int64
        (_ties(torch.int8, (5, 11)), None),  # promotes to int64
        (_ties(torch.int8, (5, 11), -3, 4) * 7, torch.int8),  # wraps in int8, as torch's
        (_ties(torch.int64, (5, 11)) > 0, None),  # bool -> int64
        (_ties(torch.int64, (5, 11)), torch.float32),
    ],
    ids=["int64", "int32", "int8", "int8-wraps", "bool", "int64-to-float32"],
)
def test_cumprod_integers(x, dtype):
    def fn(x):
        return torch.cumprod(x, 0, dtype=dtype), torch.cumprod(x, 1, dtype=dtype)

    _check(fn, x, ops=["aten.cumprod.default"])


def test_cumprod_vander():
    x = torch.tensor([0.5, -2.0, 0.0, 3.0])
    _check(lambda x: torch.linalg.vander(x, N=6), x, ops=["aten.cumprod.default"], exact=False)


def test_cumprod_dynamic_length_stays_in_pytorch():
    x = _randn((2, 8))
    compiled = torch.compile(lambda x: torch.cumprod(x, 1), backend="fxvino", fullgraph=True, dynamic=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        out = compiled(x)
    torch.testing.assert_close(out, torch.cumprod(x, 1))
    assert report.torch_ops["aten.cumprod.default"] == 1
    assert any("dynamic dimension" in fb.reason for fb in report.fallbacks)


# ----------------------------------------------------------------------------- cummax / cummin


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(torch.float32, torch.float16, torch.bfloat16))
def test_cummax_cummin_nan_inf_ties(dtype):
    def fn(x):
        return torch.cummax(x, 1), torch.cummin(x, 1), torch.cummax(x, 0), torch.cummin(x.t(), 0)

    x = torch.cat([SPECIAL, SPECIAL.flip(1), _ties(torch.float32, (7, 6))], 1).to(dtype)
    out = _check(fn, x, ops=["aten.cummax.default", "aten.cummin.default"])
    # Ties take the last index; once NaN is seen it stays, indexed by the latest NaN.
    assert out[0].indices[5, :6].tolist() == [0, 0, 2, 2, 2, 5]
    assert out[0].indices[4, :6].tolist() == [0, 1, 1, 1, 4, 4]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_cummax_cummin_integers(dtype):
    def fn(x):
        return torch.cummax(x, -1), torch.cummin(x, 0), torch.cummax(x, 1), torch.cummin(x, 2)

    low = 0 if dtype in (torch.uint8, torch.bool) else -2
    _check(fn, _ties(dtype, (4, 19, 3), low, low + 3), ops=["aten.cummax.default", "aten.cummin.default"])


# ----------------------------------------------------------------------------- logcumsumexp


@pytest.mark.numerics
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_logcumsumexp(dtype):
    def fn(x, y):
        return torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0), torch.logcumsumexp(y, -1), torch.logcumsumexp(y, 0)

    y = _randn((3, 50), seed=5) * 30  # a wide range: the smaller terms underflow a single shift
    _check(fn, SPECIAL.to(dtype), y.to(dtype), ops=["aten.logcumsumexp.default"], exact=False)


# ----------------------------------------------------------------------------- kthvalue


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(torch.float32, torch.float16, torch.bfloat16))
def test_kthvalue(dtype):
    def fn(x):
        return (
            torch.kthvalue(x, 1, 1),
            torch.kthvalue(x, 4, 1),
            torch.kthvalue(x, 6, -1, keepdim=True),
            torch.kthvalue(x, 3, 0),
            torch.kthvalue(x, 7, 0, keepdim=True),
        )

    _check_picks(fn, SPECIAL.to(dtype), [(_whole, d) for d in (1, 1, 1, 0, 0)], ops=["aten.kthvalue.default"])


def test_kthvalue_integers_stay_in_pytorch():
    # torch's quickselect decides which index of tied integers it answers.
    x = _ties(torch.int64, (7, 6))
    out, report = run_fxvino(lambda x: torch.kthvalue(x, 3, 1), x, fullgraph=True)
    torch.testing.assert_close(out, torch.kthvalue(x, 3, 1), rtol=0, atol=0)
    assert report.torch_ops["aten.kthvalue.default"] == 1
    assert any("quickselect" in fb.reason for fb in report.fallbacks)


# ----------------------------------------------------------------------------- median / nanmedian


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(torch.float32, torch.float16, torch.bfloat16, torch.int64))
def test_median_nanmedian_dim(dtype):
    def fn(x):
        return (
            torch.median(x, 1),  # even count: the lower median
            torch.median(x[:, :5], 1, keepdim=True),  # odd count
            torch.median(x, 0),
            torch.nanmedian(x, 1),
            torch.nanmedian(x[:, 1:], -1, keepdim=True),
            torch.nanmedian(x, 0),
        )

    x = SPECIAL if dtype.is_floating_point else _ties(torch.int64, (7, 6))
    sources = [(_whole, 1), (lambda x: x[:, :5], 1), (_whole, 0), (_whole, 1), (lambda x: x[:, 1:], 1), (_whole, 0)]
    out = _check_picks(fn, x.to(dtype), sources, ops=["aten.median.dim", "aten.nanmedian.dim"])
    if dtype.is_floating_point:
        # A row with NaN: median answers its first NaN (torch specifies it), nanmedian ignores them.
        expected = fn(x.to(dtype))
        assert out[0].indices[3:5].tolist() == expected[0].indices[3:5].tolist() == [3, 1]


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(torch.float32, torch.float16, torch.bfloat16, torch.int64))
def test_median_nanmedian_all(dtype):
    def fn(x, y):
        return torch.median(x), torch.nanmedian(x), torch.median(y), torch.nanmedian(y), torch.median(y[:, :3])

    if dtype.is_floating_point:
        x, y = SPECIAL[3:], _ties(torch.float32, (4, 4))
    else:
        x, y = _ties(dtype, (3, 5)), _ties(dtype, (4, 4))
    _check(fn, x.to(dtype), y.to(dtype), ops=["aten.median.default", "aten.nanmedian.default"])
    if dtype.is_floating_point:
        _check(fn, SPECIAL[5:].to(dtype), SPECIAL[:2].to(dtype), ops=["aten.median.default"])


# ----------------------------------------------------------------------------- mode


@pytest.mark.parametrize(
    "dtype", sixteen_bit_numerics(torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool)
)
def test_mode(dtype):
    # Up to 16 elements torch's std::sort is an insertion sort, so the index (the last
    # occurrence of the smallest most frequent value) is determined: compared exactly.
    def fn(x):
        return (
            torch.mode(x, 1),
            torch.mode(x, 0, keepdim=True),
            torch.mode(x),
            torch.mode(x[:, :5], -1, keepdim=True),
            torch.mode(x.reshape(2, 3, 14), 1),  # an inner axis of a 3-d tensor
        )

    x = torch.cat([_ties(torch.float32, (6, 8)), SPECIAL[5:6].expand(6, 6)], 1)
    if dtype.is_floating_point:
        x[0, -6:] = torch.tensor([INF, -INF, INF, -INF, 0.0, 1.0])
    _check(fn, x.to(dtype), ops=["aten.mode.default"])


def test_mode_long_rows():
    # Beyond 16 elements torch's index among equal values is unspecified: checked by its value.
    def fn(x):
        return torch.mode(x, 1), torch.mode(x, 0)

    _check_picks(fn, _ties(torch.int64, (5, 40)), [(_whole, 1), (_whole, 0)], ops=["aten.mode.default"])


# ----------------------------------------------------------------------------- searchsorted / bucketize


@pytest.mark.parametrize("dtype", sixteen_bit_numerics(torch.float32, torch.float16, torch.bfloat16, torch.int64))
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_bucketize(dtype, right):
    def fn(boundaries, rows, values):
        return (
            torch.searchsorted(boundaries, values, right=right),
            torch.searchsorted(rows, values[:3], side="right" if right else "left", out_int32=True),
            torch.bucketize(values, boundaries, right=right),
            torch.bucketize(values, boundaries, right=right, out_int32=True),
        )

    boundaries = torch.tensor([-3.0, -1.0, -1.0, 0.0, 2.0, 2.0, 2.0, 5.0]).to(dtype)
    rows = torch.sort(_ties(torch.float32, (3, 6), -4, 5), 1).values.to(dtype)
    values = torch.tensor([-4.0, -3.0, -1.0, 0.0, 1.0, 2.0, 5.0, 6.0, 2.0]).to(dtype)
    if dtype.is_floating_point:
        values = torch.tensor([-INF, -3.0, -1.0, 0.0, 0.5, 2.0, 5.0, INF, NAN]).to(dtype)
    values = values.reshape(3, 3)
    _check(fn, boundaries, rows, values, ops=["aten.searchsorted.Tensor", "aten.bucketize.Tensor"])


def test_searchsorted_sorter_and_mixed_types():
    def fn(boundaries, sorter, values, ints):
        return (
            torch.searchsorted(boundaries, values, sorter=sorter),
            torch.searchsorted(boundaries, values, sorter=sorter, right=True),
            torch.searchsorted(ints, values),  # int boundaries, float values: compared as floats
            torch.bucketize(values, ints, right=True),
        )

    boundaries = torch.tensor([[5.0, -1.0, 2.0, 0.0, 2.0], [1.0, 1.0, 0.0, 3.0, -2.0]])
    sorter = torch.argsort(boundaries, stable=True, dim=1)
    values = torch.tensor([[2.0, -1.0, 2.5], [1.0, 0.0, 4.0]])
    _check(fn, boundaries, sorter, values, torch.tensor([-1, 0, 2, 2, 3]), ops=["aten.searchsorted.Tensor"])


def test_searchsorted_bucketize_scalar():
    def fn(boundaries):
        return (
            torch.bucketize(2, boundaries),
            torch.bucketize(2.5, boundaries, right=True),
            torch.searchsorted(boundaries, 2),
        )

    out = _check(fn, torch.tensor([1.0, 2.0, 2.0, 3.0]), ops=[])
    assert out[0].dim() == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"side": "middle"}, "side can only be 'left' or 'right'"), ({"side": "left", "right": True}, "opposites")],
)
def test_searchsorted_arguments_eager_rejects_raise_its_error(kwargs, message):
    """Only torch's kernel checks ``side``'s value: the lowering declines what it rejects, so the
    call raises eager's error (a ``side="middle"`` once searched as "left" and returned a result).
    Opposite ``side`` and ``right`` are rejected while tracing already."""
    boundaries, values = torch.arange(4.0), torch.tensor([1.0, 2.5])
    with pytest.raises(RuntimeError, match=message):
        torch.searchsorted(boundaries, values, **kwargs)
    with pytest.raises(RuntimeError, match=message):
        torch.compile(lambda b, v: torch.searchsorted(b, v, **kwargs), backend="fxvino")(boundaries, values)
