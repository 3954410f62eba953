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
