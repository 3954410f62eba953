"""fxvino's persistent model cache (``model_caching=True``): hits, keys, safety, size cap, CLI.

Every test uses its own temporary ``cache_dir``, never the user's ``~/.cache``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import pytest
import torch

import fxvino
from fxvino.cache import entry, lookup
from fxvino.cache import store as fxcache
from fxvino.cache.store import ModelCache
from fxvino.options import Options
from fxvino.tools.cli import main as cli_main
from fxvino.utils.sizes import parse_size
from harness import python_command


def _mlp(seed: int = 0, width: int = 32) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 8)).eval()


def _run(
    model: torch.nn.Module, x: torch.Tensor, cache_dir: Path, dynamic: bool | None = None, **options
) -> tuple[torch.Tensor, fxvino.Report]:
    """Compile afresh (as a new process would: nothing compiled is left in memory) and call once."""
    fxvino.reset()
    opts = {"model_caching": True, "cache_dir": str(cache_dir), **options}
    compiled = torch.compile(model, backend="fxvino", options=opts, dynamic=dynamic)
    with fxvino.collect_reports() as report, torch.no_grad():
        out = compiled(x)
    return out, report


def _stats(cache_dir: Path) -> fxcache.CacheStats:
    return fxcache.cache_for(cache_dir).stats


def _entries(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("*.fxvc"))


@pytest.fixture(autouse=True)
def _fresh():
    fxvino.reset()
    yield
    fxvino.reset()


def test_second_compile_hits_and_skips_lowering(tmp_path):
    model, x = _mlp(), torch.randn(4, 16)
    out1, rep1 = _run(model, x, tmp_path)
    assert len(_entries(tmp_path)) == 1
    assert _stats(tmp_path).stores == 1 and _stats(tmp_path).hits == 0
    out2, rep2 = _run(model, x, tmp_path)
    st = _stats(tmp_path)  # reset() made a fresh stats object: this run only
    assert (st.hits, st.misses, st.stores) == (1, 0, 0)
    assert rep2.graphs[0].lowering_seconds == 0.0, "a hit must skip fxvino's lowering"
    assert not rep2.fallbacks
    with torch.no_grad():
        torch.testing.assert_close(out2, model(x))
    torch.testing.assert_close(out1, out2)


def test_a_hit_imports_with_the_run_time_settings_its_graph_asked_for(tmp_path):
    """A tiny graph runs on one unpinned thread (plugin_config.py); a compiled blob does not keep
    those settings, so the entry stores them and a hit imports with them again."""
    model, x = _mlp(), torch.randn(4, 16)
    for run in range(2):
        _, report = _run(model, x, tmp_path)
        assert _stats(tmp_path).hits == run
        compiled = report.graphs[0].ov_partitions[0].compiled
        assert compiled.get_property("INFERENCE_NUM_THREADS") == 1, run
        assert compiled.get_property("ENABLE_CPU_PINNING") is False, run


def test_other_weights_never_hit_the_old_entry(tmp_path):
    x = torch.randn(4, 16)
    a, b = _mlp(seed=0), _mlp(seed=1)
    _run(a, x, tmp_path)
    out_b, _ = _run(b, x, tmp_path)
    assert _stats(tmp_path).hits == 0, "same architecture, other weights: must not hit"
    with torch.no_grad():
        torch.testing.assert_close(out_b, b(x))
    # One changed element is enough to change the key.
    with torch.no_grad():
        b[0].weight[3, 5] += 1.0
    out_b2, _ = _run(b, x, tmp_path)
    assert _stats(tmp_path).hits == 0
    with torch.no_grad():
        torch.testing.assert_close(out_b2, b(x))
    assert len(_entries(tmp_path)) == 3


def test_options_that_change_the_model_change_the_key(tmp_path):
    model, x = _mlp(), torch.randn(4, 16)
    _run(model, x, tmp_path)
    for options in (
        {"precision": "bf16"},
        {"config": {"NUM_STREAMS": "1"}},
        {"disabled_ops": ["aten.relu.default"]},
        {"decompositions": ["aten.addmm.default"]},
    ):
        _run(model, x, tmp_path, **options)
        assert _stats(tmp_path).hits == 0, f"{options} must not reuse the default entry"
    # ... while the cache location and size do not change it.
    _run(model, x, tmp_path, cache_size="1GB")
    assert _stats(tmp_path).hits == 1


def test_input_shape_and_dtype_are_in_the_key(tmp_path):
    model = _mlp()
    _run(model, torch.randn(4, 16), tmp_path)
    _run(model, torch.randn(5, 16), tmp_path)
    assert _stats(tmp_path).hits == 0
    _run(model.double(), torch.randn(4, 16, dtype=torch.float64), tmp_path)
    assert _stats(tmp_path).hits == 0


def test_dynamic_graphs_are_cached_with_their_symbolic_dims(tmp_path):
    model = _mlp()
    hits = []
    for n in (3, 7):
        fxvino.reset()
        compiled = torch.compile(
            model, backend="fxvino", dynamic=True, options={"model_caching": True, "cache_dir": str(tmp_path)}
        )
        with torch.no_grad():
            x = torch.randn(n, 16)
            torch.testing.assert_close(compiled(x), model(x))
        hits.append(_stats(tmp_path).hits)
    assert hits == [0, 1], "the second size must hit the dynamic entry of the first"
    assert len(_entries(tmp_path)) == 1


def _corrupt_middle(path: Path) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) - len(data) // 3
    data[i : i + 64] = bytes((b ^ 0xFF) for b in data[i : i + 64])
    path.write_bytes(bytes(data))


def test_damaged_entry_is_detected_removed_and_rebuilt(tmp_path, caplog):
    model, x = _mlp(), torch.randn(4, 16)
    _run(model, x, tmp_path)
    (entry,) = _entries(tmp_path)
    _corrupt_middle(entry)
    with caplog.at_level(logging.WARNING, logger="fxvino"):
        out, report = _run(model, x, tmp_path)
    st = _stats(tmp_path)
    assert (st.corrupt, st.hits, st.stores) == (1, 0, 1), st
    assert any("unusable" in r.getMessage() for r in caplog.records), "the bad entry must be reported"
    assert not report.fallbacks
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))
    # Rebuilt: the next run hits the new entry.
    _run(model, x, tmp_path)
    assert _stats(tmp_path).hits == 1


_WRITER = textwrap.dedent(
    """
    import sys, time, torch, fxvino
    from fxvino.cache import store as cache
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8)).eval()
    x = torch.randn(4, 16)
    start = float(sys.argv[2])
    while time.time() < start:  # both writers start compiling at the same moment
        time.sleep(0.005)
    # dynamic=False: Dynamo's automatic-dynamic profile (kept on disk across processes) must
    # not turn this into a dynamic graph in one process and a static one in another.
    c = torch.compile(model, backend="fxvino", dynamic=False, options={"model_caching": True, "cache_dir": sys.argv[1]})
    with torch.no_grad():
        torch.testing.assert_close(c(x), model(x))
    st = cache.cache_for(sys.argv[1]).stats
    print("STATS", st.stores, st.hits)
    """
)


def test_two_processes_writing_the_same_key_leave_a_valid_entry(tmp_path):
    import time

    script = tmp_path / "writer.py"
    script.write_text(_WRITER)
    cache_dir = tmp_path / "cache"
    python = python_command()
    # Both processes have imported torch by then (emulated, the import takes about 40 s).
    start = time.time() + (8.0 if python == [sys.executable] else 90.0)
    procs = [
        subprocess.Popen([*python, str(script), str(cache_dir), str(start)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert [line for o in outs for line in o.splitlines() if line.startswith("STATS")]
    entries = _entries(cache_dir)
    assert len(entries) == 1, entries
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(entry.TMP_PREFIX)], "temporary files left"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8)).eval()
    x = torch.randn(4, 16)
    out, _ = _run(model, x, cache_dir, dynamic=False)
    st = _stats(cache_dir)
    assert (st.hits, st.corrupt) == (1, 0), st
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))


def _tiny_compiled(scale: float, n: int = 64 * 1024) -> ov.CompiledModel:
    p = ops.parameter([n], ov.Type.f32)
    w = ops.constant(np.full([n], scale, dtype=np.float32))
    return ov.Core().compile_model(ov.Model([ops.multiply(p, w)], [p]), "CPU")


_SPECS = {"inputs": [{"kind": "tensor", "position": 0}], "outputs": [], "runtime_positions": [0]}


def test_size_cap_evicts_least_recently_used(tmp_path):
    cache = ModelCache(tmp_path)
    blobs = {k: _tiny_compiled(float(i + 1)) for i, k in enumerate("abcd")}
    assert cache.store("a", blobs["a"], _SPECS, cap=None)
    one = cache.entries()[0][1]
    cap = 3 * one + one // 2  # room for three entries
    assert cache.store("b", blobs["b"], _SPECS, cap=cap)
    assert cache.store("c", blobs["c"], _SPECS, cap=cap)
    for i, key in enumerate("abc"):  # distinct, ordered last-use times
        os.utime(cache.path(key), (1000 + i, 1000 + i))
    assert cache.load("a", "CPU", {}) is not None  # "a" becomes the most recently used
    assert cache.store("d", blobs["d"], _SPECS, cap=cap)
    assert sorted(p.stem for p, _, _ in cache.entries()) == ["a", "c", "d"], "b was the least recently used"
    assert cache.stats.evicted == 1
    assert sum(size for _, size, _ in cache.entries()) <= cap
    # An entry bigger than the cap is not stored (and evicts nothing).
    assert not cache.store("e", blobs["a"], _SPECS, cap=one // 2)
    assert len(cache.entries()) == 3


def test_loaded_entry_computes_the_stored_model(tmp_path):
    cache = ModelCache(tmp_path)
    cache.store("k", _tiny_compiled(3.0), _SPECS, cap=None)
    hit = cache.load("k", "CPU", {})
    assert hit is not None and hit.inputs[0].position == 0
    x = np.arange(64 * 1024, dtype=np.float32)
    out = hit.compiled.create_infer_request().infer([x])[0]
    np.testing.assert_array_equal(out, 3.0 * x)


@pytest.mark.parametrize(
    "damage",
    [
        _corrupt_middle,
        lambda p: os.truncate(p, p.stat().st_size - 1),
        lambda p: os.truncate(p, 10),
        lambda p: p.write_bytes(b"not an entry"),
        lambda p: p.write_bytes(p.read_bytes() + b"trailing"),
        lambda p: p.write_bytes(p.read_bytes()[:30] + b"#" + p.read_bytes()[31:]),
    ],
    ids=["flipped-bytes", "truncated-blob", "truncated-header", "garbage", "extended", "bad-metadata"],
)
def test_every_kind_of_damage_is_a_reported_miss(tmp_path, caplog, damage):
    cache = ModelCache(tmp_path)
    cache.store("k", _tiny_compiled(2.0), _SPECS, cap=None)
    damage(cache.path("k"))
    with caplog.at_level(logging.WARNING, logger="fxvino"):
        assert cache.load("k", "CPU", {}) is None
    assert (cache.stats.corrupt, cache.stats.hits) == (1, 0)
    assert not cache.path("k").exists(), "a bad entry is removed"
    assert any("unusable" in r.getMessage() for r in caplog.records)


def test_entry_under_another_key_is_not_used(tmp_path):
    cache = ModelCache(tmp_path)
    cache.store("k1", _tiny_compiled(2.0), _SPECS, cap=None)
    os.replace(cache.path("k1"), cache.path("k2"))  # e.g. a renamed or colliding file name
    assert cache.load("k2", "CPU", {}) is None
    assert cache.stats.corrupt == 1


@pytest.mark.parametrize(
    "value, expected",
    [(1000, 1000), ("2GB", 2 * 10**9), ("500 MiB", 500 * 2**20), ("1.5GiB", int(1.5 * 2**30)), (None, None)],
)
def test_cache_size_accepts_bytes_and_units(value, expected):
    assert parse_size(value) == expected
    assert Options.parse({"cache_size": value}).cache_size == expected


@pytest.mark.parametrize("value", ["lots", "2XB", "-1GB", 0, -5, True, 1.5, "GB"])
def test_cache_size_rejects_bad_values_naming_the_valid_forms(value):
    with pytest.raises(ValueError, match="cache_size"):
        Options.parse({"cache_size": value})


def test_default_cache_size_is_capped():
    assert Options.parse({}).cache_size is not None


def test_cli_cache_info_and_clear(tmp_path, capsys):
    model, x = _mlp(), torch.randn(4, 16)
    _run(model, x, tmp_path)
    (tmp_path / (entry.TMP_PREFIX + "debris.fxvc")).write_bytes(b"x")
    assert cli_main(["cache", "info", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path) in out and "entries     1" in out
    assert cli_main(["cache", "clear", "--dir", str(tmp_path)]) == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
    assert cli_main(["cache", "info", "--dir", str(tmp_path)]) == 0
    assert "entries     0" in capsys.readouterr().out


def test_unwritable_cache_dir_still_compiles(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    model, x = _mlp(), torch.randn(4, 16)
    with caplog.at_level(logging.WARNING, logger="fxvino"):
        out, report = _run(model, x, blocker / "cache")
    assert not report.fallbacks
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))
    assert any("could not write cache entry" in r.getMessage() for r in caplog.records)


# ---- cost: stamps that spare the crc32 pass, the recorded compile time, graphs set aside ------


def _xattrs_work(directory: Path) -> bool:
    probe = directory / "xattr-probe"
    probe.write_bytes(b"x")
    try:
        os.setxattr(probe, "user.fxvino.probe", b"1")
        return True
    except (OSError, AttributeError):
        return False
    finally:
        probe.unlink()


def _count_crc(monkeypatch) -> list[int]:
    """Count full crc32 passes over blobs (the metadata's small crc is zlib's, not counted)."""
    calls: list[int] = []
    real = entry.crc32

    def counting(buf, cancel=None):
        calls.append(len(memoryview(buf).cast("B")))
        return real(buf, cancel)

    monkeypatch.setattr(entry, "crc32", counting)
    return calls


def test_a_stamped_unchanged_entry_is_not_checked_again(tmp_path, monkeypatch):
    if not _xattrs_work(tmp_path):
        pytest.skip("no user extended attributes on this file system: every hit checks its crc32")
    cache = ModelCache(tmp_path)
    assert cache.store("k", _tiny_compiled(3.0), _SPECS, cap=None)
    cache.settle()  # the writer stamps once the bytes are on disk
    calls = _count_crc(monkeypatch)
    x = np.arange(64 * 1024, dtype=np.float32)
    for n in (1, 2):  # the hit touches the file (LRU) and stamps it again for its new mtime
        hit = cache.load("k", "CPU", {})
        assert hit is not None and calls == [], "an entry unchanged since its bytes were checked needs no crc32 pass"
        assert cache.stats.crc_skipped == n
        np.testing.assert_array_equal(hit.compiled.create_infer_request().infer([x])[0], 3.0 * x)


def test_an_unstamped_entry_is_checked_once_then_stamped(tmp_path, monkeypatch):
    if not _xattrs_work(tmp_path):
        pytest.skip("no user extended attributes on this file system")
    cache = ModelCache(tmp_path)
    assert cache.store("k", _tiny_compiled(3.0), _SPECS, cap=None)
    cache.settle()
    os.removexattr(cache.path("k"), entry.STAMP_ATTR)  # e.g. its writer exited before the fsync
    calls = _count_crc(monkeypatch)
    assert cache.load("k", "CPU", {}) is not None and len(calls) == 1
    cache.settle()  # the reader stamps after its own fsync
    assert cache.load("k", "CPU", {}) is not None and len(calls) == 1
    assert cache.stats.crc_skipped == 1


def _copy_over_keeping_stat(path: Path) -> None:
    """Corrupt a copy (same size, and copy2 keeps mtime and extended attributes, the stamp
    included), then rename it over the entry: only the inode differs."""
    import shutil

    copy = path.with_name("copy")
    shutil.copy2(path, copy)
    _corrupt_middle(copy)
    st = path.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(copy, path)


@pytest.mark.parametrize(
    "damage",
    [
        _corrupt_middle,
        lambda p: os.truncate(p, p.stat().st_size - 1),
        lambda p: p.write_bytes(p.read_bytes() + b"trailing"),
        _copy_over_keeping_stat,
    ],
    ids=["flipped-bytes", "truncated-blob", "extended", "stamped-copy-same-size-and-mtime"],
)
def test_a_stamp_never_vouches_for_changed_bytes(tmp_path, caplog, monkeypatch, damage):
    if not _xattrs_work(tmp_path):
        pytest.skip("no user extended attributes on this file system")
    cache = ModelCache(tmp_path)
    cache.store("k", _tiny_compiled(2.0), _SPECS, cap=None)
    cache.settle()
    assert os.getxattr(cache.path("k"), entry.STAMP_ATTR), "the writer stamps its entry"
    damage(cache.path("k"))
    calls = _count_crc(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="fxvino"):
        assert cache.load("k", "CPU", {}) is None
    assert (cache.stats.corrupt, cache.stats.hits, cache.stats.crc_skipped) == (1, 0, 0)
    if "truncated" not in caplog.text and "extended" not in caplog.text:
        assert calls, "the bytes were checked again (the crc32 pass is what found the damage)"


def test_entries_record_their_compile_time_and_hits_report_theirs(tmp_path):
    model, x = _mlp(), torch.randn(4, 16)
    _run(model, x, tmp_path)
    (entry,) = _entries(tmp_path)
    meta = ModelCache(tmp_path).read(entry).meta
    assert meta["compile_seconds"] > 0, "the lowering + compile seconds are part of the entry"
    _run(model, x, tmp_path)
    st = _stats(tmp_path)
    assert st.hits == 1 and st.import_seconds > 0 and st.verify_seconds > 0


@pytest.mark.parametrize(
    "hit, compiled, aside",
    [(31.5, 9.8, True), (10.5, 9.8, False), (0.4, 0.01, False), (0.02, 0.5, False), (2.0, 1.0, True)],
)
def test_a_hit_is_slower_than_compiling_only_beyond_noise(hit, compiled, aside):
    assert lookup.slower_than_compiling(hit, compiled) is aside


def test_a_graph_whose_hits_lose_to_compiling_twice_is_set_aside(tmp_path, monkeypatch, capsys, caplog):
    model, x = _mlp(), torch.randn(4, 16)
    _run(model, x, tmp_path)
    monkeypatch.setattr(lookup, "slower_than_compiling", lambda hit, compiled: True)
    _run(model, x, tmp_path)
    st = _stats(tmp_path)
    assert (st.hits, st.slow_hits, st.set_aside) == (1, 1, 0), "one slow hit is a strike, not a decision"
    assert len(_entries(tmp_path)) == 1
    with caplog.at_level(logging.WARNING, logger="fxvino"):
        out, _ = _run(model, x, tmp_path)
    st = _stats(tmp_path)
    assert (st.hits, st.slow_hits, st.set_aside) == (1, 1, 1), "the hit is used, then its graph is set aside"
    assert any("without the cache from now on" in r.getMessage() for r in caplog.records)
    assert _entries(tmp_path) == [], "entries of a graph set aside are removed: nothing will read them"

    import fxvino.cache.key

    def no_hashing(*args, **kwargs):
        raise AssertionError("a graph set aside must not hash its weights")

    monkeypatch.setattr(fxvino.cache.key, "weights_key", no_hashing)
    out, report = _run(model, x, tmp_path)
    st = _stats(tmp_path)
    assert (st.aside, st.hits, st.misses, st.stores) == (1, 0, 0, 0), st
    assert not report.fallbacks and report.graphs[0].lowering_seconds > 0
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))
    assert _entries(tmp_path) == [], "a graph set aside is not stored again"

    assert cli_main(["cache", "info", "--dir", str(tmp_path)]) == 0
    out_text = capsys.readouterr().out
    assert "set aside   1 graph(s)" in out_text and "compile" in out_text
    assert cli_main(["cache", "clear", "--dir", str(tmp_path)]) == 0
    assert "forgot 1 graph(s) set aside" in capsys.readouterr().out
    monkeypatch.undo()
    _run(model, x, tmp_path)
    assert _stats(tmp_path).stores == 1, "after `fxvino cache clear` the graph is cached again"


def test_a_hit_that_pays_off_clears_an_earlier_strike(tmp_path, monkeypatch):
    model, x = _mlp(), torch.randn(4, 16)
    _run(model, x, tmp_path)
    with monkeypatch.context() as m:
        m.setattr(lookup, "slower_than_compiling", lambda hit, compiled: True)
        _run(model, x, tmp_path)  # e.g. the first hit after a reboot, reading the blob from disk
    assert len(list(tmp_path.glob("*" + fxcache.ASIDE_SUFFIX))) == 1
    with monkeypatch.context() as m:
        m.setattr(lookup, "slower_than_compiling", lambda hit, compiled: False)
        _run(model, x, tmp_path)
    assert list(tmp_path.glob("*" + fxcache.ASIDE_SUFFIX)) == [], "strikes count only in a row"
    with monkeypatch.context() as m:
        m.setattr(lookup, "slower_than_compiling", lambda hit, compiled: True)
        _run(model, x, tmp_path)
    st = _stats(tmp_path)
    assert (st.hits, st.set_aside) == (1, 0) and len(_entries(tmp_path)) == 1


def test_weights_are_fingerprinted_with_blake3_whatever_the_threading():
    """The key's weights part is BLAKE3 (cryptographic, 256 bits) of dtype, shape and bytes, and
    does not depend on how the work was split between threads."""
    import blake3

    from fxvino.cache import key as cache_key

    torch.manual_seed(0)
    big = torch.randn(17 << 20)  # 68 MB: hashed with BLAKE3's own threads when alone
    small = [torch.randn(1000, 1000), torch.randn(3, 5).t()]  # non-contiguous: hashed in C order

    def expected(t):
        h = blake3.blake3(f"{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.contiguous().numpy().tobytes())
        return h.hexdigest()

    assert cache_key.fingerprint_tensors([big]) == [expected(big)]
    assert cache_key.fingerprint_tensors([big, *small]) == [expected(t) for t in (big, *small)]  # two threads
    assert cache_key.fingerprint_tensors(small) == [expected(t) for t in small]  # one thread
    assert cache_key._versions()["weights_hash"] == "blake3", "the hash is part of the key"
