"""The benchmark keeps one run per machine class and indexes them (issue 16: a section per class)."""

import json

import pytest
from benchmarks.bench import machine_class, machine_info, microarchitecture, write_index

from fxvino.devices import cpu_features


def test_machine_class_names_vendor_and_isa_tier():
    assert (
        machine_class({"cpu": "Intel(R) Xeon(R) Platinum", "isa": "avx2, avx512f, amx_bf16, amx_tile"}) == "intel-amx"
    )
    amd = {"cpu": "AMD EPYC 9R45", "isa": "avx2, avx_vnni, avx512f, avx512_vnni, avx512_bf16"}
    assert machine_class(amd) == "amd-avx512-vnni-bf16"
    assert machine_class({"cpu": "AMD EPYC", "isa": "avx2"}) == "amd-avx2"
    assert machine_class({"cpu": "", "isa": ""}) == "cpu-avx2"


@pytest.mark.numerics
def test_the_class_is_the_cpu_the_process_sees():
    """Under ``qemu-x86_64 -cpu Haswell`` (``make test-avx2``) ``/proc/cpuinfo`` still names the
    host's AVX-512: an emulated accuracy run was labelled a Zen 5's. The class follows CPUID."""
    machine = machine_info()
    isa = set(machine["isa"].replace(" ", "").split(","))
    assert ("avx512f" in isa) == ("avx512f" in cpu_features()), machine
    assert ("avx512_bf16" in isa) == ("avx512_bf16" in cpu_features()), machine
    if "host_isa" in machine:
        assert machine_class(machine) == "emulated-avx2"


def test_an_emulated_cpu_is_its_own_class():
    machine = {"cpu": "AMD EPYC (zen5)", "uarch": "zen5", "isa": "avx2", "host_isa": "avx2, avx512f, avx512_bf16"}
    assert machine_class(machine) == "emulated-avx2"


def test_machine_class_tells_core_generations_with_the_same_flags_apart():
    """A Zen 4 and a Zen 5 EPYC both list AVX-512 VNNI/BF16, but Zen 4 splits 512-bit work in two
    halves: their OpenVINO timings differ ~2x, so their runs must not share a page."""
    flags = "avx2, avx512f, avx512_vnni, avx512_bf16"
    zen4, zen5 = (microarchitecture("AuthenticAMD", f, m) for f, m in ((0x19, 0x11), (0x1A, 0x02)))
    assert (zen4, zen5) == ("zen4", "zen5")
    assert microarchitecture("AuthenticAMD", 0x19, 0x01) == "zen3"
    assert microarchitecture("GenuineIntel", 6, 0x8F) == "sapphirerapids"
    assert microarchitecture("GenuineIntel", 6, 0x01) is None
    classes = {machine_class({"cpu": f"AMD EPYC ({u})", "uarch": u, "isa": flags}) for u in (zen4, zen5)}
    assert classes == {"amd-zen4-avx512-vnni-bf16", "amd-zen5-avx512-vnni-bf16"}


def test_index_has_one_section_per_class_with_its_ratios(tmp_path):
    for cls, cpu, fx in (("intel-amx", "Intel Xeon", 27.5), ("amd-avx2", "AMD EPYC", 60.0)):
        meta = {"date": "2026-11-24T20:00:00", "rounds": 2, "machine": {"cpu": cpu, "isa": "avx2", "logical_cores": 2}}
        aggregate = [
            {"model": "bert", "backend": "fxvino", "median_ms": fx, "first_call_s": 3.0},
            {"model": "bert", "backend": "native_ov", "median_ms": 30.0},
        ]
        (tmp_path / f"results-{cls}.json").write_text(json.dumps({"meta": meta, "runs": [], "aggregate": aggregate}))
    (tmp_path / "results-quick.json").write_text("not read")
    text = write_index(tmp_path).read_text()
    assert text.count("\n## ") == 2
    assert "[results-intel-amx.md](results-intel-amx.md)" in text
    assert "| bert | 0.92× |" in text and "| bert | 2.00× |" in text


def test_probe_report_breaks_openvinos_part_down(tmp_path):
    """The per-call line a session on another CPU class reads first: OpenVINO's inference as native
    and as fxvino compile it, and the thread-binding costs the plugin pays around each one, measured
    by the real worker on this machine."""
    from benchmarks.bench import main

    out = tmp_path / "probe.md"
    args = ["--models", "probe", "--backends", "eager,native_ov", "--repeats", "1", "--target-seconds", "0.05"]
    assert main([*args, "--quiet-wait", "0", "--max-attempts", "1", "--out", str(out)]) == 0
    aggregate = json.loads(out.with_suffix(".json").read_text())["aggregate"]
    native = next(a for a in aggregate if a["backend"] == "native_ov")
    assert 0 < native["bare_tiny_infer_ms"] < native["median_ms"]
    assert native["affinity_us"]["syscalls"] > 0
    text = out.read_text()
    assert "one thread, no pinning" in text and "one get, two sets" in text
