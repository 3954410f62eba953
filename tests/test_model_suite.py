"""A fast slice of the model suite (benchmarks/models.py): one model per family of ops, in-process.

The whole suite (50 architectures, each in its own process) is ``python -m benchmarks.models``;
these run in CI. Each must match eager (relative error <= 1e-4) and run fully on OpenVINO; the
decoder also through ``generate()`` with eager's tokens.
"""

from __future__ import annotations

import pytest
from benchmarks import models

FAST = [
    "bert",  # encoder: MHA, GELU, LayerNorm
    "llama",  # decoder: GQA, rotary, RMSNorm, and generate() with a KV cache
    "t5",  # encoder-decoder: relative attention bias, cross-attention
    "longformer",  # sliding-window attention through as_strided of views
    "swin",  # shifted windows (roll), patch merging
    "efficientnet",  # depthwise, squeeze-excite, the ceil-mode pool head
    "cnn-lrn-ceil",  # LocalResponseNorm, ceil-mode pools
    "wav2vec2",  # conv feature encoder, weight-normed positional conv
]


@pytest.mark.slow
@pytest.mark.parametrize("name", FAST)
def test_model_suite_slice(name):
    row = models.run_one(name, timing_calls=1)
    assert row["ok"], f"{name}: {models._reason(row)}"
