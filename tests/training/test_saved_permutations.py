"""Saved permutations of activations (``a.t()`` for a weight gradient, permuted attention heads)
are saved as the tensor under the view, and the backward permutes it (training/aot.py): an OpenVINO
forward would otherwise copy each one out through a Transpose (~220 ms of GPT-2 small's 1.5 s
training forward on 2 AVX2 cores)."""

from __future__ import annotations

import torch
from torch._functorch.aot_autograd import aot_function, make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from train_loop import TRAINING

import fxvino
from fxvino.training import aot as training


def _block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    a = torch.nn.functional.gelu(x @ w1)  # the weight gradient of the next product reads a.t()
    y = a @ w2
    q = y.view(4, 16, 8, 4).permute(0, 2, 1, 3)  # heads
    return (q @ q.transpose(-1, -2)).softmax(-1).square().sum()


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(64, 48, generator=g), torch.randn(48, 96, generator=g), torch.randn(96, 32, generator=g)]


def _partitioned(partition_fn) -> tuple[dict[str, torch.fx.GraphModule], list[torch.Tensor]]:
    graphs: dict[str, torch.fx.GraphModule] = {}

    def keep(kind: str):
        def compiler(gm: torch.fx.GraphModule, example_inputs):
            graphs[kind] = gm
            return make_boxed_func(gm)

        return compiler

    inputs = [t.clone().requires_grad_(i > 0) for i, t in enumerate(_inputs())]
    aot_function(_block, fw_compiler=keep("forward"), bw_compiler=keep("backward"), partition_fn=partition_fn)(
        *inputs
    ).backward()
    return graphs, [t.grad for t in inputs[1:]]


def _saved_permutations(forward: torch.fx.GraphModule) -> list[str]:
    outputs = forward.graph.output_node().args[0]
    return [n.name for n in outputs if isinstance(n, torch.fx.Node) and n.target in training.PERMUTATIONS]


def test_the_backward_permutes_what_the_forward_saved_unpermuted():
    plain, plain_grads = _partitioned(min_cut_rematerialization_partition)
    assert _saved_permutations(plain["forward"]), "the case no longer saves a permutation: it tests nothing"
    ours, grads = _partitioned(training.partition)
    assert not _saved_permutations(ours["forward"])
    entries = {n.name for n in ours["backward"].graph.find_nodes(op="placeholder")}
    permuted = [
        n for n in ours["backward"].graph.nodes if n.target in training.PERMUTATIONS and n.args[0].name in entries
    ]
    assert len(permuted) >= len(_saved_permutations(plain["forward"]))
    inputs = [t.clone().requires_grad_(i > 0) for i, t in enumerate(_inputs())]
    _block(*inputs).backward()
    for got, plain_got, want in zip(grads, plain_grads, [t.grad for t in inputs[1:]], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got, plain_got, rtol=0, atol=0)


def test_compiled_training_step_equals_eager_fully_on_openvino():
    inputs = [t.clone().requires_grad_(i > 0) for i, t in enumerate(_inputs())]
    twins = [t.clone().requires_grad_(i > 0) for i, t in enumerate(_inputs())]
    compiled = torch.compile(_block, backend="fxvino", options=TRAINING)
    with fxvino.collect_reports() as report:
        compiled(*inputs).backward()
    _block(*twins).backward()
    for ours, ref in zip(inputs[1:], twins[1:], strict=True):
        torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-4, atol=1e-5)
    assert [g.kind for g in report.graphs] == ["forward", "backward"], str(report)
    assert not report.fallbacks and not report.torch_ops, str(report)
