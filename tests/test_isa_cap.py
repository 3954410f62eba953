"""A oneDNN ISA cap (``ONEDNN_MAX_CPU_ISA``) is the CPU class fxvino rounds and compiles for.

OpenVINO's CPU plugin picks its kernels by oneDNN's view of the CPU, which the cap narrows, but
reports ``OPTIMIZATION_CAPABILITIES`` from CPUID. On a CPU with bf16 kernels capped at AVX2,
fxvino took bf16 as computed natively: ``x.to(torch.bfloat16)`` came out truncated (44 of the
352 ``numerics`` tests failed that way), and a bf16 precision failed to compile the products.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from fxvino import devices

# Run in a fresh process: the plugin reads the cap when it loads.
_CAPPED_RUN = r"""
import json, logging, torch, fxvino
from fxvino.devices import cpuid_features, widened_types
warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("fxvino").addHandler(Keep())
x = torch.randn(4096) * torch.logspace(-3, 3, 4096)
cast = lambda t: (t * 3).to(torch.bfloat16)
linear = torch.nn.Linear(64, 32).eval()
inp = torch.randn(8, 64)
with fxvino.collect_reports() as report, torch.no_grad():
    got = torch.compile(cast, backend="fxvino")(x)
    got_bf16 = torch.compile(linear, backend="fxvino", options={"precision": "bf16"})(inp)
print(json.dumps({
    "differ": int((got.float() != cast(x).float()).sum()),
    "bf16_err": float((got_bf16.float() - linear(inp)).abs().max()),
    "widened": sorted(str(t) for t in widened_types("CPU")),
    "fallbacks": len(report.fallbacks),
    "ov_ops": sum(report.ov_ops.values()),
    "warnings": warnings,
    "cpuid": sorted(cpuid_features()),
}))
"""


def _run_capped(cap: str) -> dict:
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": cap}
    env.pop("DNNL_MAX_CPU_ISA", None)
    done = subprocess.run([sys.executable, "-c", _CAPPED_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_cap_at_avx2_rounds_bf16_casts_like_eager_and_compiles_bf16_in_f32():
    """Capped at AVX2, the plugin truncates bf16 outputs and cannot build bf16 products whatever
    CPUID says: fxvino rounds as for an AVX2-only CPU and compiles a bf16 request in f32, and warns
    once that the cap hides this CPU's extensions (where it has any above AVX2)."""
    result = _run_capped("avx2")  # oneDNN takes the level in any case
    assert result["differ"] == 0, result
    assert result["fallbacks"] == 0 and result["ov_ops"] >= 2, result
    assert result["bf16_err"] < 1e-4, result  # computed in f32
    assert result["widened"] == ["torch.bfloat16", "torch.float16"], result
    # The child's CPU as CPUID names it, whatever caps it: under make test-avx2 this process is an
    # emulated Haswell but the child it starts runs natively on the host's AVX-512.
    hides = set(result["cpuid"]) - {"avx2"}
    capped = [w for w in result["warnings"] if "ONEDNN_MAX_CPU_ISA=avx2 hides" in w]
    assert len(capped) == (1 if hides else 0), result["warnings"]
    asked = [w for w in result["warnings"] if "precision 'bf16' was asked for" in w]
    assert len(asked) == 1, result["warnings"]


@pytest.fixture
def isa_env(monkeypatch):
    # oneDNN reads its cap once, when the plugin builds its first kernel: built while a test here
    # sets the variable, it capped every later test of this process (a model cache entry the
    # uncapped children of test_cache.py wrote then failed to import as "corrupt").
    torch.compile(lambda x: x + 1, backend="fxvino")(torch.ones(4))
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        monkeypatch.delenv(name, raising=False)
    devices.widened_types.cache_clear()
    yield monkeypatch
    devices.widened_types.cache_clear()


def test_the_cap_is_read_as_onednn_reads_it(isa_env):
    """``ONEDNN_MAX_CPU_ISA`` before its older name ``DNNL_MAX_CPU_ISA``, in any case; a value oneDNN
    does not know (or ``ALL``) caps nothing."""
    assert devices.onednn_isa_cap() is None
    isa_env.setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE")
    assert devices.onednn_isa_cap() == ("DNNL_MAX_CPU_ISA", frozenset({"avx2", "avx512f"}))
    isa_env.setenv("ONEDNN_MAX_CPU_ISA", "avx512_core_amx")
    amx = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_tile", "vnni"})
    assert devices.onednn_isa_cap() == ("ONEDNN_MAX_CPU_ISA", amx)
    assert not devices.bf16_capped()
    for value in ("ALL", "DEFAULT", "AVX9000"):
        isa_env.setenv("ONEDNN_MAX_CPU_ISA", value)
        assert devices.onednn_isa_cap() is None and not devices.bf16_capped(), value


@pytest.mark.parametrize("cap", ["AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI"])
def test_caps_below_bf16_kernels_widen_bf16_and_narrow_the_features(isa_env, cap):
    isa_env.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert devices.bf16_capped()
    assert torch.bfloat16 in devices.widened_types("CPU")
    assert not devices.cpu_features() & {"avx512_bf16", "amx_tile"}
    if "VNNI" not in cap:  # int8 then adds 16-bit pair sums (quantization/saturation.py)
        assert "vnni" not in devices.cpu_features()
    if cap.startswith("AVX2"):
        assert "avx512f" not in devices.cpu_features()


def test_the_compile_config_follows_the_cap(isa_env):
    """A bf16 precision, or a bf16 model's own wish for one, compiles in f32 under a cap below bf16
    kernels; the user's own ``config`` is passed as given."""
    from fxvino.options import Options

    isa_env.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert Options.parse({"precision": "bf16"}).compile_config()["INFERENCE_PRECISION_HINT"] == "f32"
    wish = {"INFERENCE_PRECISION_HINT": "bf16"}
    assert Options.parse({}).compile_config(wish)["INFERENCE_PRECISION_HINT"] == "f32"
    given = Options.parse({"config": wish}).compile_config()
    assert given["INFERENCE_PRECISION_HINT"] == "bf16"
    isa_env.delenv("ONEDNN_MAX_CPU_ISA")
    assert Options.parse({"precision": "bf16"}).compile_config()["INFERENCE_PRECISION_HINT"] == "bf16"
