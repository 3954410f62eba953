"""A fast slice of the model suite (benchmarks/models.py): one model per family of ops, in-process.

The whole suite (75 architectures, each in its own process) is ``python -m benchmarks.models``;
these run in CI through the same ``run_one``. Each must match eager (relative error <= 1e-4) and run
fully on OpenVINO (no op in PyTorch, no fallback); the decoder also through ``generate()`` with
eager's tokens. A model failing on a known gap goes in as a strict xfail (``pytest.param(name,
marks=pytest.mark.xfail(strict=True, reason=...))``): when the gap is closed the test fails until its
mark is removed, so the slice never hides a fix or a regression (``rnn`` was one until its LSTM was
lowered).
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
    "unet",  # diffusers: timestep embedding, GroupNorm, cross-attention, nearest upsampling
    "rnn",  # bidirectional 2-layer LSTM (aten.mkldnn_rnn_layer as LSTMSequence) into a GRU
    "graph-break-blocks",  # one graph after a graph break, called by 3 module instances with their own weights
]


@pytest.mark.slow
@pytest.mark.parametrize("name", FAST)
def test_model_suite_slice(name):
    row = models.run_one(name, timing_calls=1)
    if "skipped" in row:
        pytest.skip(row["skipped"])
    assert row["ok"], f"{name}: {models._reason(row)}"
