"""Test session set-up: two threads (the CI machine's cores), and a fresh Dynamo per test."""

from __future__ import annotations

import os

import pytest
import torch

from fxvino.report import forget_warnings

torch.set_num_threads(min(2, os.cpu_count() or 1))

# The OpInfo conformance suite (tests/conformance) runs its float32 slice with everything else;
# FXVINO_CONFORMANCE=full runs all of it, FXVINO_CONFORMANCE=off leaves it out (a quick local run).
collect_ignore = ["conformance"] if os.environ.get("FXVINO_CONFORMANCE", "").strip().lower() == "off" else []


@pytest.fixture(autouse=True, scope="session")
def _emulated_cpu_is_emulated():
    """``make test-avx2`` runs tests as an AVX2-only CPU, each xdist worker under QEMU: a process
    that says so (FXVINO_EMULATED_CPU=avx2) but sees bf16 kernels runs natively, and its passes
    would prove nothing about the class."""
    if os.environ.get("FXVINO_EMULATED_CPU") == "avx2":
        from harness import cpu_computes_bf16

        if cpu_computes_bf16():
            pytest.exit("FXVINO_EMULATED_CPU=avx2, but this process runs natively (the CPU has bf16 kernels)", 3)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test compiles from scratch: no cache entry or recompile count leaks across tests."""
    torch._dynamo.reset()
    forget_warnings()
    yield
    torch._dynamo.reset()
