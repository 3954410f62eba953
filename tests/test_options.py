"""The options contract: what is accepted, what is refused, and how errors read."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from fxvino.options import MODE_CONFIG, Options, default_cache_dir
from harness import run_fxvino

aten = torch.ops.aten


def test_defaults_keep_float32_on_cpu():
    opts = Options.parse(None)
    assert opts.device == "CPU"
    cfg = opts.compile_config()
    # The CPU plugin would pick bf16 on AMX machines; we must say f32 explicitly.
    assert cfg["INFERENCE_PRECISION_HINT"] == "f32"
    assert cfg["PERFORMANCE_HINT"] == "LATENCY"
    assert "CACHE_DIR" not in cfg


def test_unknown_key_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown option 'devcie'; valid: device, aot_autograd"):
        Options.parse({"devcie": "CPU"})


def test_unknown_device_lists_available_devices():
    with pytest.raises(ValueError, match=r"no device 'NPU7'.*available devices: CPU"):
        Options.parse({"device": "NPU7"})


def test_virtual_devices_are_checked_by_their_members():
    assert Options.parse({"device": "AUTO:CPU"}).device == "AUTO:CPU"
    with pytest.raises(ValueError, match="no device 'GPU9'"):
        Options.parse({"device": "HETERO:GPU9,CPU"})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("device", 3, "option 'device' must be str"),
        ("aot_autograd", "maybe", "option 'aot_autograd' must be a bool"),
        ("model_caching", 2, "option 'model_caching' must be a bool"),
        ("share_weights", "sometimes", r"option 'share_weights' got 'sometimes'; valid: True, False, 'auto'"),
        ("cache_dir", 5, "option 'cache_dir' must be str or PathLike"),
        ("config", ["x"], "option 'config' must be a dict"),
        ("precision", "int4", r"option 'precision' got 'int4'; valid: f32, bf16, f16"),
        ("decompositions", "aten.nonexistent_op", "is not an aten operator"),
        ("disabled_ops", 42, "must be a list of aten ops"),
    ],
)
def test_wrong_values_raise_naming_the_key(key, value, message):
    with pytest.raises(ValueError, match=message):
        Options.parse({key: value})


@pytest.mark.parametrize(("value", "parsed"), [(None, "auto"), ("AUTO", "auto"), (True, True), ("false", False)])
def test_share_weights_is_auto_unless_set(value, parsed):
    assert Options.parse({} if value is None else {"share_weights": value}).share_weights == parsed


def test_unknown_mode_raises():
    with pytest.raises(ValueError, match=r"unknown mode 'turbo'; valid: default, reduce-overhead, max-autotune"):
        Options.parse(None, mode="turbo")


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune"])
def test_modes_map_to_performance_hints(mode):
    cfg = Options.parse(None, mode=mode).compile_config()
    assert cfg["PERFORMANCE_HINT"] == MODE_CONFIG[mode]["PERFORMANCE_HINT"]


def test_ops_accept_objects_packets_and_names():
    opts = Options.parse(
        {
            "disabled_ops": [aten.relu.default, "torch.ops.aten.gelu.default", "aten::tanh"],
            "decompositions": [aten.silu],
        }
    )
    assert aten.relu.default in opts.disabled_ops
    assert aten.gelu.default in opts.disabled_ops
    assert aten.tanh.default in opts.disabled_ops
    assert aten.silu.default in opts.decompositions


def test_string_booleans_as_the_openvino_backend_accepts():
    assert Options.parse({"aot_autograd": "true", "model_caching": "0"}).aot_autograd is True
    assert Options.parse({"model_caching": "False"}).model_caching is False


def test_config_passes_through_and_wins(tmp_path):
    opts = Options.parse(
        {
            "config": {"INFERENCE_PRECISION_HINT": "bf16", "NUM_STREAMS": "2"},
            "model_caching": True,
            "cache_dir": str(tmp_path),
        }
    )
    cfg = opts.compile_config()
    assert cfg["INFERENCE_PRECISION_HINT"] == "bf16"
    assert cfg["NUM_STREAMS"] == "2"
    assert "CACHE_DIR" not in cfg  # model_caching is fxvino's own cache (cache/store.py), not OpenVINO's


def test_precision_option_sets_the_hint():
    assert Options.parse({"precision": "bf16"}).compile_config()["INFERENCE_PRECISION_HINT"] == "bf16"


def test_default_cache_dir_is_per_user_not_cwd(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "fxvino"
    assert Options.parse(None).cache_dir != Path.cwd() / "cache"


def test_legacy_env_vars_work_and_warn(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENVINO_TORCH_BACKEND_DEVICE", "CPU")
    monkeypatch.setenv("OPENVINO_TORCH_MODEL_CACHING", "1")
    monkeypatch.setenv("OPENVINO_TORCH_CACHE_DIR", str(tmp_path))
    with pytest.warns(DeprecationWarning, match="OPENVINO_TORCH_MODEL_CACHING is deprecated"):
        opts = Options.parse(None)
    assert opts.model_caching is True
    assert opts.cache_dir == tmp_path


def test_explicit_options_win_over_env_vars(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENVINO_TORCH_CACHE_DIR", "/nonexistent/legacy")
    with pytest.warns(DeprecationWarning, match="ignored: the option is set explicitly"):
        opts = Options.parse({"cache_dir": str(tmp_path)})
    assert opts.cache_dir == tmp_path


def test_no_warning_without_env_vars(monkeypatch):
    for var in ("OPENVINO_TORCH_BACKEND_DEVICE", "OPENVINO_TORCH_MODEL_CACHING", "OPENVINO_TORCH_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        Options.parse({"device": "CPU"})


def test_bad_option_fails_torch_compile_loudly():
    """A typo must not be silently ignored: the first call raises, naming the key."""
    with pytest.raises(Exception, match="unknown option 'devcie'"):
        run_fxvino(lambda x: x + 1, torch.ones(2), options={"devcie": "CPU"})


def test_mode_reaches_the_backend():
    compiled = torch.compile(lambda x: x * 2, backend="fxvino", mode="max-autotune")
    with torch.no_grad():
        torch.testing.assert_close(compiled(torch.ones(3)), torch.full((3,), 2.0))
