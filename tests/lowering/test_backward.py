"""Backward ops on OpenVINO (``aot_autograd=True``): gradients of small modules against eager.

The backward graph compiles lazily, during ``.backward()``, so the report is collected around
both the forward and the backward call. ``native_layer_norm_backward``,
``native_group_norm_backward`` and ``embedding_dense_backward`` are in PyTorch's Core ATen
decomposition table, so by default they reach fxvino as elementwise arithmetic; the tests keep
them whole (as a capture configuration that lists them in ``KEEP_UNDECOMPOSED`` would).
"""

from __future__ import annotations

import copy

import openvino as ov
import pytest
import torch
import torch.nn as nn

import fxvino
from fxvino.capture import decompositions

aten = torch.ops.aten


@pytest.fixture
def keep_backward_ops(monkeypatch):
    kept = {
        aten.native_layer_norm_backward.default,
        aten.native_group_norm_backward.default,
        aten.embedding_dense_backward.default,
    }
    monkeypatch.setattr(decompositions, "KEEP_UNDECOMPOSED", decompositions.KEEP_UNDECOMPOSED | kept)


def train_step(model, *inputs, options=None, dynamic=None):
    """One forward/backward with fxvino and eagerly; asserts outputs, gradients and buffers match."""
    torch.manual_seed(0)
    ref_model = copy.deepcopy(model)
    ours = [i.clone().requires_grad_(i.is_floating_point()) for i in inputs]
    theirs = [i.clone().requires_grad_(i.is_floating_point()) for i in inputs]
    compiled = torch.compile(
        model, backend="fxvino", options={"aot_autograd": True, **(options or {})}, dynamic=dynamic
    )
    with fxvino.collect_reports() as report:
        out = compiled(*ours)
        # A distinct positive gradient per output (no cancellation in reductions like grad_bias).
        weights = torch.rand(out.shape, generator=torch.Generator().manual_seed(1)) + 0.5
        (out * weights).sum().backward()
    ref = ref_model(*theirs)
    (ref * weights).sum().backward()
    torch.testing.assert_close(out, ref)
    for a, b in zip(ours, theirs, strict=True):
        if b.grad is not None:
            torch.testing.assert_close(a.grad, b.grad)
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: f"grad of {name}: {m}")
    for (name, b), q in zip(model.named_buffers(), ref_model.buffers(), strict=True):
        torch.testing.assert_close(b, q, msg=lambda m, name=name: f"buffer {name}: {m}")
    return report


def backward_graph(report):
    (graph,) = [g for g in report.graphs if g.kind == "backward"]
    return graph


def assert_backward_on_openvino(report, op):
    graph = backward_graph(report)
    assert graph.ov_ops[op] >= 1, str(report)
    assert not graph.fallbacks, str(report)
    assert not graph.torch_ops, str(report)


X = (2, 4, 9, 10)

CONVS = {
    "plain": lambda: nn.Conv2d(4, 6, 3, padding=1),
    "stride2": lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1),
    "stride_dilation_asym": lambda: nn.Conv2d(4, 6, (3, 2), stride=(3, 2), padding=(2, 1), dilation=(2, 3)),
    "groups": lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
    "depthwise_nobias": lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False),
    "pad_over_kernel": lambda: nn.Conv2d(4, 3, 2, padding=3),
    # 1x1: the weight gradient is a batched MatMul (ResNet's bottlenecks and downsamples)
    "pointwise": lambda: nn.Conv2d(4, 6, 1),
    "pointwise_stride2_odd": lambda: nn.Conv2d(4, 6, 1, stride=2, bias=False),  # 9x10 input: 5x5 output
    "pointwise_stride_asym": lambda: nn.Conv2d(4, 6, 1, stride=(3, 2)),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_convolution_backward_2d(name):
    report = train_step(CONVS[name](), torch.randn(X))
    assert_backward_on_openvino(report, "aten.convolution_backward.default")


def test_convolution_backward_1d_and_3d():
    report = train_step(nn.Conv1d(4, 5, 3, stride=2), torch.randn(2, 4, 11))
    assert_backward_on_openvino(report, "aten.convolution_backward.default")
    torch._dynamo.reset()
    report = train_step(nn.Conv3d(4, 5, 3, stride=2, padding=1), torch.randn(2, 4, 5, 6, 7))
    assert_backward_on_openvino(report, "aten.convolution_backward.default")
    torch._dynamo.reset()
    report = train_step(nn.Conv3d(4, 5, 1, stride=2), torch.randn(2, 4, 5, 6, 7))
    assert_backward_on_openvino(report, "aten.convolution_backward.default")
    torch._dynamo.reset()
    report = train_step(nn.Conv1d(4, 5, 1), torch.randn(2, 4, 11))
    assert_backward_on_openvino(report, "aten.convolution_backward.default")


def test_convolution_backward_weights_only():
    """Input without requires_grad: output_mask asks for the weight and bias gradients only."""
    model = nn.Conv2d(4, 6, 3, stride=2, padding=1)
    ref = copy.deepcopy(model)
    x = torch.randn(X)
    with fxvino.collect_reports() as report:
        torch.compile(model, backend="fxvino", options={"aot_autograd": True})(x).sum().backward()
    ref(x).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    assert_backward_on_openvino(report, "aten.convolution_backward.default")


def test_pointwise_weight_gradient_is_a_matmul():
    """A 1x1 convolution's weight gradient runs as a batched MatMul, not as a convolution over
    the batch (slow in the CPU plugin, and with a stride it computes stride**2 the outputs)."""
    model = nn.Conv2d(8, 16, 1, stride=2)
    ref = copy.deepcopy(model)
    x = torch.randn(4, 8, 14, 14)
    with fxvino.collect_reports() as report:
        torch.compile(model, backend="fxvino", options={"aot_autograd": True})(x).square().sum().backward()
    ref(x).square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    graph = backward_graph(report)
    assert_backward_on_openvino(report, "aten.convolution_backward.default")
    layers = [
        op.get_rt_info()["layerType"].astype(str)
        for part in graph.ov_partitions
        for op in part.compiled.get_runtime_model().get_ops()
    ]
    assert "MatMul" in layers and "Convolution" not in layers, layers


@pytest.mark.parametrize(
    ("conv", "x"),
    [
        (nn.Conv2d(8, 16, 1, stride=2), (2, 8, 8, 8)),  # ResNet's downsampling: 4 -> 7 rows, not 8
        (nn.Conv2d(4, 6, 3, stride=3, padding=1), (2, 4, 9, 7)),  # a 9th row and a 7th column no window reached
    ],
)
def test_input_gradient_writes_rows_no_window_reached_itself(conv, x):
    """Input rows no window of a strided convolution reached get zeros from the transposed
    convolution's output padding, not from a Pad copying its whole result."""
    conv.requires_grad_(False)
    report = _conv_step_like_eager(conv, x)
    layers = [
        op.get_rt_info()["layerType"].astype(str)
        for part in backward_graph(report).ov_partitions
        for op in part.compiled.get_runtime_model().get_ops()
    ]
    assert "Deconvolution" in layers and "Pad" not in layers, layers


def _conv_step_like_eager(conv: nn.Module, shape, **tolerance):
    """One training step of ``conv`` compiled and of an eager twin: input and parameter
    gradients must agree, and the backward run on OpenVINO. Returns the report.

    The parameters are drawn again from a fixed seed: made at collection, they depended on what
    the xdist worker had collected before (a 7x7 weight gradient once missed f32's tolerance by 1e-6)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        conv.reset_parameters()
    ref = copy.deepcopy(conv)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0), requires_grad=True)
    with fxvino.collect_reports() as report:
        torch.compile(conv, backend="fxvino", options={"aot_autograd": True})(x).square().sum().backward()
    got = x.grad
    x.grad = None
    ref(x).square().sum().backward()
    torch.testing.assert_close(got, x.grad, **tolerance)
    for p, q in zip(conv.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, **tolerance)
    assert_backward_on_openvino(report, "aten.convolution_backward.default")
    return report


@pytest.mark.parametrize(
    ("conv", "x"),
    [
        (nn.Conv2d(32, 16, 3, padding=1), (2, 32, 9, 10)),
        (nn.Conv2d(32, 8, 3, stride=2, padding=1, bias=False), (2, 32, 9, 10)),  # a row no window reached
        (nn.Conv2d(40, 8, (3, 2), stride=(2, 1), padding=(2, 0), dilation=(2, 1)), (3, 40, 11, 7)),
        (nn.Conv2d(32, 8, 3), (2, 32, 6, 6)),  # no padding
    ],
)
def test_weight_gradient_over_many_channels_is_one_product(conv, x):
    """From 32 input channels a weight gradient is a MatMul over gathered windows (the
    convolution over the batch contracts over only the batch per tap), one product over the
    samples and pixels together (no stack of per-sample products to sum); input gradients stay
    transposed convolutions."""
    report = _conv_step_like_eager(conv, x, rtol=1e-4, atol=1e-4)
    parts = backward_graph(report).ov_partitions
    runtime = [op for part in parts for op in part.compiled.get_runtime_model().get_ops()]
    layers = [op.get_rt_info()["layerType"].astype(str) for op in runtime]
    assert "Gather" in layers and "MatMul" in layers and "Convolution" not in layers, layers
    products = [op for op, layer in zip(runtime, layers, strict=True) if layer == "MatMul"]
    assert [op.get_output_partial_shape(0).rank.get_length() for op in products] == [2], products


def test_weight_gradient_whose_windows_exceed_the_budget_stays_a_convolution():
    """Gathered windows of 8 x 64 x 64 pixels x 9 taps x 32 channels (38 MB) would sit in the
    plugin's arena for a small gain: that weight gradient stays a convolution over the batch.
    (Its sums run over 32768 products in another order than PyTorch's: f32 tolerances.)"""
    conv = nn.Conv2d(32, 8, 3, padding=1, bias=False)
    report = _conv_step_like_eager(conv, (8, 32, 64, 64), rtol=2e-3, atol=5e-3)
    layers = [
        op.get_rt_info()["layerType"].astype(str)
        for part in backward_graph(report).ov_partitions
        for op in part.compiled.get_runtime_model().get_ops()
    ]
    assert "Convolution" in layers and "Gather" not in layers, layers


@pytest.mark.parametrize(
    ("conv", "x"),
    [
        (nn.Conv2d(4, 6, 3, stride=2, padding=1), (2, 4, 8, 8)),  # ResNet's downsampling 3x3
        (nn.Conv2d(3, 8, 7, stride=2, padding=3), (2, 3, 16, 16)),  # the 7x7 stem
        (nn.Conv2d(4, 6, 3, padding=1), (2, 4, 7, 7)),
    ],
)
def test_convolution_gradients_compute_no_rows_they_crop(conv, x):
    """Both gradients' convolutions are padded to exactly the shape they return: the weight
    gradient's to the kernel (the forward's end padding reached past it: 4x4 computed for a
    stride-2 3x3), the input gradient's to the input. No Slice or Pad trims them afterwards;
    the transposed kernel leaves as a 3-d permutation."""
    report = _conv_step_like_eager(conv, x)
    kernel = list(conv.weight.shape[2:])
    for part in backward_graph(report).ov_partitions:
        ops_ = part.compiled.get_runtime_model().get_ops()
        types = [op.get_rt_info()["layerType"].astype(str) for op in ops_]
        assert "Slice" not in types and "StridedSlice" not in types and "Pad" not in types, types
        convs = [op for op, t in zip(ops_, types, strict=True) if t == "Convolution"]
        assert convs and all(list(op.get_output_shape(0))[2:] == kernel for op in convs)
        transposes = [op for op, t in zip(ops_, types, strict=True) if t == "Transpose"]
        assert all(list(op.get_output_shape(0)) != list(conv.weight.shape) for op in transposes)


@pytest.mark.parametrize(
    "make",
    [
        lambda: nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1),
        lambda: nn.ConvTranspose2d(4, 3, 3, stride=3, padding=2, dilation=2, output_padding=1),
        lambda: nn.ConvTranspose1d(4, 3, 2, stride=2),
    ],
)
def test_transposed_convolution_backward(make):
    # The forward runs in PyTorch here so the test isolates the backward lowering.
    x = torch.randn(X) if isinstance(make(), nn.ConvTranspose2d) else torch.randn(2, 4, 9)
    report = train_step(make(), x, options={"disabled_ops": [aten.convolution.default]})
    assert_backward_on_openvino(report, "aten.convolution_backward.default")


def test_convolution_weight_gradient_with_dynamic_shapes_is_declined():
    model = nn.Conv2d(4, 6, 3, stride=2, padding=1)
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino", options={"aot_autograd": True}, dynamic=True)
    with fxvino.collect_reports() as report:
        for h in (9, 12):
            model.zero_grad()
            ref.zero_grad()
            compiled(torch.randn(3, 4, h, 10)).sum().backward()
            ref(torch.randn(3, 4, h, 10)).sum().backward()
    reasons = [f.reason for f in backward_graph(report).fallbacks if f.op == "aten.convolution_backward.default"]
    assert reasons and "dynamic shapes" in reasons[0], str(report)


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda: nn.LayerNorm(10), X),
        (lambda: nn.LayerNorm([9, 10]), X),
        (lambda: nn.LayerNorm(10, elementwise_affine=False), X),
        (lambda: nn.LayerNorm(16, bias=False), (3, 5, 16)),
    ],
)
def test_native_layer_norm_backward(keep_backward_ops, make, shape):
    report = train_step(make(), torch.randn(shape))
    assert_backward_on_openvino(report, "aten.native_layer_norm_backward.default")


def test_native_layer_norm_backward_dynamic(keep_backward_ops):
    model = nn.LayerNorm(8)
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino", options={"aot_autograd": True}, dynamic=True)
    with fxvino.collect_reports() as report:
        for seq in (5, 7):
            x = torch.randn(3, seq, 8)
            a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
            compiled(a).pow(2).sum().backward()
            ref(b).pow(2).sum().backward()
            torch.testing.assert_close(a.grad, b.grad)
    torch.testing.assert_close(model.weight.grad, ref.weight.grad)
    assert_backward_on_openvino(report, "aten.native_layer_norm_backward.default")


@pytest.mark.parametrize("make", [lambda: nn.GroupNorm(2, 4), lambda: nn.GroupNorm(4, 4, affine=False)])
def test_native_group_norm_backward(keep_backward_ops, make):
    report = train_step(make(), torch.randn(X))
    assert_backward_on_openvino(report, "aten.native_group_norm_backward.default")


@pytest.mark.parametrize(
    "make, shape, op",
    [
        (lambda: nn.BatchNorm2d(4), X, "aten._native_batch_norm_legit_functional.default"),
        (lambda: nn.BatchNorm1d(4), (5, 4), "aten._native_batch_norm_legit_functional.default"),
        (lambda: nn.BatchNorm2d(4, track_running_stats=False), X, "aten._native_batch_norm_legit.no_stats"),
        (lambda: nn.BatchNorm3d(3, affine=False), (2, 3, 4, 5, 6), "aten._native_batch_norm_legit_functional.default"),
    ],
)
def test_batch_norm_training(make, shape, op):
    """Training-mode batch norm: output, saved statistics and the running-stat update (buffers)."""
    report = train_step(make(), torch.randn(shape))
    forward = [g for g in report.graphs if g.kind == "forward"][0]
    assert forward.ov_ops[op] == 1, str(report)
    assert not forward.fallbacks, str(report)
    assert not backward_graph(report).fallbacks, str(report)


def test_training_batch_norm_passes_over_its_input_twice_besides_its_sums():
    """A training forward's batch norm writes the squared deviations (for the variance) and its
    result, nothing more: the centered input is not written out for both (the normalized output
    is x * scale + shift, as PyTorch's CPU kernel computes it)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
    model[0].requires_grad_(False)  # the batch norm's gradients are checked; the rest, elsewhere
    report = train_step(model, torch.randn(4, 8, 12, 12))
    forward = [g for g in report.graphs if g.kind == "forward"][0]
    full = [
        op.get_rt_info()["layerType"].astype(str)
        for part in forward.ov_partitions
        for op in part.compiled.get_runtime_model().get_ops()
        if op.get_output_partial_shape(0).is_static
        and list(op.get_output_partial_shape(0).to_shape()) == [4, 16, 12, 12]
        and op.get_output_element_type(0) == ov.Type.f32  # not the ReLU's mask for the backward
    ]
    assert full.count("Eltwise") + full.count("Subgraph") == 2, full


@pytest.mark.parametrize(
    "make, shape, op",
    [
        (lambda: nn.MaxPool2d(3, 2, 1), X, "aten.max_pool2d_with_indices_backward.default"),
        (lambda: nn.MaxPool2d(3, 2, 0, ceil_mode=True), X, "aten.max_pool2d_with_indices_backward.default"),
        (lambda: nn.MaxPool2d(2, 1, dilation=2), X, "aten.max_pool2d_with_indices_backward.default"),
        (lambda: nn.MaxPool3d(2), (2, 3, 4, 5, 6), "aten.max_pool3d_with_indices_backward.default"),
    ],
)
def test_max_pool_backward(make, shape, op):
    report = train_step(make(), torch.randn(shape))
    assert_backward_on_openvino(report, op)


def test_max_pool_backward_overlapping_ties():
    """Equal values in overlapping windows: every window's gradient lands on torch's argmax."""
    x = torch.ones(1, 2, 6, 6)
    x[:, :, 2:4, 2:4] = 3.0
    report = train_step(nn.MaxPool2d(3, 1, 1), x)
    assert_backward_on_openvino(report, "aten.max_pool2d_with_indices_backward.default")


AVG_POOLS = [
    (lambda: nn.AvgPool2d(3, 2, 1), X),
    (lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False), X),
    (lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True), X),
    (lambda: nn.AvgPool2d(2, divisor_override=3), X),
    (lambda: nn.AvgPool3d(2, 1, 1, ceil_mode=True), (2, 3, 4, 5, 6)),
]


@pytest.mark.parametrize("make, shape", AVG_POOLS)
def test_avg_pool_backward(make, shape):
    # The forward avg_pool stays in PyTorch: the backward lowering is what is under test.
    n = len(shape) - 2
    op = getattr(aten, f"avg_pool{n}d")
    report = train_step(make(), torch.randn(shape), options={"disabled_ops": [op.default]})
    assert_backward_on_openvino(report, f"aten.avg_pool{n}d_backward.default")


@pytest.mark.parametrize(
    "make, shape, op",
    [
        (lambda: nn.AdaptiveAvgPool2d((4, 3)), X, "aten._adaptive_avg_pool2d_backward.default"),
        (lambda: nn.AdaptiveAvgPool2d((5, 7)), X, "aten._adaptive_avg_pool2d_backward.default"),
        (lambda: nn.AdaptiveAvgPool3d((2, 3, 4)), (2, 3, 4, 5, 6), "aten._adaptive_avg_pool3d_backward.default"),
    ],
)
def test_adaptive_avg_pool_backward(make, shape, op):
    report = train_step(make(), torch.randn(shape))
    assert_backward_on_openvino(report, op)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"padding_idx": 3}, {"scale_grad_by_freq": True}, {"padding_idx": 0, "scale_grad_by_freq": True}],
)
def test_embedding_dense_backward(keep_backward_ops, kwargs):
    ids = torch.tensor([[1, 2, 3, 0], [3, 3, 9, 1]])
    report = train_step(nn.Embedding(10, 4, **kwargs), ids)
    assert_backward_on_openvino(report, "aten.embedding_dense_backward.default")


def test_small_cnn_training_step_runs_backward_on_openvino():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 4, 3, stride=2, padding=1, groups=2),
        nn.AdaptiveAvgPool2d((2, 2)),
        nn.Flatten(),
        nn.Linear(16, 5),
    )
    report = train_step(model, torch.randn(4, 3, 12, 12))
    graph = backward_graph(report)
    for op in ("aten.convolution_backward.default", "aten.max_pool2d_with_indices_backward.default"):
        assert graph.ov_ops[op] >= 1, str(report)


@pytest.mark.parametrize(
    "make, shape",
    [
        (lambda: nn.utils.parametrizations.weight_norm(nn.Linear(6, 5)), (3, 6)),  # dim 0
        (lambda: nn.utils.parametrizations.weight_norm(nn.Linear(6, 5), dim=1), (3, 6)),  # the last dim
        # wav2vec2's positional convolution: weight norm over the kernel dim of a grouped Conv1d
        (lambda: nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 4, 5, padding=2, groups=2), dim=2), (2, 4, 11)),
    ],
)
def test_weight_norm_interface_backward(make, shape):
    """Gradients of both weight-norm parameters (direction and magnitude) match eager's."""
    report = train_step(make(), torch.randn(shape))
    assert_backward_on_openvino(report, "aten._weight_norm_interface_backward.default")
