"""LoRA never stale: after load_lora_weights / set_adapters / fuse_lora / unfuse_lora /
delete_adapters / unload_lora_weights the compiled pipeline's next image equals eager's with the
new weights. An eager twin (same seed, same random weights) receives the same calls."""

from __future__ import annotations

import numpy as np
import pytest
from diffusion_helpers import TOLERANCE, check_report, images

import fxvino
from fxvino.diffusion import random_pipelines as rp

CALL = {"prompt": "a cat", "height": 64, "width": 64}


def _twins(tmp_path, options=None):
    compiled, eager = rp.sd_pipeline(tmp_path / "c"), rp.sd_pipeline(tmp_path / "e")
    fxvino.compile_pipeline(compiled, options=options)
    loras = {name: rp.random_lora(eager, tmp_path / name, seed=seed) for name, seed in (("a", 1), ("b", 2))}
    return compiled, eager, loras


def _same_after(compiled, eager, change) -> fxvino.Report:
    change(compiled)
    change(eager)
    with fxvino.collect_reports() as report:
        got = images(compiled, **CALL)
    expected = images(eager, **CALL)
    assert np.abs(got - expected).max() <= TOLERANCE, np.abs(got - expected).max()
    check_report(report) if report.graphs else None
    return report


def test_fuse_then_unload_is_not_stale(tmp_path):
    """fuse_lora edits the UNet's weights through ``.data``; unload_lora_weights then restores the
    LoRA-free module structure, whose first graph (compiled before the LoRA) is reused by Dynamo:
    its constants are the weights before fusing, and must be refreshed."""
    compiled, eager, loras = _twins(tmp_path)
    _same_after(compiled, eager, lambda p: None)
    _same_after(compiled, eager, lambda p: p.load_lora_weights(loras["a"], adapter_name="a"))
    _same_after(compiled, eager, lambda p: p.fuse_lora(lora_scale=0.8))
    report = _same_after(compiled, eager, lambda p: p.unload_lora_weights())
    assert report.graphs, "the pre-LoRA graph must have been compiled again with the fused weights"


@pytest.mark.heavy
def test_every_lora_operation_gives_eagers_image(tmp_path):
    compiled, eager, loras = _twins(tmp_path)
    for change in (
        lambda p: None,
        lambda p: p.load_lora_weights(loras["a"], adapter_name="a"),
        lambda p: p.load_lora_weights(loras["b"], adapter_name="b"),
        lambda p: p.set_adapters(["a"]),
        lambda p: p.set_adapters(["a", "b"], adapter_weights=[0.5, 1.0]),
        lambda p: p.fuse_lora(lora_scale=0.7),
        lambda p: p.unfuse_lora(),
        lambda p: p.delete_adapters("b"),
        lambda p: p.disable_lora(),
        lambda p: p.enable_lora(),
        lambda p: p.fuse_lora(),
        lambda p: p.unload_lora_weights(),
    ):
        _same_after(compiled, eager, change)


@pytest.mark.heavy
def test_switching_loras_compiles_each_once_and_hits_the_model_cache(tmp_path):
    """Two LoRAs loaded, switched back and forth with set_adapters: once each has been seen no call
    compiles anything (both graphs stay in Dynamo's cache); after fxvino.reset() (as in a new
    process) the recompiles are model-cache hits: no new entry is stored."""
    cache = tmp_path / "cache"
    compiled, eager, loras = _twins(tmp_path, options={"model_caching": True, "cache_dir": str(cache)})
    for name in ("a", "b"):
        _same_after(compiled, eager, lambda p, n=name: p.load_lora_weights(loras[n], adapter_name=n))
    compiles, entries = [], []
    for name in ("a", "b", "a", "b"):
        report = _same_after(compiled, eager, lambda p, n=name: p.set_adapters([n]))
        compiles.append(len(report.graphs))
        entries.append(len(list(cache.glob("*.fxvc"))))
    assert compiles[2:] == [0, 0], f"graphs compiled per switch: {compiles}"
    fxvino.reset()
    for name in ("a", "b"):
        report = _same_after(compiled, eager, lambda p, n=name: p.set_adapters([n]))
        assert report.graphs, "after a reset the graphs are compiled again"
        assert len(list(cache.glob("*.fxvc"))) == entries[-1], "a switch after the reset stored a new entry"
