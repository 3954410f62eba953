"""The serving building blocks without a server: options, compile and fallback, request parsing."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from fxvino.serving import inputs
from fxvino.serving.loading import ServingConfigError, fxvino_options, load_model


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).eval()


def test_fxvino_section_is_validated_with_the_key_and_valid_ones_named():
    assert fxvino_options({"device": "CPU", "mode": "max-autotune", "model_caching": "true"}) == (
        {"device": "CPU", "model_caching": "true"},
        "max-autotune",
    )
    with pytest.raises(ServingConfigError, match=r"unknown key\(s\) \['devices'\].*valid: device"):
        fxvino_options({"devices": "CPU"})
    with pytest.raises(ServingConfigError, match="precision"):
        fxvino_options({"precision": "f64"})
    with pytest.raises(ServingConfigError, match="unknown mode"):
        fxvino_options({"mode": "fastest"})


def test_load_model_compiles_warms_up_and_reports():
    model, x = _mlp(), torch.randn(4, 8)
    loaded = load_model(model, [(torch.randn(1, 8),), (torch.randn(4, 8),)], fxvino={"mode": "max-autotune"})
    assert loaded.serving == "fxvino" and loaded.error is None
    assert loaded.report.num_ov_partitions >= 1 and not loaded.report.torch_ops
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
    described = json.loads(json.dumps(loaded.describe()))
    assert described["ops_on_openvino"] > 0 and described["fallbacks"] == []
    assert "on OpenVINO" in loaded.summary()


@pytest.mark.parametrize(("backend", "inside"), [("fxvino", 1), ("eager", 2)])
def test_inputs_are_prepared_on_one_thread_when_openvino_serves(backend, inside):
    """A request's decoding on PyTorch's threads leaves them spinning on the cores the next
    OpenVINO inference needs: with fxvino serving, it runs on the calling thread alone."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        loaded = load_model(_mlp(), [(torch.randn(1, 8),)], backend=backend)
        with loaded.preparing():
            assert torch.get_num_threads() == inside
        assert torch.get_num_threads() == 2
        with pytest.raises(inputs.BadRequest), loaded.preparing():
            raise inputs.BadRequest("a malformed request")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_a_failing_openvino_compile_still_serves_with_the_fallback_reported():
    model, x = _mlp(), torch.randn(2, 8)
    loaded = load_model(model, [(x,)], fxvino={"config": {"INFERENCE_NUM_THREADS": "many"}})
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
    (fallback,) = loaded.fallbacks
    assert fallback["ran_on"] == "inductor" and "INFERENCE_NUM_THREADS" in fallback["reason"]


def test_a_failing_warm_up_serves_eagerly_and_says_why():
    model = _mlp()
    # A warm-up input of the wrong width fails inside the compiled call (Dynamo raises it).
    loaded = load_model(model, [(torch.randn(2, 5),)])
    assert loaded.serving == "eager" and loaded.error is not None and "5" in loaded.error
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
    assert loaded.fallbacks[-1]["ran_on"] == "eager"


def test_unknown_backend_is_a_configuration_error():
    with pytest.raises(ServingConfigError, match="valid: fxvino, inductor, eager"):
        load_model(_mlp(), [], backend="tvm")


def test_request_parsing_names_what_was_expected():
    assert inputs.body({"body": b'{"data": [1, 2]}'}) == {"data": [1, 2]}
    assert inputs.body({"data": b"\x89PNG"}) == b"\x89PNG"
    with pytest.raises(inputs.BadRequest, match="empty request"):
        inputs.body({})
    t = inputs.tensor_from_json({"data": [[1, 2], [3, 4]]}, (2, 2), torch.float32)
    assert t.dtype == torch.float32 and t.shape == (2, 2)
    with pytest.raises(inputs.BadRequest, match=r"expected shape \[3\], got \[2\]"):
        inputs.tensor_from_json([1, 2], (3,), torch.float32)
    with pytest.raises(inputs.BadRequest, match="rectangular"):
        inputs.tensor_from_json([[1, 2], [3]], None, torch.float32)
    with pytest.raises(inputs.BadRequest, match="expected an image file"):
        inputs.image_tensor(b"\x89PNG truncated", 32)
    with pytest.raises(inputs.BadRequest, match="non-negative integers"):
        inputs.token_ids({"input_ids": [-1]}, None, 8)
    with pytest.raises(inputs.BadRequest, match="no tokenizer"):
        inputs.token_ids("some text", None, 8)
    buf = io.BytesIO()
    np.save(buf, np.arange(6, dtype=np.float64).reshape(2, 3))
    npy = buf.getvalue()
    assert inputs.tensor_from_npy(npy, (2, 3), torch.float32).tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(inputs.BadRequest, match=r"expected shape \[3, 2\]"):
        inputs.tensor_from_npy(npy, (3, 2), torch.float32)
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(inputs.BadRequest, match="without pickled objects"):
        inputs.tensor_from_npy(buf.getvalue(), None, torch.float32)
    ids, mask = inputs.pad_batch([[5, 6], [7]], 4)
    assert ids.tolist() == [[5, 6, 0, 0], [7, 0, 0, 0]] and mask.tolist() == [[1, 1, 0, 0], [1, 0, 0, 0]]


def test_image_tensor_resizes_crops_and_normalises():
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (80, 60), (255, 0, 0)).save(buf, format="PNG")
    x = inputs.image_tensor(buf.getvalue(), 48)
    assert x.shape == (3, 48, 48)
    expected = (torch.tensor([1.0, 0.0, 0.0]) - torch.tensor(inputs.IMAGE_MEAN)) / torch.tensor(inputs.IMAGE_STD)
    torch.testing.assert_close(x[:, 10, 10], expected)
