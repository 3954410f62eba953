"""A CNN's activations cross from the training forward to the backward channels-last, and the
backward's elementwise work runs on rows ([N, H*W, C]): gradients stay eager's, and the plugin's
reorders between its convolutions' layout and the plain one go away (channels_last.py)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import torch
from train_loop import train_like_eager

from fxvino.training import channels_last

N, C1, C2, SIDE = 4, 24, 48, 16  # channels differ from every spatial size: NHWC shapes are unambiguous


class _Bottleneck(torch.nn.Module):
    """ResNet's shapes in small: 1x1, strided 3x3 and 1x1 convolutions with batch norm and ReLU,
    a strided 1x1 downsample on the residual path, pooling and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, C1, 3, padding=1), torch.nn.BatchNorm2d(C1), torch.nn.ReLU())
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(C1, C1, 1, bias=False),
            torch.nn.BatchNorm2d(C1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(C1, C1, 3, stride=2, padding=1, bias=False),
            torch.nn.BatchNorm2d(C1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(C1, C2, 1, bias=False),
            torch.nn.BatchNorm2d(C2),
        )
        self.down = torch.nn.Sequential(torch.nn.Conv2d(C1, C2, 1, stride=2, bias=False), torch.nn.BatchNorm2d(C2))
        self.head = torch.nn.Linear(C2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        h = torch.relu(self.body(h) + self.down(h))
        return self.head(h.mean((2, 3)))


def _copying_reorders(compiled: ov.CompiledModel, at_least: int) -> int:
    """Reorders of at least ``at_least`` elements the plugin runs (a merged one is named
    ``..._fake`` and copies nothing)."""
    count = 0
    for op in compiled.get_runtime_model().get_ordered_ops():
        if op.get_rt_info()["layerType"].astype(str) != "Reorder" or op.get_friendly_name().endswith("_fake"):
            continue
        shape = op.get_output_partial_shape(0)
        count += shape.is_static and int(np.prod(list(shape.to_shape()))) >= at_least
    return count


def test_cnn_training_saves_activations_channels_last_and_computes_gradients_on_rows(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(N, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(1))
    report = train_like_eager(_Bottleneck(), x, steps=2)
    forward, backward = (g.ov_partitions[0].compiled for g in report.graphs)
    shapes = [list(p.get_shape()) for p in forward.outputs if p.get_partial_shape().rank.get_length() == 4]
    saved = [s for s in shapes if s[0] == N]  # activations, not batch-norm statistics
    assert len(saved) >= 8, shapes
    assert all(s[3] in (C1, C2) and s[1] == s[2] < s[3] for s in saved), [s for s in saved if s[3] not in (C1, C2)]
    rows = [
        op
        for op in backward.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) in ("Subgraph", "Eltwise")
        and op.get_output_partial_shape(0).rank.get_length() == 3
    ]
    assert len(rows) >= 5, len(rows)
    activation = N * C1 * (SIDE // 2) ** 2
    with_rows = _copying_reorders(forward, activation) + _copying_reorders(backward, activation)

    monkeypatch.setattr(channels_last, "save_channels_last", lambda forward, backward: 0)
    torch._dynamo.reset()
    torch.manual_seed(0)
    report = train_like_eager(_Bottleneck(), x, steps=2)
    forward, backward = (g.ov_partitions[0].compiled for g in report.graphs)
    plain = _copying_reorders(forward, activation) + _copying_reorders(backward, activation)
    assert with_rows * 2 <= plain, (with_rows, plain)


def test_pooling_gradients_stay_in_rows():
    """ResNet's stem max pool and its global average pool: the max pool's gradient is scattered
    along the pixels of rows, and no gradient (the average pool's, spread over the pixels,
    included) is copied into rows by a Transpose."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, C1, 3, padding=1),
        torch.nn.BatchNorm2d(C1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, 2, 1),
        torch.nn.Conv2d(C1, C2, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(C2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(C2, 10),
    )
    x = torch.randn(N, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(1))
    report = train_like_eager(model, x, steps=2)
    backward = report.graphs[1].ov_partitions[0].compiled
    runtime = backward.get_runtime_model().get_ordered_ops()
    layers = [op.get_rt_info()["layerType"].astype(str) for op in runtime]
    scatters = [op for op, layer in zip(runtime, layers, strict=True) if layer == "ScatterElementsUpdate"]
    assert [list(op.get_output_shape(0)) for op in scatters] == [[N, SIDE * SIDE, C1]], scatters
    into_rows = [
        op
        for op, layer in zip(runtime, layers, strict=True)
        if layer == "Transpose"
        and op.get_output_partial_shape(0).rank.get_length() == 3
        and list(op.get_output_shape(0))[::2] in ([N, C1], [N, C2])
    ]
    assert not into_rows, into_rows


# --------------------------------------------------------------------------- the pass on its own


def _i64(values) -> ov.Output:
    return ops.constant(np.array(values, dtype=np.int64)).output(0)


def _backward_like_model(shared: bool = False) -> ov.Model:
    """NHWC inputs permuted to NCHW, as the backward takes saved activations, and the readers the
    pass handles: per-channel operands, a mask, sums and means over pixels, a maximum per
    sample, a convolution both read and written, a permutation, a pointwise weight gradient, a
    spatial Slice and a Pad it cannot run on rows. ``shared``: the computed ``b`` is also read
    by a pointwise weight gradient and a spatial Slice, which with its convolution makes three
    readers of its memory."""
    rng = np.random.default_rng(0)
    h = w = 6
    n, c = 2, 8
    p = ops.parameter([n, h, w, c], np.float32, name="p")
    q = ops.parameter([n, h, w, c], np.float32, name="q")
    mean = ops.parameter([1, c, 1, 1], np.float32, name="mean")
    x = ops.transpose(p, _i64(channels_last.TO_NCHW))
    y = ops.transpose(q, _i64(channels_last.TO_NCHW))
    a = ops.multiply(ops.subtract(x, mean), y)
    b = ops.select(ops.less_equal(y, ops.constant(np.float32(0))), ops.constant(np.float32(0)), a)
    sums = ops.reduce_sum(b, _i64([0, 2, 3]), False)
    means = ops.reduce_mean(a, _i64([0, 2, 3]), True)
    peaks = ops.reduce_max(b, _i64([2, 3]), False)
    weight = ops.constant(rng.standard_normal((c, c, 3, 3)).astype(np.float32))
    d = ops.convolution_backprop_data(b, weight, [1, 1], None, [1, 1], [1, 1], [1, 1])
    e = ops.add(d, a)
    swapped = ops.transpose(e, _i64([1, 0, 2, 3]))
    flat_y = ops.reshape(y, _i64([n, c, h * w]), False)
    flat_x = ops.reshape(x, _i64([n, c, h * w]), False)
    pointwise = ops.reduce_sum(ops.matmul(flat_y, flat_x, False, True), _i64([0]), False)
    strided = ops.slice(x, _i64([0, 0]), _i64([h, w]), _i64([2, 2]), _i64([2, 3]))
    strided = ops.multiply(strided, ops.constant(np.float32(3)))
    padded = ops.pad(e, _i64([0, 0, 1, 0]), _i64([0, 0, 0, 1]), "constant", ops.constant(np.float32(0)))
    outputs = [sums, means, peaks, e, swapped, pointwise, strided, padded]
    if shared:
        flat_b = ops.reshape(b, _i64([n, c, h * w]), False)
        outputs.append(ops.reduce_sum(ops.matmul(flat_b, flat_x, False, True), _i64([0]), False))
        outputs.append(ops.slice(b, _i64([1, 1]), _i64([h, w]), _i64([2, 2]), _i64([2, 3])))
    return ov.Model([o.output(0) for o in outputs], [p, q, mean])


def test_compute_in_rows_matches_the_nchw_graph():
    plain = _backward_like_model()
    converted = _backward_like_model()
    assert channels_last.compute_in_rows(converted) >= 8
    kinds = {
        op.get_type_name()
        for op in converted.get_ordered_ops()
        if op.get_output_partial_shape(0).rank == ov.Dimension(3)
    }
    assert {"Subtract", "Multiply", "Select", "Add"} <= kinds, kinds
    _assert_computes_alike(plain, converted, _normal_inputs(plain, seed=1))


def _normal_inputs(model: ov.Model, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(list(p.get_shape())).astype(np.float32) for p in model.get_parameters()]


def _assert_computes_alike(want: ov.Model, got: ov.Model, inputs: list[np.ndarray], tolerance: float = 1e-5) -> None:
    """The two models' outputs on ``inputs`` agree (f32 on the CPU plugin); ``tolerance`` is
    relative, and absolute against each output's largest value."""
    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    expected = core.compile_model(want, "CPU", config)(inputs)
    actual = core.compile_model(got, "CPU", config)(inputs)
    for a, b in zip(expected.values(), actual.values(), strict=True):
        np.testing.assert_allclose(b, a, rtol=tolerance, atol=tolerance * max(1.0, float(np.abs(a).max())))


def _views_per_value(model: ov.Model) -> dict[str, list[str]]:
    """Per computed value (not a view of a graph input), its readers that may share its memory:
    Reshapes and Transposes."""
    ordered = model.get_ordered_ops()
    live = {op.get_name() for op in ordered}
    views = {}
    for op in ordered:
        if op.get_output_size() != 1 or channels_last._views_an_input(op):
            continue
        readers = [t.get_node() for t in op.output(0).get_target_inputs() if t.get_node().get_name() in live]
        views[op.get_name()] = [r.get_type_name() for r in readers if r.get_type_name() in ("Reshape", "Transpose")]
    return views


def _reshaped_past_two_views(model: ov.Model) -> int:
    return sum(len(v) > 2 and "Reshape" in v for v in _views_per_value(model).values())


def test_a_computed_value_shares_its_memory_with_at_most_two_views():
    """Merged products, Slices and convolutions all read a computed batch-norm-like gradient in
    place; past two such readers the CPU plugin can miscompute, so the rest read a copy."""
    plain = _backward_like_model(shared=True)
    converted = _backward_like_model(shared=True)
    channels_last.compute_in_rows(converted)
    assert _reshaped_past_two_views(converted) == 0
    copies = [op for op in converted.get_ordered_ops() if op.get_type_name() == "Maximum"]
    assert len(copies) == 1 and copies[0].input_value(0) == copies[0].input_value(1), copies
    _assert_computes_alike(plain, converted, _normal_inputs(plain, seed=2))


def _read_gzipped_model(core: ov.Core, stem: str) -> ov.Model:
    data = Path(__file__).parent / "data"
    xml = gzip.decompress((data / f"{stem}.xml.gz").read_bytes())
    weights = np.frombuffer((data / f"{stem}.bin").read_bytes(), np.uint8)
    return core.read_model(xml, ov.Tensor(weights))


def test_the_copies_repair_the_backward_the_plugin_miscomputed():
    """A small CNN's backward (``three_views_nchw``) and the rows form an earlier version of the
    pass made of it (``three_views_rows``: three values each read by two Reshapes and a merged
    reorder), whose gradients the CPU plugin computed off by up to 100%. With the copies
    the pass now adds, the rows form computes what the NCHW graph does."""
    core = ov.Core()
    nchw = _read_gzipped_model(core, "three_views_nchw")
    rows = _read_gzipped_model(core, "three_views_rows")
    assert _reshaped_past_two_views(rows) == 3
    assert channels_last._copy_for_extra_views(rows) == 3
    assert _reshaped_past_two_views(rows) == 0
    rng = np.random.default_rng(0)
    inputs = []
    for p in nchw.get_parameters():
        shape, kind = list(p.get_shape()), p.get_element_type()
        if kind == ov.Type.f32:
            inputs.append(rng.standard_normal(shape).astype(np.float32))
        elif kind == ov.Type.boolean:
            inputs.append(rng.random(shape) > 0.5)
        else:
            inputs.append(np.zeros(shape, kind.to_dtype()))
    _assert_computes_alike(nchw, rows, inputs, tolerance=1e-4)
