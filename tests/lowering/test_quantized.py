"""PT2E quantization (``quantized_decomposed`` ops) on OpenVINO: int8 execution and exact q/dq semantics."""

from __future__ import annotations

import collections
from typing import Any

import openvino as ov
import pytest
import torch

from fxvino.devices import cpu_features
from harness import assert_all_on_openvino, run_fxvino

# Products over compressed weights in float, as PyTorch computes them: by default OpenVINO's CPU
# plugin quantizes their activations on the fly where the CPU has int8 dot products (VNNI/AMX),
# which these exactness checks are not about (test_weight_only_dynamic_quantization_is_reported).
EXACT = {"config": {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}}

pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
x86 = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")
qd = torch.ops.quantized_decomposed


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.c2(torch.relu(self.c1(x))))
        return self.fc(x.mean((2, 3)))


class _PooledNet(torch.nn.Module):
    """ResNet's stem (convolution, batch norm, max pool) and two branches over the pool, which the
    plugin runs in u8, dropping the requantize after it."""

    def __init__(self) -> None:
        super().__init__()
        conv = torch.nn.Conv2d(3, 16, 7, 2, 3, bias=False)
        self.stem = torch.nn.Sequential(conv, torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))
        self.a, self.b = torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.Conv2d(16, 16, 1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        return self.fc(torch.relu(self.a(x) + self.b(x)).mean((2, 3)))


def _x86_static_int8(
    model: torch.nn.Module, x: torch.Tensor, fold: bool, reduce_range: bool = False
) -> torch.fx.GraphModule:
    """``model`` quantized with the stock x86 quantizer (static int8, calibrated on 4 random
    batches shaped like ``x``; ``reduce_range``: 7-bit activations)."""
    config = x86.get_default_x86_inductor_quantization_config(reduce_range=reduce_range)
    quantizer = x86.X86InductorQuantizer().set_global(config)
    prepared = pt2e.prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    for _ in range(4):
        prepared(torch.randn_like(x))
    return pt2e.convert_pt2e(prepared, fold_quantize=fold)


def _pt2e(fold: bool) -> tuple[torch.fx.GraphModule, torch.Tensor]:
    """A small CNN quantized with the stock x86 quantizer."""
    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(2, 3, 16, 16)
    return _x86_static_int8(model, x, fold), x


def _runtime_precisions(report, layer_types: tuple[str, ...]) -> set[str]:
    compiled = report.graphs[0].ov_partitions[0].compiled
    return {
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) in layer_types
    }


@pytest.mark.numerics
@pytest.mark.parametrize("fold", [False, True], ids=["fold_quantize=False", "fold_quantize=True"])
def test_pt2e_static_int8_runs_int8_on_openvino(fold):
    """Convolutions and the linear run with int8 inputs (OpenVINO's low-precision kernels). Their
    result is OpenVINO's int8 arithmetic, not PT2E's float simulation of it: it is compared with
    OpenVINO's own conversion of the same model (which fails to convert folded int8 weights), and
    with the simulation within a few quantization steps."""
    quantized, x = _pt2e(fold)
    expected = quantized(x)
    out, report = run_fxvino(quantized, x)
    assert_all_on_openvino(report)
    assert _runtime_precisions(report, ("Convolution", "FullyConnected")) <= {"u8", "i8"}, str(report)
    assert (out - expected).abs().max() <= 0.05 * expected.abs().max()
    if not fold:
        native = ov.Core().compile_model(ov.convert_model(torch.export.export(quantized, (x,))), "CPU")
        torch.testing.assert_close(out, torch.from_numpy(native(x.numpy())[0]), atol=1e-3, rtol=0)


@pytest.mark.numerics
@pytest.mark.parametrize(
    ("reduce_range", "config"),
    [(False, {}), (True, {}), (False, {"LP_TRANSFORMS_MODE": "NO"})],
    ids=["8-bit", "7-bit", "8-bit-in-f32"],
)
def test_int8_products_give_the_simulation_where_they_cannot_saturate(reduce_range, config, caplog):
    """With VNNI (or 7-bit activations on any CPU) OpenVINO's int8 products equal PT2E's
    simulation; without VNNI, 8-bit activations may saturate the 16-bit pair sums (2.1-6.9% of the
    output range off it as an emulated Haswell): not corrected, so the report says so and the log
    warns (not for 7-bit ones, whose products run in int8 too). The note's other remedy, the
    plugin's low-precision transformations off, computes the dequantized graph in f32 on every
    class."""
    torch.manual_seed(3)
    model, x = _PooledNet().eval(), torch.randn(2, 3, 32, 32)
    quantized = _x86_static_int8(model, x, fold=True, reduce_range=reduce_range)
    expected = quantized(x)
    with caplog.at_level("WARNING", logger="fxvino"):
        out, report = run_fxvino(quantized, x, options={"config": config})
    assert_all_on_openvino(report)
    in_int8 = not config
    assert bool(_runtime_precisions(report, ("Convolution",)) & {"u8", "i8"}) == in_int8, str(report)
    vnni = "vnni" in cpu_features()
    if vnni or reduce_range or not in_int8:
        assert (out - expected).abs().max() <= 1e-5 * expected.abs().max()
    saturates = in_int8 and not vnni and not reduce_range  # 7-bit values cannot saturate: no note
    saturation = [n for n in report.notes if "CPU without VNNI" in n]
    assert len(saturation) == saturates, report.notes
    warned = [r for r in caplog.records if "CPU without VNNI" in r.getMessage()]
    assert len(warned) == saturates, [r.getMessage() for r in caplog.records]


def test_seven_bit_activations_run_the_layers_of_eight_bit_ones():
    """A 7-bit quantize is a Clamp and an 8-bit FakeQuantize; after a max pool of values already
    within its range the Clamp is left out, as it would keep the plugin from dropping the
    requantize (7-bit ResNet-50 ran two more FakeQuantizes and three more reorders)."""
    torch.manual_seed(0)
    model, x = _PooledNet().eval(), torch.randn(1, 3, 64, 64)
    layers = []
    for reduce_range in (False, True):
        _, report = run_fxvino(_x86_static_int8(model, x, fold=True, reduce_range=reduce_range), x)
        compiled = report.graphs[0].ov_partitions[0].compiled
        layers.append(
            collections.Counter(
                (op.get_rt_info()["layerType"].astype(str), op.get_rt_info()["runtimePrecision"].astype(str))
                for op in compiled.get_runtime_model().get_ordered_ops()
                if op.get_rt_info()["layerType"].astype(str) != "Const"
            )
        )
    assert layers[0] == layers[1]


@pytest.mark.numerics
def test_quantize_and_dequantize_alone_are_exact():
    """A quantize whose integers leave the graph, and dequantizes of integer inputs (per tensor and per
    channel), follow PyTorch exactly (round half to even, clamp, zero points)."""
    scales, zero_points = torch.tensor([0.1, 0.25, 0.05]), torch.tensor([0, 3, -2])

    def fn(x, q8, w8):
        q = qd.quantize_per_tensor.default(x * 2, 0.5, 7, -128, 127, torch.int8)  # x*2/0.5 = k + 0.5: ties
        a = qd.dequantize_per_tensor.default(q8, 0.02, 128, 0, 255, torch.uint8)
        w = qd.dequantize_per_channel.default(w8, scales, zero_points, 0, -128, 127, torch.int8)
        qw = qd.quantize_per_channel.default(x[:3] * 2, scales, zero_points, 0, -128, 127, torch.int8)
        return q, a + 1, w * 2, qw

    ties_and_clamps = torch.tensor([[0.125, 0.375, -0.125, 1e3], [0.625, -0.375, 0.875, -1e3]])
    x = torch.cat([torch.randn(6, 4) * 5, ties_and_clamps])
    q8, w8 = torch.randint(0, 256, (3, 4), dtype=torch.uint8), torch.randint(-128, 128, (3, 4), dtype=torch.int8)
    out, report = run_fxvino(fn, x, q8, w8)
    for got, want in zip(out, fn(x, q8, w8), strict=True):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert_all_on_openvino(report)


def test_pt2e_dynamic_quantization_runs_on_openvino():
    """Dynamic quantization: scale and zero point chosen from each call's activations in the graph
    (``choose_qparams.tensor``), then ``quantize/dequantize_per_tensor.tensor``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    x = torch.randn(8, 64)
    config = x86.get_default_x86_inductor_quantization_config(is_dynamic=True)
    quantizer = x86.X86InductorQuantizer().set_global(config)
    prepared = pt2e.prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    prepared(x)
    quantized = pt2e.convert_pt2e(prepared)
    compiled = torch.compile(quantized, backend="fxvino", options=EXACT)
    from fxvino import collect_reports

    with collect_reports() as report, torch.no_grad():
        for scale in (1.0, 7.0):  # another range: other parameters, computed per call
            torch.testing.assert_close(compiled(x * scale), quantized(x * scale), atol=1e-5, rtol=1e-5)
    assert_all_on_openvino(report)
    assert report.ov_ops["quantized_decomposed.choose_qparams.tensor"] == 2, str(report)


@pytest.mark.numerics
def test_choose_qparams_matches_pytorch():
    def fn(x):
        scale, zero_point = qd.choose_qparams.tensor(x * 1.5, 0, 255, torch.finfo(torch.float32).eps, torch.uint8)
        return scale, zero_point

    for x in (torch.randn(5, 7), torch.rand(3, 4) + 1.0, -torch.rand(9)):  # mixed, all positive, all negative
        out, report = run_fxvino(fn, x)
        for got, want in zip(out, fn(x), strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
        assert_all_on_openvino(report)


class _SharedReluBlock(torch.nn.Module):
    """A torchvision-style residual block: one nn.ReLU module applied three times."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1)
        self.relu = torch.nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.c1(x))
        return self.relu(self.c2(self.relu(y)) + x)


def test_reused_modules_quantize_after_separate_module_calls():
    """The stock x86 quantizer rejects a module called several times; ``separate_module_calls``
    gives each call its own source partition, and the model then runs in int8 on OpenVINO."""
    from fxvino.quantization import separate_module_calls

    torch.manual_seed(0)
    model, x = _SharedReluBlock().eval(), torch.randn(2, 8, 12, 12)
    quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    with pytest.raises(ValueError, match="more than one output node"):
        pt2e.prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    exported = torch.export.export(model, (x,)).module()
    assert separate_module_calls(exported) == 1  # relu(relu(y)) is one connected group: 2 groups in all
    torch.testing.assert_close(exported(x), model(x))  # metadata only: the same computation
    prepared = pt2e.prepare_pt2e(exported, quantizer)
    prepared(x)
    quantized = pt2e.convert_pt2e(prepared, fold_quantize=True)
    expected = quantized(x)
    out, report = run_fxvino(quantized, x)
    assert_all_on_openvino(report)
    assert _runtime_precisions(report, ("Convolution",)) <= {"u8", "i8"}, str(report)
    assert (out - expected).abs().max() <= 0.05 * expected.abs().max()


class _Bottlenecks(torch.nn.Module):
    """Two ResNet bottleneck blocks: 1x1, 3x3, 1x1 convolutions and an identity shortcut."""

    def __init__(self, c: int = 32) -> None:
        super().__init__()
        m = c // 4
        convs = [(c, m, 1, 0), (m, m, 3, 1), (m, c, 1, 0)]
        self.blocks = torch.nn.ModuleList(
            torch.nn.ModuleList(torch.nn.Conv2d(i, o, k, padding=p) for i, o, k, p in convs) for _ in range(2)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(x)
        for a, b, c in self.blocks:
            x = torch.relu(c(torch.relu(b(torch.relu(a(x))))) + x)
        return x


def _residual_adds_outside_convolutions(report: Any) -> list[str]:
    """Executable layers other than convolutions that compute a residual Add (their original
    layer names include an Add that is not a convolution's bias)."""
    compiled = report.graphs[0].ov_partitions[0].compiled
    found = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        names = rt["originalLayersNames"].astype(str)
        if rt["layerType"].astype(str) != "Convolution" and "Add" in names and "FakeQuantize" in names:
            found.append(f"{rt['layerType'].astype(str)}: {names}")
    return found


def test_quantized_residual_adds_fuse_into_convolutions():
    """A quantized residual block's Add and requantization run as post-ops of its last convolution
    (as in native conversion), not as a separate float Subgraph: the plugin's snippets tokenizer
    takes them first with static shapes, so fxvino turns snippets off for such graphs
    (``compilation/plugin_config.py``; ResNet-50 int8 batch 8: 28.0 -> 20.0 ms). A user's own
    ``SNIPPETS_MODE`` still wins, which shows the Subgraph the setting avoids."""
    torch.manual_seed(0)
    model, x = _Bottlenecks().eval(), torch.randn(2, 32, 14, 14)
    quantized = _x86_static_int8(model, x, fold=True)
    expected = quantized(x)

    out, report = run_fxvino(quantized, x)
    assert_all_on_openvino(report)
    assert _runtime_precisions(report, ("Convolution",)) <= {"u8", "i8"}, str(report)
    assert _residual_adds_outside_convolutions(report) == []
    assert (out - expected).abs().max() <= 0.05 * expected.abs().max()

    torch._dynamo.reset()
    out, report = run_fxvino(quantized, x, options={"config": {"SNIPPETS_MODE": "ENABLE"}})
    assert _residual_adds_outside_convolutions(report), "the user's SNIPPETS_MODE should reach the plugin"
    assert (out - expected).abs().max() <= 0.05 * expected.abs().max()


def test_pt2e_resnet50_runs_every_convolution_in_int8_as_native_does():
    """The stock x86 quantizer on our ResNet-50 (after ``ready_for_quantizer``): all 53
    convolutions and the classifier run with int8 inputs, every residual Add is fused into a
    convolution (no Subgraph layers, as in native conversion), and the output stays within a few
    quantization steps of the PT2E model run eagerly."""
    from fxvino.tools import exec_graph as graph_quality
    from fxvino.tools import zoo

    model, _ = zoo.comparable("resnet50")
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    quantized = graph_quality.pt2e_int8(model, (x,), fold_quantize=True)
    expected = quantized(x)
    hist, _, report = graph_quality.fxvino_runtime(quantized, (x,), precisions=True)
    assert_all_on_openvino(report)
    convolutions = {k: v for k, v in hist.items() if k.startswith("Convolution")}
    assert sum(convolutions.values()) == 53 and set(convolutions) <= {"Convolution u8", "Convolution i8"}, convolutions
    assert not [k for k in hist if k.startswith("Subgraph")], dict(hist)
    out, _ = run_fxvino(quantized, x)
    assert (out - expected).abs().max() <= 0.05 * expected.abs().max()


def test_torchao_int8_weight_only_freezes_the_int8_weights():
    """torchao's weight-only int8 (a tensor subclass) reaches the graph as int8 data and scales;
    those inner tensors are frozen into OpenVINO constants like plain weights, and the products
    read the int8 weights directly (the scale moved from the product onto the weight)."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64)).eval()
    quantize_(model, Int8WeightOnlyConfig())
    x = torch.randn(4, 256)
    out, report = run_fxvino(model, x, options=EXACT)
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)
    assert_all_on_openvino(report)
    assert report.graphs[0].frozen_inputs >= 4, str(report)  # int8 data and scale of both layers
    compiled = report.graphs[0].ov_partitions[0].compiled
    weights = [
        str(op.inputs()[1].get_element_type())
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    ]
    assert weights == ["<Type: 'int8_t'>"] * 2, weights  # kept compressed: a quarter of the bytes per call


def _weight_types(report, layer_type: str = "FullyConnected") -> list[str]:
    """The element type each ``layer_type`` of the executable graph reads its weight in."""
    compiled = report.graphs[0].ov_partitions[0].compiled
    return [
        op.inputs()[1].get_element_type().get_type_name()
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == layer_type
    ]


def _zero_point_inputs(report: Any) -> list[bool]:
    """Per FullyConnected of the executable graph: whether it subtracts a zero point (a fifth
    input that is a real tensor, not the plugin's empty placeholder)."""
    compiled = report.graphs[0].ov_partitions[0].compiled
    return [
        len(op.inputs()) > 4 and op.inputs()[4].get_element_type().is_static()
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    ]


def _mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 128)).eval()
    return model, torch.randn(4, 256)


def test_nncf_quantize_runs_int8_on_openvino():
    """``nncf.quantize`` on a torch.export'ed model: activations as q/dq pairs, weights as int8
    constants decompressed in the graph (``w * scale - zero_point``). The decompression stays in
    the graph (not folded into f32 weights), so every convolution and the linear run in int8 —
    as in OpenVINO's own conversion of the same graph, which the result is compared with."""
    nncf = pytest.importorskip("nncf")
    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(2, 3, 16, 16)
    calibration = nncf.Dataset([torch.randn(2, 3, 16, 16) for _ in range(4)])
    quantized = nncf.quantize(torch.export.export(model, (x,)).module(), calibration, subset_size=4)
    out, report = run_fxvino(quantized, x)
    assert_all_on_openvino(report)
    # int8 execution: u8 activations on VNNI/AVX2; on AMX the plugin may pick signed i8 tiles too
    precisions = _runtime_precisions(report, ("Convolution", "FullyConnected"))
    assert precisions and precisions <= {"u8", "i8"}, str(report)
    assert _weight_types(report, "Convolution") == ["i8", "i8"] and _weight_types(report) == ["i8"]
    native = ov.Core().compile_model(ov.convert_model(torch.export.export(quantized, (x,))), "CPU")
    torch.testing.assert_close(out, torch.from_numpy(native(x.numpy())[0]), atol=1e-3, rtol=0)
    expected = quantized(x)
    assert (out - expected).abs().max() <= 0.05 * expected.abs().max()


def test_openvino_quantizer_flow_runs_int8_on_openvino():
    """The flow of PyTorch's tutorial "PyTorch 2 Export Quantization for OpenVINO torch.compile
    Backend": NNCF's ``quantize_pt2e`` with ExecuTorch's ``OpenVINOQuantizer``, then torch.compile.
    Every product runs on OpenVINO in int8, as in OpenVINO's own conversion of the same graph,
    except where the quantizer leaves a product in float (the result says which)."""
    nncf = pytest.importorskip("nncf")
    quantizer = pytest.importorskip("executorch.backends.openvino.quantizer", reason="ExecuTorch is not installed")
    from nncf.experimental.torch.fx import quantize_pt2e

    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(2, 3, 16, 16)
    calibration = nncf.Dataset([torch.randn(2, 3, 16, 16) for _ in range(4)])
    exported = torch.export.export(model, (x,)).module()
    quantized = quantize_pt2e(exported, quantizer.OpenVINOQuantizer(), calibration, subset_size=4)
    out, report = run_fxvino(quantized, x)
    assert_all_on_openvino(report)
    native = ov.Core().compile_model(ov.convert_model(torch.export.export(quantized, (x,))), "CPU")
    torch.testing.assert_close(out, torch.from_numpy(native(x.numpy())[0]), atol=1e-3, rtol=0)
    precisions = _runtime_precisions(report, ("Convolution", "FullyConnected"))
    assert precisions & {"u8", "i8"}, str(report)  # int8 products
    assert _weight_types(report) == ["i8"]  # the linear's weight stays int8
    expected = quantized(x)
    assert (out - expected).abs().max() <= 0.05 * expected.abs().max()


@pytest.mark.parametrize(
    ("mode", "group_size", "stored"),
    [("INT8_SYM", None, "i8"), ("INT8_ASYM", None, "u8"), ("INT4_SYM", 64, "i4"), ("INT4_ASYM", 64, "u4")],
)
def test_nncf_compress_weights_stay_compressed(mode, group_size, stored):
    """``nncf.compress_weights``: 4-bit values arrive packed two to a byte and unpacked by bitwise
    ops in the graph; the unpacking is evaluated once into a real 4-bit OpenVINO constant, and the
    products read 8- or 4-bit weights. (NNCF keeps one layer of a 4-bit model in 8 bits.) NNCF's
    eager decompression computes in float16, OpenVINO's in float32: results agree to f16 rounding."""
    nncf = pytest.importorskip("nncf")
    model, x = _mlp()
    options = {"group_size": group_size} if group_size else {}
    compressed = nncf.compress_weights(
        torch.export.export(model, (x,)).module(), mode=getattr(nncf.CompressWeightsMode, mode), **options
    )
    expected = compressed(x)
    out, report = run_fxvino(compressed, x, options=EXACT)
    assert_all_on_openvino(report)
    assert stored in _weight_types(report), (_weight_types(report), str(report))
    assert set(_weight_types(report)) <= {"i8", "u8", "i4", "u4"}
    torch.testing.assert_close(out, expected, atol=2e-3 * expected.abs().max().item(), rtol=0)


def test_torchao_int4_weight_only_is_a_4bit_constant():
    """torchao's CPU int4 weight-only config stores int4 values one per int8 byte; they become an
    i4 OpenVINO constant (half the bytes again), and the result is eager's. Its zero points are
    all 0 and reach the subtraction converted and reshaped: the subtraction is dropped, since a
    FullyConnected with a zero-point input misses the CPU plugin's dynamically quantized int4
    kernel (3x slower at decode on an AVX-512 VNNI machine)."""
    from torchao.quantization import IntxWeightOnlyConfig, PerGroup, quantize_

    model, x = _mlp()
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(64)))
    out, report = run_fxvino(model, x, options=EXACT)
    torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)
    assert_all_on_openvino(report)
    assert _weight_types(report) == ["i4", "i4"], str(report)
    assert _zero_point_inputs(report) == [False, False]
    from fxvino.quantization.compressed import four_bit

    inner = [
        getattr(layer.weight, name) for layer in (model[0], model[2]) for name in layer.weight.__tensor_flatten__()[0]
    ]
    assert inner and not any(four_bit(t) for t in inner)  # the model's own tensors are never tagged


def _packed_of(report) -> list:
    """The packed 4-bit values each partition's constants were made from (lowering/convert.py)."""
    return [v for g in report.graphs for p in g.partitions for v in p.partition_ref().packed_constants]


def test_graphs_over_the_same_int4_weights_share_their_packed_constants():
    """A compiled model keeps its constants: graphs over the same torchao int4 weights (an LLM's
    prefill and decode) share one packed copy, a weight changed in place gets its own, and a copy
    no compiled partition holds is gone."""
    import gc
    import weakref

    from torchao.quantization import IntxWeightOnlyConfig, PerGroup, quantize_

    model, x = _mlp()
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(64)))
    expected = model(x)
    first, report1 = run_fxvino(model, x, options=EXACT)
    second, report2 = run_fxvino(model, x[:1], options=EXACT)  # another compiled model
    torch.testing.assert_close(first, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(second, expected[:1], atol=1e-5, rtol=1e-5)
    assert_all_on_openvino(report1)
    assert_all_on_openvino(report2)
    packed1, packed2 = _packed_of(report1), _packed_of(report2)
    assert len(packed1) == 2 and [id(v) for v in packed1] == [id(v) for v in packed2]

    qdata = model[0].weight.qdata
    with torch.no_grad():
        qdata.copy_(torch.flip(qdata, [0]))  # other 4-bit values, in place
    expected = model(x)
    torch._dynamo.reset()
    changed, report3 = run_fxvino(model, x, options=EXACT)
    torch.testing.assert_close(changed, expected, atol=1e-5, rtol=1e-5)
    packed3 = _packed_of(report3)
    assert id(packed3[0]) != id(packed1[0])  # compared by bytes, not trusted to a version counter
    assert id(packed3[1]) == id(packed1[1])

    gone = weakref.ref(packed1[0])
    del packed1, packed2, packed3, report1, report2, report3
    torch._dynamo.reset()
    gc.collect()
    assert gone() is None


def test_weight_only_dynamic_quantization_is_reported():
    """With OpenVINO's defaults, weight-only products may quantize their activations to int8 on
    the fly (``DYNAMIC_QUANTIZATION_GROUP_SIZE``, on CPUs with int8 dot products): the report says
    so and how to turn it off, the result stays within cosine 0.9999 of eager, and with the
    property at 0 the note is gone."""
    from torchao.quantization import IntxWeightOnlyConfig, PerGroup, quantize_

    model, x = _mlp()
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(64)))
    out, report = run_fxvino(model, x)
    assert_all_on_openvino(report)
    if int(ov.Core().get_property("CPU", "DYNAMIC_QUANTIZATION_GROUP_SIZE")) == 0:
        assert report.notes == []  # a plugin build that never does it
        return
    (note,) = report.notes
    assert "2 product(s)" in note and "DYNAMIC_QUANTIZATION_GROUP_SIZE': 0" in note, note
    assert "note: 2 product(s)" in str(report)
    expected = model(x)
    assert torch.nn.functional.cosine_similarity(out.flatten(), expected.flatten(), dim=0) > 0.9999
    torch._dynamo.reset()
    _, exact = run_fxvino(model, x, options=EXACT)
    assert exact.notes == []


def test_int_weights_become_4bit_only_when_their_values_fit():
    """An int8 weight whose values fit 4 bits (an odd number of them: the last byte half used)
    becomes i4, a uint8 one u4; values outside the 4-bit range stay 8-bit. The result is exact."""

    class Decompressing(torch.nn.Module):
        def __init__(self, w: torch.Tensor) -> None:
            super().__init__()
            self.register_buffer("w", w)
            self.register_buffer("scale", torch.rand(w.shape[0], 1) + 0.5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ ((self.w.to(torch.float32) - 3) * self.scale).t()

    torch.manual_seed(0)
    x = torch.randn(2, 25)
    cases = {
        "i4": torch.randint(-8, 8, (7, 25), dtype=torch.int8),
        "u4": torch.randint(0, 16, (7, 25), dtype=torch.uint8),
        "i8": torch.randint(-9, 8, (7, 25), dtype=torch.int8).index_fill_(1, torch.tensor([0]), -9),
        "u8": torch.randint(0, 17, (7, 25), dtype=torch.uint8).index_fill_(1, torch.tensor([0]), 16),
    }
    for stored, w in cases.items():
        model = Decompressing(w).eval()
        out, report = run_fxvino(model, x)
        torch.testing.assert_close(out, model(x), atol=1e-5, rtol=1e-5)
        assert_all_on_openvino(report)
        assert _weight_types(report) == [stored], (stored, str(report))
        torch._dynamo.reset()


@pytest.mark.parametrize("flow", ["pt2e", "nncf"])
def test_bert_runs_its_linear_layers_in_int8(flow):
    """A transformers BertModel seen as ids -> last hidden state (its pooler unused), quantized with
    the stock x86 quantizer (PT2E) or NNCF's transformer preset: both fail on the exported module
    as it is (dead pooler ops); after ``ready_for_quantizer`` / ``remove_dead_code`` every linear
    layer runs in int8, within cosine 0.999 of the quantized model run eagerly."""
    from fxvino.quantization import ready_for_quantizer, remove_dead_code
    from fxvino.tools.zoo import comparable

    model, (ids,) = comparable("bert", num_hidden_layers=2, hidden_size=128, num_attention_heads=4, seq=64)
    torch.manual_seed(0)
    calibration = [torch.randint(0, 30522, (1, 64)) for _ in range(4)]
    exported = torch.export.export(model, (ids,)).module()
    if flow == "pt2e":
        quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
        with pytest.raises(IndexError):
            pt2e.prepare_pt2e(torch.export.export(model, (ids,)).module(), quantizer)
        prepared = pt2e.prepare_pt2e(ready_for_quantizer(exported), quantizer)
        for batch in calibration:
            prepared(batch)
        quantized = pt2e.convert_pt2e(prepared, fold_quantize=True)
    else:
        nncf = pytest.importorskip("nncf")
        preset = nncf.ModelType.TRANSFORMER
        remove_dead_code(exported)
        quantized = nncf.quantize(exported, nncf.Dataset(calibration), subset_size=4, model_type=preset)
    expected = quantized(ids)
    out, report = run_fxvino(quantized, ids)
    assert_all_on_openvino(report)
    assert _runtime_precisions(report, ("FullyConnected",)) <= {"u8", "i8"}, str(report)
    assert len(_weight_types(report)) == 12  # 6 per layer, none left in f32 (no pooler)
    cosine = torch.nn.functional.cosine_similarity(out.flatten(), expected.flatten(), dim=0)
    assert cosine >= 0.999, cosine


def test_cache_key_covers_quantization_parameters():
    """Two graphs that differ only in a quantization scale, zero point or dtype have different cache
    keys (the scale is an argument in the graph's code; int weights are constants, fingerprinted)."""
    from fxvino.cache.key import graph_key
    from fxvino.options import Options

    def quantizer(scale: float, zero_point: int, dtype: torch.dtype):
        low, high = (-128, 127) if dtype == torch.int8 else (0, 255)

        def fn(x):
            q = qd.quantize_per_tensor.default(x, scale, zero_point, low, high, dtype)
            return qd.dequantize_per_tensor.default(q, scale, zero_point, low, high, dtype)

        return torch.fx.symbolic_trace(fn)

    keys = {
        graph_key(quantizer(*params), Options())
        for params in [(0.5, 0, torch.int8), (0.25, 0, torch.int8), (0.5, 3, torch.int8), (0.5, 0, torch.uint8)]
    }
    assert len(keys) == 4
    assert graph_key(quantizer(0.5, 0, torch.int8), Options()) in keys  # and stable


@pytest.mark.numerics
@pytest.mark.parametrize(
    ("dtype", "low", "high", "on_openvino"),
    [
        (torch.int16, -(2**15), 2**15 - 1, True),
        (torch.int32, -(2**31), 2**31 - 1, True),
        (torch.uint16, 0, 2**16 - 1, False),  # no OpenVINO element type: PyTorch, reported
        (torch.float8_e4m3fn, -448, 448, False),
    ],
)
def test_schemes_beyond_8_bits_are_exact_or_reported(dtype, low, high, on_openvino):
    """A q/dq pair wider than 8 bits is not a FakeQuantize (whose f32 level arithmetic lands one
    step off for int16 and thousands for int32): it stays an exact quantize and dequantize; a dtype
    OpenVINO lacks runs in PyTorch with its reason in the report. Never a wrong result."""

    def fn(x):
        q = qd.quantize_per_tensor.default(x, 0.01, 0, low, high, dtype)
        return qd.dequantize_per_tensor.default(q, 0.01, 0, low, high, dtype) * 2, q

    x = torch.randn(64, 8) * 3
    out, report = run_fxvino(fn, x)
    for got, want in zip(out, fn(x), strict=True):
        assert got.dtype == want.dtype
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))  # bit for bit (float8 too)
    if on_openvino:
        assert_all_on_openvino(report)
    else:
        assert report.torch_ops and "has no OpenVINO element type" in str(report), str(report)
