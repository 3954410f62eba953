"""Sliding-window attention (Longformer): chunking through as_strided of views, -inf masks, padding.

Before as_strided read through its view chain, the as_strided of non-contiguous views ran in
PyTorch on OpenVINO's contiguous copies of those views and read the wrong elements: the output
was off by up to 1e-2 on values up to 4.
"""

from __future__ import annotations

import torch

from harness import assert_all_on_openvino, run_fxvino


def test_longformer_matches_eager_fully_on_openvino():
    from transformers import LongformerConfig, LongformerModel

    cfg = LongformerConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        attention_window=32,
        max_position_embeddings=200,
        vocab_size=500,
    )
    torch.manual_seed(0)
    model = LongformerModel(cfg).eval()
    ids = torch.randint(0, 500, (1, 128))
    with torch.no_grad():
        expected = model(ids).last_hidden_state
    out, report = run_fxvino(lambda i: model(i).last_hidden_state, ids)
    err = (out - expected).abs().max().item() / expected.abs().max().item()
    assert err <= 1e-5, err
    assert_all_on_openvino(report, partitions=None)
    assert report.ov_ops["aten.as_strided.default"] >= 4, str(report)
