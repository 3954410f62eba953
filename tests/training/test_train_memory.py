"""What a training step's compiled graphs keep besides eager's tensors: no folded full-size
constants (a dropout's element counter, an embedding gradient's zero base, ``where(..., 0)``
fillers). BERT-base's forward and backward held 385 MB of them."""

from __future__ import annotations

import copy

import torch
from train_loop import TRAINING, train_like_eager

import fxvino
from harness import largest_constant_bytes, most_bytes_live


class _Attention(torch.nn.Module):
    """An embedding (2 MB table: its gradient starts from zeros) and a masked score matrix (2 MB)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(4096, 128)
        self.proj = torch.nn.Linear(128, 128)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.proj(self.emb(ids))
        scores = h @ h.transpose(1, 2)
        scores = torch.where(scores > 0, scores, torch.zeros_like(scores))
        return scores.softmax(-1) @ h


def test_training_graphs_hold_no_large_constants():
    torch.manual_seed(0)
    model = _Attention()
    twin = copy.deepcopy(model)
    ids = torch.randint(0, 4096, (32, 128), generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(model, backend="fxvino", options=TRAINING)
    with fxvino.collect_reports() as report:
        compiled(ids).square().mean().backward()
    twin(ids).square().mean().backward()
    for ours, ref in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-4, atol=1e-6)
    assert not report.fallbacks and not report.torch_ops, str(report)
    kinds = [g.kind for g in report.graphs]
    assert kinds == ["forward", "backward"], kinds
    for graph in report.graphs:
        for part in graph.ov_partitions:
            assert largest_constant_bytes(part.compiled) < 1 << 20, graph.kind


class _Wide(torch.nn.Module):
    """Six 16 MB layers: the backward reads five weights (80 MB; the first layer's input gradient is
    not needed) and the activations, above heap.TRIM_BYTES, so it is primed."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(2048, 2048) for _ in range(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x))
        return x


def test_the_backward_is_compiled_and_primed_with_the_forward():
    def compiled_and_primed(report: fxvino.Report) -> None:
        kinds = [g.kind for g in report.graphs]
        assert kinds == ["forward", "backward"], kinds
        (backward,) = report.graphs[1].ov_partitions
        assert backward.primed
        assert not report.graphs[0].ov_partitions[0].primed  # forwards are primed by their first call

    torch.manual_seed(0)
    x = torch.randn(16, 2048, generator=torch.Generator().manual_seed(1))
    train_like_eager(_Wide(), x, steps=1, before_backward=compiled_and_primed)


def test_small_backwards_and_integer_divisions_are_not_primed():
    import numpy as np
    import openvino as ov
    import openvino.opset16 as ops

    from fxvino.devices import core
    from fxvino.training import aot as training

    def compiled(divide: bool, rows: int) -> tuple[ov.CompiledModel, ov.Model]:
        x = ops.parameter([rows, 1024], ov.Type.f32)
        n = ops.parameter([rows, 1024], ov.Type.i64)
        counted = ops.divide(n, ops.constant(np.int64(1)).output(0)) if divide else ops.add(n, n)
        model = ov.Model([ops.result(ops.relu(x)), ops.result(counted)], [x, n])
        return core().compile_model(model, "CPU"), model

    assert training.prime(*compiled(divide=False, rows=8192))  # 96 MB of inputs
    assert not training.prime(*compiled(divide=True, rows=8192))  # a zero divisor would trap
    assert not training.prime(*compiled(divide=False, rows=64))  # below heap.TRIM_BYTES


class _Saved(torch.nn.Module):
    """Every layer's output is saved for the backward and read by the next layer."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(256, 256) for _ in range(3))
        self.norm = torch.nn.LayerNorm(256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(self.norm(x))).view(8, 64, 256)  # a view of a saved value too
        return x


def test_saved_activations_leave_the_forward_as_dynamic_outputs():
    torch.manual_seed(0)
    x = torch.randn(512, 256, generator=torch.Generator().manual_seed(1))
    report = train_like_eager(_Saved(), x, steps=2)
    forward = report.graphs[0].ov_partitions[0].compiled
    large = [p for p in forward.outputs if p.get_partial_shape().rank.get_length() >= 2]
    dynamic = [p for p in large if not p.get_partial_shape().is_static]
    # tanh's outputs (512 KB each) are read by the next layer and saved: written in place.
    assert len(dynamic) >= 2, [str(p.get_partial_shape()) for p in forward.outputs]


def test_only_large_outputs_read_in_the_graph_are_rewritten():
    import numpy as np
    import openvino as ov
    import openvino.opset16 as ops

    from fxvino.training import aot as training

    x = ops.parameter([512, 256], ov.Type.f32)
    shared = ops.tanh(x)  # 512 KB, also read by the Add
    leaf = ops.add(shared, ops.constant(np.float32(1)))  # read by nothing else
    y = ops.parameter([4, 4], ov.Type.f32)
    small = ops.relu(y)  # read below, but 64 bytes
    small_sum = ops.add(small, small)
    viewed = ops.reshape(shared, ops.constant(np.array([256, 512])), False)  # views a shared value
    results = [ops.result(o) for o in (shared, leaf, small, viewed, small_sum)]
    model = ov.Model(results, [x, y])
    assert training.outputs_written_in_place(model) == 2
    static = [r.get_output_partial_shape(0).is_static for r in model.get_results()]
    assert static == [False, True, True, False, True]


class _ConvBlocks(torch.nn.Module):
    """Convolution, batch norm and ReLU four times: each block saves its input, its convolution's
    output and its ReLU's output, which the plugin computes in its blocked layout and reorders out."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(
            *(
                torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU())
                for _ in range(4)
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def test_saved_values_are_reordered_out_as_soon_as_they_are_computed():
    torch.manual_seed(0)
    x = torch.randn(8, 16, 32, 32, generator=torch.Generator().manual_seed(1))
    report = train_like_eager(_ConvBlocks(), x, steps=2)  # outputs renumbered: gradients still eager's
    forward = report.graphs[0].ov_partitions[0].compiled
    activation = x.numel() * 4  # 512 KB; the forward saves twelve of them
    saved = [p for p in forward.outputs if p.get_partial_shape().rank.get_length() == 4]
    assert len(saved) >= 12, len(saved)
    # In AOTAutograd's output order the plugin reorders every saved value out at the end, so all
    # were alive at once (about 12 activations); computed in order, a few at a time.
    assert most_bytes_live(forward) <= 5 * activation, most_bytes_live(forward) / activation


def _layer_types(compiled) -> set[str]:
    return {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()}


def test_training_graphs_compile_without_snippets_except_backwards_with_convolutions():
    torch.manual_seed(0)
    x = torch.randn(8, 16, 32, 32, generator=torch.Generator().manual_seed(1))
    report = train_like_eager(_ConvBlocks(), x, steps=1)
    forward, backward = (g.ov_partitions[0].compiled for g in report.graphs)
    assert "Subgraph" not in _layer_types(forward)
    assert "Subgraph" in _layer_types(backward)  # batch-norm and ReLU gradients stay fused

    x = torch.randn(512, 256, generator=torch.Generator().manual_seed(1))
    report = train_like_eager(_Saved(), x, steps=1)
    for graph in report.graphs:
        assert "Subgraph" not in _layer_types(graph.ov_partitions[0].compiled), graph.kind
