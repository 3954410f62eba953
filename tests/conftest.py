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


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test compiles from scratch: no cache entry or recompile count leaks across tests."""
    torch._dynamo.reset()
    forget_warnings()
    yield
    torch._dynamo.reset()
