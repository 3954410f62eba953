"""Attention in training graphs: PyTorch's CPU flash op with its logsumexp and its backward, and
SDPA with dropout (the math path with native_dropout), forward and backward on OpenVINO."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from train_loop import TRAINING

import fxvino
from harness import assert_all_on_openvino


def _sdpa(q, k, v, mask=None, causal=False, dropout_p=0.0):
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout_p, enable_gqa=True
    )


def _mask(kind: str):
    if kind == "float":
        return torch.randn(2, 1, 8, 8)
    if kind == "bool":
        return torch.rand(8, 8) > 0.3
    if kind == "all-masked rows":  # PyTorch gives these rows 0 and zero gradients
        return torch.zeros(2, 1, 8, 8).masked_fill(torch.arange(8)[:, None] < 2, float("-inf"))
    return None


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize(
    ("mask", "causal"), [(None, False), (None, True), ("float", False), ("bool", False), ("all-masked rows", False)]
)
def test_attention_gradients_match_eager(kv_heads, mask, causal):
    torch.manual_seed(0)
    q = torch.randn(2, 4, 8, 16, requires_grad=True)
    k, v = (torch.randn(2, kv_heads, 8, 16, requires_grad=True) for _ in range(2))
    m, g = _mask(mask), torch.randn(2, 4, 8, 16)
    compiled = torch.compile(_sdpa, backend="fxvino", options=TRAINING)
    with fxvino.collect_reports() as report:
        out = compiled(q, k, v, m, causal)
        (out * g).sum().backward()
    grads = [t.grad for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ref = _sdpa(q, k, v, m, causal)
    (ref * g).sum().backward()
    torch.testing.assert_close(out, ref)
    for ours, t in zip(grads, (q, k, v), strict=True):
        torch.testing.assert_close(ours, t.grad)
    assert {g.kind for g in report.graphs} == {"forward", "backward"}
    assert_all_on_openvino(report, partitions=2)


def test_logsumexp_matches_pytorch():
    """The forward's second output, which a backward in PyTorch would read, is PyTorch's."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 16) for _ in range(3))
    mask = _mask("all-masked rows")

    def flash(q, k, v, mask):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask)

    with fxvino.collect_reports() as report:
        out, lse = torch.compile(flash, backend="fxvino")(q, k, v, mask)
    ref_out, ref_lse = flash(q, k, v, mask)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(lse, ref_lse)
    assert_all_on_openvino(report)


def test_dropout_backward_uses_the_forward_mask():
    """With v = I the output is the dropped attention matrix A itself, and dL/dv = A^T dL/dO:
    the backward reproduces the forward's A only if it used the same dropout mask."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 2, 16, 16), torch.randn(2, 2, 16, 16)
    v = torch.eye(16).expand(2, 2, 16, 16).clone().requires_grad_()
    g = torch.randn(2, 2, 16, 16)
    compiled = torch.compile(_sdpa, backend="fxvino", options=TRAINING)
    with fxvino.collect_reports() as report:
        attn = compiled(q, k, v, dropout_p=0.3)
        (attn * g).sum().backward()
    torch.testing.assert_close(v.grad, attn.detach().transpose(-1, -2) @ g)
    assert_all_on_openvino(report, partitions=2)
    # The same call without dropout: kept entries are P / (1 - p), dropped ones 0.
    p = _sdpa(q, k, v.detach())
    kept = attn.detach() != 0
    torch.testing.assert_close(attn.detach()[kept], (p / 0.7)[kept])


def test_dropout_statistics():
    """Dropped fraction near p, fresh masks per call, reproducible under torch.manual_seed."""
    q, k = torch.zeros(4, 4, 64, 16), torch.zeros(4, 4, 64, 16)
    v = torch.eye(64, 16).expand(4, 4, 64, 16).clone().requires_grad_()
    compiled = torch.compile(_sdpa, backend="fxvino", options=TRAINING)
    torch.manual_seed(5)
    first = compiled(q, k, v, dropout_p=0.25)
    second = compiled(q, k, v, dropout_p=0.25)
    torch.manual_seed(5)
    again = compiled(q, k, v, dropout_p=0.25)
    # Uniform attention (1/64 per key): each output element sums 1 kept key over 1 - p, or 0.
    kept = (first.detach() != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.02, kept  # 16384 Bernoulli draws: sd 0.0034
    torch.testing.assert_close(first.detach()[first != 0], torch.full_like(first.detach(), 1 / 64 / 0.75)[first != 0])
    assert not torch.equal(first, second)
    torch.testing.assert_close(first, again, rtol=0, atol=0)


def test_attention_gradients_with_symbolic_sizes():
    """dynamic=True: batch, heads and lengths symbolic (grouped heads folded in the graph)."""
    compiled = torch.compile(_sdpa, backend="fxvino", options=TRAINING, dynamic=True)
    with fxvino.collect_reports() as report:
        for length, keys in ((6, 9), (5, 11)):
            torch.manual_seed(length)
            q = torch.randn(2, 4, length, 16, requires_grad=True)
            k, v = (torch.randn(2, 2, keys, 16, requires_grad=True) for _ in range(2))
            mask, g = torch.randn(2, 1, length, keys), torch.randn(2, 4, length, 16)
            out = compiled(q, k, v, mask)
            (out * g).sum().backward()
            grads = [t.grad for t in (q, k, v)]
            for t in (q, k, v):
                t.grad = None
            ref = _sdpa(q, k, v, mask)
            (ref * g).sum().backward()
            torch.testing.assert_close(out, ref)
            for ours, t in zip(grads, (q, k, v), strict=True):
                torch.testing.assert_close(ours, t.grad)
    assert {g.kind for g in report.graphs} == {"forward", "backward"}
    assert_all_on_openvino(report, partitions=2)
