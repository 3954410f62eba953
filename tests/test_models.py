"""The four reference models run entirely on OpenVINO and match eager float32."""

from __future__ import annotations

import pytest
import torch

from fxvino.tools import zoo
from harness import assert_all_on_openvino, run_fxvino


def _main_output(out):
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out


@pytest.mark.parametrize("name", ["mlp", "resnet50", "bert", "gpt2"])
def test_model_matches_eager_in_one_openvino_partition(name):
    model, args = zoo.build(name)
    out, report = run_fxvino(model, *args)
    with torch.no_grad():
        ref = model(*args)
    torch.testing.assert_close(_main_output(out), _main_output(ref))
    assert_all_on_openvino(report, partitions=1)
    # Weights were frozen into constants: the inference graph took them out of its inputs.
    assert report.graphs[0].frozen_inputs > 0


def test_gpt2_cache_outputs_match_too():
    model, args = zoo.build("gpt2", seq=16, n_layer=2)
    out, report = run_fxvino(model, *args)
    with torch.no_grad():
        ref = model(*args)
    for layer_out, layer_ref in zip(out.past_key_values.layers, ref.past_key_values.layers, strict=True):
        torch.testing.assert_close(layer_out.keys, layer_ref.keys)
        torch.testing.assert_close(layer_out.values, layer_ref.values)
    assert_all_on_openvino(report)
