"""FFTs and complex tensors on OpenVINO (complex values carried as a trailing dim of 2), vs eager."""

from __future__ import annotations

import pytest
import torch

import fxvino
from harness import assert_all_on_openvino, run_fxvino

F = torch.fft


def _real(*shape):
    torch.manual_seed(0)
    return torch.randn(shape)


def _cplx(*shape):
    torch.manual_seed(1)
    return torch.randn(shape, dtype=torch.complex64)


CASES = {
    "fft": (lambda x: F.fft(x), _real(4, 6)),
    "fft-n-ortho": (lambda x: F.fft(x, n=8, norm="ortho"), _real(4, 6)),
    "fft-complex-dim0": (lambda z: F.fft(z, dim=0, norm="forward"), _cplx(4, 6)),
    "ifft": (lambda x: F.ifft(x), _real(4, 6)),
    "ifft-complex": (lambda z: F.ifft(z, norm="ortho"), _cplx(5, 3)),
    "rfft": (lambda x: F.rfft(x, norm="forward"), _real(4, 6)),
    "rfft-odd": (lambda x: F.rfft(x, n=5), _real(3, 7)),
    "irfft": (lambda z: F.irfft(z), _cplx(4, 6)),
    "irfft-n": (lambda z: F.irfft(z, n=7, norm="ortho"), _cplx(4, 6)),
    "fft2": (lambda x: F.fft2(x), _real(4, 6)),
    "fftn-complex": (lambda z: F.fftn(z), _cplx(2, 3, 4)),
    "ifftn-complex": (lambda z: F.ifftn(z, s=(4, 4), norm="ortho"), _cplx(3, 5)),
    "rfftn": (lambda x: F.rfftn(x), _real(3, 4, 5)),
    "irfftn": (lambda z: F.irfftn(z), _cplx(3, 4, 5)),
    "hfft": (lambda z: F.hfft(z), _cplx(4, 6)),
    "ihfft": (lambda x: F.ihfft(x), _real(4, 6)),
    "hfft2": (lambda z: F.hfft2(z), _cplx(4, 6)),
    "ihfft2": (lambda x: F.ihfft2(x), _real(4, 6)),
    "view_as_real": (lambda z: torch.view_as_real(z) * 2, _cplx(3, 4)),
    "complex": (lambda a: torch.complex(a, a * 2), _real(3, 4)),
    "power-spectrum": (lambda x: torch.view_as_real(F.rfft(x)).pow(2).sum(-1), _real(2, 16)),
    "roundtrip": (lambda x: F.irfft(F.rfft(x), n=x.shape[-1]) - x, _real(3, 10)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fft(name):
    fn, x = CASES[name]
    out, report = run_fxvino(fn, x, fullgraph=True)
    expected = fn(x)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert_all_on_openvino(report)


def test_rfft_dynamic_lengths_compile_once():
    def fn(x):
        return torch.view_as_real(F.rfft(x, norm="ortho")).abs().sum(-1)

    compiled = torch.compile(fn, backend="fxvino", dynamic=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for n in (8, 12, 31, 64):
            x = _real(2, n)
            torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)
    assert len(report.graphs) == 1, str(report)
    assert_all_on_openvino(report)


def test_complex_op_without_a_complex_lowering_stays_in_pytorch():
    def fn(z):
        return torch.exp(F.fft(z))  # exp of a complex tensor has no complex lowering

    z = _cplx(4)
    out, report = run_fxvino(fn, z)
    torch.testing.assert_close(out, fn(z), rtol=1e-4, atol=1e-4)
    reasons = {f.op: f.reason for f in report.fallbacks}
    assert reasons.get("aten.exp.default") == "complex tensors: this op has no complex lowering", str(report)
    assert report.ov_ops["aten._fft_c2c.default"] == 1


def _uniform(*shape, dtype=torch.float32):
    """OpInfo's range: inputs in [-9, 9], where the plugin's plain DFT of odd sizes was far off."""
    torch.manual_seed(2)
    x = torch.rand(shape, dtype=dtype)
    return (x * 18 - 9) if not dtype.is_complex else torch.complex(x.real * 18 - 9, x.imag * 18 - 9)


def _error(out: torch.Tensor, reference: torch.Tensor) -> float:
    if out.is_complex():
        out, reference = torch.view_as_real(out.resolve_conj()), torch.view_as_real(reference.resolve_conj())
    return (out.double() - reference).abs().max().item()


# Sizes that are not powers of two (the plugin's DFT family computes those as plain sums), along
# the last and other dims, mixed with power-of-two axes, and real/Hermitian halves of odd and even n.
PRECISION_CASES = {
    "fft-31": (lambda x: F.fft(x), (31,), False),
    "fft-100-complex": (lambda z: F.fft(z), (4, 100), True),
    "ifft-255-complex": (lambda z: F.ifft(z, norm="forward"), (2, 255), True),
    "fft-dim0-complex": (lambda z: F.fft(z, dim=0), (100, 3), True),
    "fft2-mixed": (lambda x: F.fft2(x, s=(6, 8)), (5, 6, 7), False),
    "fftn-real-all-odd": (lambda x: F.fftn(x), (5, 6, 7), False),
    "rfft-400": (lambda x: F.rfft(x), (3, 400), False),
    "rfft2-odd-last": (lambda x: F.rfft2(x), (4, 8, 45), False),
    "rfft2-odd-other": (lambda x: F.rfft2(x), (4, 45, 8), False),
    "irfft-400": (lambda z: F.irfft(z, n=400), (3, 201), True),
    "irfft-odd": (lambda z: F.irfft(z, n=99), (3, 50), True),
    "irfft2-odd-other": (lambda z: F.irfft2(z, s=(45, 16)), (2, 45, 9), True),
    "hfft2-ortho": (lambda z: F.hfft2(z, norm="ortho"), (5, 6, 7), True),
    "ihfft-odd": (lambda x: F.ihfft(x), (3, 77), False),
}


@pytest.mark.parametrize("name", list(PRECISION_CASES))
def test_fft_is_as_accurate_as_eager(name):
    """Within 8x eager's own error against a float64 reference (the plugin's DFT of 100 points was 130x)."""
    fn, shape, is_complex = PRECISION_CASES[name]
    x = _uniform(*shape, dtype=torch.complex64 if is_complex else torch.float32)
    out, report = run_fxvino(fn, x, fullgraph=True)
    expected, reference = fn(x), fn(x.to(torch.complex128 if is_complex else torch.float64))
    assert out.dtype == expected.dtype and out.shape == expected.shape
    ours, eager = _error(out, reference), _error(expected, reference)
    assert ours <= 8 * eager + 1e-6, (ours, eager)
    assert_all_on_openvino(report)


def test_large_odd_sizes_use_the_plugin_transform():
    """Past MATMUL_LIMIT the twiddle matrix would be too big: the plugin's op runs (less accurate)."""
    x = _real(2, 1001)
    out, report = run_fxvino(lambda x: F.fft(x), x, fullgraph=True)
    torch.testing.assert_close(out, F.fft(x), rtol=1e-3, atol=2e-2)
    assert_all_on_openvino(report)


@pytest.mark.parametrize(
    "fn, x",
    [
        (lambda z: F.ifft(z, norm="ortho"), _cplx(3, 10)),
        (lambda z: F.irfft(z, norm="forward"), _cplx(3, 7)),
        (lambda x: F.rfft(x), _real(3, 10)),
    ],
    ids=["ifft", "irfft", "rfft"],
)
def test_dynamic_batch_static_odd_length(fn, x):
    """A symbolic batch with a static non-power-of-two length: the exact MatMul path with dynamic rows."""
    compiled = torch.compile(fn, backend="fxvino")
    torch._dynamo.mark_dynamic(x, 0)
    with fxvino.collect_reports() as report, torch.no_grad():
        for batch in (3, 5):
            xb = x.repeat(2, *([1] * (x.dim() - 1)))[:batch]
            torch._dynamo.mark_dynamic(xb, 0)
            torch.testing.assert_close(compiled(xb), fn(xb))
    assert len(report.graphs) == 1, str(report)
    assert_all_on_openvino(report)


@pytest.mark.parametrize(
    "fn, make",
    [
        (lambda z: F.ifft(z), lambda n: _cplx(2, n)),
        (lambda z: F.irfft(z, norm="ortho"), lambda n: _cplx(2, n)),
        (lambda z: F.hfft(z), lambda n: _cplx(2, n)),
        (lambda x: F.fft2(x), lambda n: _real(n, 6)),
    ],
    ids=["ifft", "irfft", "hfft", "fft2"],
)
def test_symbolic_lengths(fn, make):
    compiled = torch.compile(fn, backend="fxvino", dynamic=True)
    with fxvino.collect_reports() as report, torch.no_grad():
        for n in (5, 8, 9):
            x = make(n)
            torch.testing.assert_close(compiled(x), fn(x), rtol=1e-4, atol=1e-4)
    assert len(report.graphs) == 1, str(report)
    assert_all_on_openvino(report)
