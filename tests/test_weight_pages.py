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
import fxvino.partition
from fxvino import weight_pages
from fxvino.options import Options

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_PAGEOUT is Linux's")

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
    """Share of the whole pages under ``t`` that are in this process's memory (mincore)."""
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


def test_file_mapped_pages_leave_memory_and_come_back_unchanged(disk_dir):
    values = np.random.default_rng(0).standard_normal(1 << 20, dtype=np.float32)  # 4 MB
    weight = _mapped_weight(disk_dir / "w.bin", values)
    assert float(weight.sum()) == pytest.approx(float(values.sum()), rel=1e-4)  # every page read in
    assert _resident_fraction(weight) > 0.99

    asked = weight_pages.page_out([weight])

    assert asked >= weight.numel() * 4 - 2 * weight_pages.PAGE
    assert _resident_fraction(weight) < 0.05
    np.testing.assert_array_equal(weight.numpy(), values)  # read back from the file


def test_pages_changed_in_place_are_kept(disk_dir):
    values = np.ones(1 << 20, dtype=np.float32)
    weight = _mapped_weight(disk_dir / "w.bin", values)
    weight.mul_(3.0)  # private copies of every page now: the file still holds ones

    weight_pages.page_out([weight])

    assert _resident_fraction(weight) > 0.99
    assert torch.equal(weight, torch.full_like(weight, 3.0))


def test_anonymous_memory_is_not_asked_for():
    weight = torch.randn(1 << 20)
    assert weight_pages.page_out([weight]) == 0
    assert _resident_fraction(weight) > 0.99


def _saved_and_loaded_llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4
    )
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    os.sync()  # a checkpoint's pages are clean: the kernel drops no dirty page
    return LlamaForCausalLM.from_pretrained(tmp_path).eval()


@pytest.mark.parametrize("page_out", [True, False])
def test_a_model_loaded_from_safetensors_gives_its_weight_pages_back(disk_dir, page_out, monkeypatch):
    model = _saved_and_loaded_llama(disk_dir)
    weight = model.model.layers[0].mlp.up_proj.weight
    lo, hi = weight_pages._extent(weight)
    # The premise: transformers maps the checkpoint instead of copying it.
    assert any(s <= lo and hi <= e for s, e in weight_pages.file_backed_ranges())
    ids = torch.randint(0, 512, (1, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits
    assert _resident_fraction(weight) > 0.99
    weight_pages.flush()  # requests left by other tests' compiles
    after_compile = []

    def recorded(tensors):
        tensors = list(tensors)
        asked = real(tensors)
        if any(t.data_ptr() == weight.data_ptr() for t in tensors):  # frozen aliases of it
            after_compile.append(_resident_fraction(weight))
        return asked

    real = weight_pages.page_out
    monkeypatch.setattr(fxvino.partition.weight_pages, "page_out", recorded)
    compiled = torch.compile(model, backend="fxvino", options={"page_out_weights": page_out})
    with fxvino.collect_reports() as report, torch.no_grad():
        got = compiled(ids).logits
        again = compiled(ids).logits
    assert not after_compile  # asked for only once compiling has been quiet for a while
    weight_pages.flush()  # what the quiet period's timer does

    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again, expected, rtol=1e-4, atol=1e-4)
    paged = sum(p.paged_out_bytes for g in report.graphs for p in g.partitions)
    assert sum(report.ov_ops.values()) > 0 and not report.fallbacks and not report.torch_ops
    if page_out:
        assert paged > 2 * (hi - lo)  # every projection's pages, not only this one's
        # Gone when asked. (At this size the plugin multiplies with the weights where they are,
        # so its next call reads them back; a 1.1B Llama's stay out: README.)
        assert after_compile and after_compile[0] < 0.05
        assert "file-mapped pages given back" in str(report)
    else:
        assert paged == 0 and not after_compile
        assert _resident_fraction(weight) > 0.99
    with torch.no_grad():  # PyTorch still sees the whole weight
        torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=0)


def test_pages_are_asked_for_once_compiling_has_been_quiet(disk_dir, monkeypatch):
    monkeypatch.setattr(weight_pages, "QUIET_SECONDS", 0.3)
    weight_pages.flush()
    values = np.random.default_rng(1).standard_normal(1 << 20, dtype=np.float32)
    weight = _mapped_weight(disk_dir / "w.bin", values)
    weight.sum()

    with weight_pages.compiling():  # a graph compiling now may read the weights again
        weight_pages.page_out_later([weight])
        time.sleep(0.8)
        assert _resident_fraction(weight) > 0.99
    assert _resident_fraction(weight) > 0.99  # the quiet period starts again
    deadline = time.monotonic() + 10
    while _resident_fraction(weight) > 0.05 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _resident_fraction(weight) < 0.05
    np.testing.assert_array_equal(weight.numpy(), values)


@pytest.mark.parametrize(("value", "parsed"), [(None, True), ("false", False), (True, True)])
def test_page_out_weights_is_on_unless_set(value, parsed):
    assert Options.parse({} if value is None else {"page_out_weights": value}).page_out_weights == parsed


def test_page_out_weights_rejects_what_is_not_a_bool():
    with pytest.raises(ValueError, match="option 'page_out_weights' must be a bool"):
        Options.parse({"page_out_weights": "sometimes"})
