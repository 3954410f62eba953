"""Training through AOTAutograd: forward on OpenVINO, gradients match eager."""

from __future__ import annotations

import copy

import pytest
import torch

import fxvino


@pytest.mark.parametrize("aot_autograd", [False, True])
def test_gradients_match_eager(aot_autograd):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    )
    ref_model = copy.deepcopy(model)
    x = torch.randn(8, 16)
    compiled = torch.compile(model, backend="fxvino", options={"aot_autograd": aot_autograd})
    with fxvino.collect_reports() as report:
        out = compiled(x)
        out.square().sum().backward()
    ref = ref_model(x)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref)
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    kinds = {g.kind: g for g in report.graphs}
    assert kinds["forward"].ov_partitions and not kinds["forward"].fallbacks
    if aot_autograd:
        assert kinds["backward"].ov_partitions and not kinds["backward"].fallbacks, str(report)
    else:
        (fb,) = kinds["backward"].fallbacks
        assert "backward runs in PyTorch" in fb.reason


@torch.library.custom_op("fxvino_test::scaled_grad", mutates_args=())
def _scaled_grad(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A backward OpenVINO cannot know: a custom op of the user's own library."""
    return grad * torch.cos(x)


@_scaled_grad.register_fake
def _(grad, x):
    return torch.empty_like(grad)


class _Sin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _scaled_grad(grad, x)


def _custom_backward(x, w):
    return _Sin.apply(x @ w).square().sum()


def _grid_sample(x, grid):
    return torch.nn.functional.grid_sample(x, grid, align_corners=False).square().sum()


@pytest.mark.parametrize(
    ("fn", "shapes", "op"),
    [
        (_custom_backward, [(4, 8), (8, 3)], "fxvino_test.scaled_grad.default"),
        (_grid_sample, [(1, 2, 5, 5), (1, 4, 4, 2)], "aten.grid_sampler_2d_backward.default"),
    ],
)
def test_backward_op_without_lowering_runs_in_pytorch(fn, shapes, op):
    """A backward op with no OpenVINO lowering runs in PyTorch, is reported, and the gradients
    are eager's; the rest of the backward stays on OpenVINO."""
    torch.manual_seed(0)
    args = [torch.rand(s) * 2 - 1 for s in shapes]
    ours = [a.clone().requires_grad_() for a in args]
    ref = [a.clone().requires_grad_() for a in args]
    with fxvino.collect_reports() as report:
        loss = torch.compile(fn, backend="fxvino", options={"aot_autograd": True})(*ours)
        loss.backward()
    fn(*ref).backward()
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    (backward,) = [g for g in report.graphs if g.kind == "backward"]
    assert dict(backward.torch_ops) == {op: 1}, str(report)
    assert [f.reason for f in backward.fallbacks] == ["no OpenVINO lowering"], str(report)
    assert backward.ov_partitions, str(report)
