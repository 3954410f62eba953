"""Frozen weights mapped from a file leave resident memory once OpenVINO holds its own copy
(weight_pages.py), and nothing of them is lost."""

from __future__ import annotations

import ctypes
import os
import sys
import time

import numpy as np
import pytest
import torch

import fxvino
import fxvino.runtime.weight_pages
from fxvino.options import Options
from fxvino.runtime import weight_pages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_DONTNEED on file pages is Linux's")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


@pytest.fixture
def disk_dir(tmp_path):
    """``tmp_path``, if it lies on a disk file system: a tmpfs file's pages are memory already."""
    best = ("", "")
    with open("/proc/mounts") as f:
        for line in f:
            _, point, kind, *_ = line.split()
            if str(tmp_path).startswith(point.rstrip("/") + "/") and len(point) > len(best[0]):
                best = (point, kind)
    if best[1] in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is on {best[1]}, whose pages the kernel cannot drop without swap")
    return tmp_path


def _resident_fraction(t: torch.Tensor) -> float:
    """Share of the whole pages under ``t`` mapped in this process (the present bit of
    /proc/self/pagemap): what counts in its resident memory."""
    lo, hi = weight_pages._extent(t)
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(lo // weight_pages.PAGE * 8)
        entries = np.frombuffer(f.read((hi - lo) // weight_pages.PAGE * 8), dtype=np.uint64)
    return float(((entries >> np.uint64(63)) & np.uint64(1)).mean())


def _cached_fraction(t: torch.Tensor) -> float:
    """Share of the whole pages under ``t`` in memory, mapped here or only in the page cache (mincore)."""
    lo, hi = weight_pages._extent(t)
    pages = (hi - lo) // weight_pages.PAGE
    vec = (ctypes.c_ubyte * pages)()
    assert _libc.mincore(lo, hi - lo, vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec) / pages


def _mapped_weight(path, values: np.ndarray) -> torch.Tensor:
    """A tensor over a private mapping of a file holding ``values``, as safetensors loads one.
    Written back to disk first: the kernel drops only clean pages, as a checkpoint's are."""
    with open(path, "wb") as f:
        values.tofile(f)
        f.flush()
        os.fsync(f.fileno())
    return torch.from_file(str(path), shared=False, size=values.size, dtype=torch.float32)


def test_maps_lines_name_private_file_mappings_only():
    maps = "\n".join(
        [
            "7f0000000000-7f0000100000 r--p 00000000 08:01 1234 /data/model.safetensors",
            "7f0000200000-7f0000300000 rw-s 00000000 08:01 1235 /dev/shm/shared",
            "7f0000400000-7f0000500000 rw-p 00000000 00:00 0 ",
            "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0 [stack]",
            "55d000000000-55d000100000 rw-p 00000000 00:00 0 [heap]",
            "7f0000600000-7f0000700000 r--p 00000000 08:01 1236 /usr/lib/libc.so.6",
        ]
    )
    assert weight_pages.file_backed_ranges(maps) == [
        (0x7F0000000000, 0x7F0000100000),
        (0x7F0000600000, 0x7F0000700000),
    ]


def test_file_mapped_pages_leave_memory_and_come_back_unchanged_from_the_page_cache(disk_dir):
    values = np.random.default_rng(0).standard_normal(1 << 20, dtype=np.float32)  # 4 MB
    weight = _mapped_weight(disk_dir / "w.bin", values)
    assert float(weight.sum()) == pytest.approx(float(values.sum()), rel=1e-4)  # every page read in
    assert _resident_fraction(weight) > 0.99

    released = weight_pages.release([weight])

    assert released >= weight.numel() * 4 - 2 * weight_pages.PAGE
    assert _resident_fraction(weight) < 0.05
    assert _cached_fraction(weight) > 0.99  # still in the page cache: nothing is read from disk again
    np.testing.assert_array_equal(weight.numpy(), values)


def test_pages_changed_in_place_are_kept(disk_dir):
    values = np.ones(1 << 20, dtype=np.float32)
    weight = _mapped_weight(disk_dir / "w.bin", values)
    weight.sum()
    half = weight.numel() // 2
    weight[:half].mul_(3.0)  # private copies of the first half's pages now: the file still holds ones

    weight_pages.release([weight])

    assert torch.equal(weight[:half], torch.full((half,), 3.0))
    assert torch.equal(weight[half:], torch.ones(weight.numel() - half))
    weight[:half].fill_(1.0)  # the same bytes as the file's, yet private pages: still never released
    weight_pages.release([weight])
    first, second = weight[: half - 1024], weight[half + 1024 :]
    assert _resident_fraction(first) > 0.99
    assert _resident_fraction(second) < 0.05


def test_anonymous_memory_is_not_asked_for():
    weight = torch.randn(1 << 20)
    assert weight_pages.release([weight]) == 0
    assert _resident_fraction(weight) > 0.99


def test_the_rest_of_a_weights_file_mapping_leaves_memory_too(disk_dir):
    """A checkpoint is mapped whole: the pages beside a frozen weight (the float originals of
    weights quantized after loading) go with it, those changed in place stay, and nothing changes."""
    values = np.random.default_rng(2).standard_normal(3 << 20, dtype=np.float32)  # 12 MB
    mapped = _mapped_weight(disk_dir / "checkpoint.bin", values)
    n = mapped.numel() // 3
    weight, other, written = mapped[:n], mapped[n : 2 * n], mapped[2 * n :]
    mapped.sum()
    written.add_(1.0)  # private copies now
    assert min(_resident_fraction(t) for t in (weight, other, written)) > 0.99

    released = weight_pages.release([weight])

    assert weight.numel() * 4 - 2 * weight_pages.PAGE <= released <= weight.numel() * 4  # what it reports: the weight's
    assert _resident_fraction(weight) < 0.05
    assert _resident_fraction(other) < 0.05
    assert _cached_fraction(other) > 0.99  # in the page cache still
    assert _resident_fraction(written[weight_pages.PAGE :]) > 0.99
    np.testing.assert_array_equal(mapped[: 2 * n].numpy(), values[: 2 * n])
    np.testing.assert_array_equal(written.numpy(), values[2 * n :] + 1.0)


def test_groups_share_a_mapping_and_each_counts_its_own_weights(disk_dir):
    values = np.ones(2 << 20, dtype=np.float32)  # 8 MB
    mapped = _mapped_weight(disk_dir / "checkpoint.bin", values)
    mapped.sum()
    half = mapped.numel() // 2
    first, second = mapped[:half], mapped[half:]

    released = weight_pages.release_groups([[first], [second, second], [torch.randn(1 << 20)]])

    assert released[0] >= first.numel() * 4 - 2 * weight_pages.PAGE
    assert released[1] >= second.numel() * 4 - 2 * weight_pages.PAGE  # an alias counted once
    assert released[1] <= second.numel() * 4
    assert released[2] == 0
    assert _resident_fraction(mapped) < 0.05


class _LateThread(weight_pages.threading.Thread):
    """A thread that starts running late, as on a busy machine."""

    def run(self) -> None:
        time.sleep(0.3)
        super().run()


@pytest.mark.parametrize("late", [False, True], ids=["thread-on-time", "thread-late"])
def test_watched_pages_leave_memory_while_a_compile_reads_them_and_when_it_ends(disk_dir, monkeypatch, late):
    """Growth counts from when the weights are watched: a watcher thread that first runs after the
    compile read them (a loaded machine; test flaked under xdist) still releases them."""
    monkeypatch.setattr(weight_pages, "TICK_SECONDS", 0.05)
    monkeypatch.setattr(weight_pages, "GROWTH_BYTES", 1 << 20)
    if late:
        monkeypatch.setattr(weight_pages.threading, "Thread", _LateThread)
    values = np.random.default_rng(1).standard_normal(1 << 21, dtype=np.float32)  # 8 MB
    weight = _mapped_weight(disk_dir / "w.bin", values)

    with weight_pages.compiling():
        weight_pages.watch([weight])
        weight.sum()  # what the plugin does when it packs the weight
        deadline = time.monotonic() + 10
        while _resident_fraction(weight) > 0.05 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _resident_fraction(weight) < 0.05  # released while still compiling
        monkeypatch.setattr(weight_pages, "GROWTH_BYTES", 1 << 40)  # the watcher stops releasing
        weight.sum()
        time.sleep(0.2)
        assert _resident_fraction(weight) > 0.99
    assert _resident_fraction(weight) < 0.05  # released when the compile ends
    np.testing.assert_array_equal(weight.numpy(), values)


def test_weights_watched_outside_a_compile_are_released_at_once(disk_dir):
    weight = _mapped_weight(disk_dir / "w.bin", np.ones(1 << 20, dtype=np.float32))
    weight.sum()
    weight_pages.watch([weight])
    assert _resident_fraction(weight) < 0.05


def _saved_and_loaded_llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    os.sync()  # a checkpoint's pages are clean: the kernel drops no dirty page
    return LlamaForCausalLM.from_pretrained(tmp_path).eval()


@pytest.mark.parametrize(
    ("stored", "loaded", "mapped"),
    [
        (torch.bfloat16, torch.bfloat16, True),
        (torch.float32, torch.float32, True),
        (torch.bfloat16, torch.float32, False),
    ],
)
def test_transformers_maps_a_checkpoint_loaded_in_its_stored_dtype(tmp_path, stored, loaded, mapped):
    """The premise of ``page_out_weights`` (docs/user-guide/options.md): only a load in the stored
    dtype leaves PyTorch's weights file-mapped."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=1, num_attention_heads=4
    )
    LlamaForCausalLM(config).to(stored).save_pretrained(tmp_path)
    weight = LlamaForCausalLM.from_pretrained(tmp_path, dtype=loaded).model.layers[0].mlp.up_proj.weight
    lo, hi = weight_pages._extent(weight)
    assert any(s <= lo and hi <= e for s, e in weight_pages.file_backed_ranges()) == mapped


@pytest.mark.parametrize("page_out", [True, False])
def test_a_model_loaded_from_safetensors_keeps_its_weight_pages_out_of_memory(disk_dir, page_out, monkeypatch):
    model = _saved_and_loaded_llama(disk_dir)
    weight = model.model.layers[0].mlp.up_proj.weight
    lo, hi = weight_pages._extent(weight)
    # The premise: transformers maps the checkpoint instead of copying it.
    assert any(s <= lo and hi <= e for s, e in weight_pages.file_backed_ranges())
    ids = torch.randint(0, 512, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits
    assert _resident_fraction(weight) > 0.99
    after_release = []

    def recorded(groups):
        groups = [list(tensors) for tensors in groups]
        released = real(groups)
        if any(t.data_ptr() == weight.data_ptr() for tensors in groups for t in tensors):  # frozen aliases of it
            after_release.append(_resident_fraction(weight))
        return released

    real = weight_pages.release_groups
    monkeypatch.setattr(fxvino.runtime.weight_pages, "release_groups", recorded)
    compiled = torch.compile(model, backend="fxvino", options={"page_out_weights": page_out})
    with fxvino.collect_reports() as report, torch.no_grad():
        got = compiled(ids).logits
        again = compiled(ids).logits

    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again, expected, rtol=1e-4, atol=1e-4)
    released = sum(p.released_weight_bytes for g in report.graphs for p in g.partitions)
    assert sum(report.ov_ops.values()) > 0 and not report.fallbacks and not report.torch_ops
    if page_out:
        assert released > 2 * (hi - lo)  # every projection's pages, not only this one's
        # Gone once compiled. (At this size the plugin multiplies with the weights where they are,
        # so its next call maps them again; a 1.1B Llama's stay out: docs/user-guide/options.md.)
        assert after_release and after_release[-1] < 0.05
        assert "kept out of resident memory" in str(report)
    else:
        assert released == 0 and not after_release
        assert _resident_fraction(weight) > 0.99
    with torch.no_grad():  # PyTorch still sees the whole weight
        torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=0)


@pytest.mark.parametrize("page_out", [True, False])
def test_the_float_originals_of_weights_quantized_after_loading_leave_memory(disk_dir, page_out):
    """torchao's quantize_ reads a mapped checkpoint's float weights and keeps integers: the
    checkpoint's pages stay resident (the embeddings and norms still map it) until the compile
    releases the mapping of the weights it freezes (a 1.1B int4 Llama: 9.4 -> 4.2 GB after generate)."""
    from torchao.quantization import IntxWeightOnlyConfig, PerGroup, quantize_

    model = _saved_and_loaded_llama(disk_dir)
    original = model.model.layers[0].mlp.up_proj.weight.detach()  # a view of the checkpoint's pages
    lo, hi = weight_pages._extent(original)
    assert any(s <= lo and hi <= e for s, e in weight_pages.file_backed_ranges())
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(64)))
    assert _resident_fraction(original) > 0.99  # read by quantize_, held by the mapping
    ids = torch.randint(0, 512, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits
    options = {"page_out_weights": page_out, "config": {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}}
    compiled = torch.compile(model, backend="fxvino", options=options)
    with fxvino.collect_reports() as report, torch.no_grad():
        got = compiled(ids).logits

    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert sum(report.ov_ops.values()) > 0 and not report.fallbacks and not report.torch_ops
    if page_out:
        assert _resident_fraction(original) < 0.05
        assert _cached_fraction(original) > 0.99
    else:
        assert _resident_fraction(original) > 0.99


@pytest.mark.parametrize("page_out", [True, False])
def test_a_cache_hit_releases_the_blob_pages_it_imported_from(disk_dir, page_out, monkeypatch):
    """With ``model_caching``, a hit maps the stored blob and the plugin packs the weights from it:
    the blob's pages leave resident memory too (SD 1.5's UNet and VAE, warm: 8.6 -> 5.4 GB peak)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 64)).eval()
    x = torch.randn(4, 256)
    options = {"model_caching": True, "cache_dir": str(disk_dir / "cache"), "page_out_weights": page_out}
    blob_after_release = []

    def recorded(groups):
        groups = [list(tensors) for tensors in groups]
        released = real(groups)
        blob_after_release.extend(_resident_fraction(t) for ts in groups for t in ts if t.dtype == torch.uint8)
        return released

    real = weight_pages.release_groups
    monkeypatch.setattr(weight_pages, "release_groups", recorded)
    for run in ("store", "hit"):
        fxvino.reset()
        compiled = torch.compile(model, backend="fxvino", options=options)
        with fxvino.collect_reports() as report, torch.no_grad():
            got = compiled(x)
            torch.testing.assert_close(got, model(x))
        assert not report.fallbacks
        if run == "store":
            assert not blob_after_release  # nothing mapped from the cache yet
    partition = report.graphs[0].partitions[0].partition_ref()
    assert partition.mapping.nbytes > 1 << 20  # the blob holds the 1 MB of weights
    if page_out:
        assert blob_after_release and max(blob_after_release) < 0.05
    else:
        assert not blob_after_release
    fxvino.reset()


@pytest.mark.parametrize(("value", "parsed"), [(None, True), ("false", False), (True, True)])
def test_page_out_weights_is_on_unless_set(value, parsed):
    assert Options.parse({} if value is None else {"page_out_weights": value}).page_out_weights == parsed


def test_page_out_weights_rejects_what_is_not_a_bool():
    with pytest.raises(ValueError, match="option 'page_out_weights' must be a bool"):
        Options.parse({"page_out_weights": "sometimes"})
