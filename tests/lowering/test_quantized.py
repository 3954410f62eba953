"""PT2E quantization (``quantized_decomposed`` ops) on OpenVINO: int8 execution and exact q/dq semantics."""

from __future__ import annotations

import openvino as ov
import pytest
import torch

from harness import assert_all_on_openvino, run_fxvino

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


def _pt2e(fold: bool) -> tuple[torch.fx.GraphModule, torch.Tensor]:
    """A CNN quantized with the stock x86 quantizer (static int8, calibrated on 4 batches)."""
    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(2, 3, 16, 16)
    quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    prepared = pt2e.prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    for _ in range(4):
        prepared(torch.randn(2, 3, 16, 16))
    return pt2e.convert_pt2e(prepared, fold_quantize=fold), x


def _runtime_precisions(report, layer_types: tuple[str, ...]) -> set[str]:
    compiled = report.graphs[0].ov_partitions[0].compiled
    return {
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) in layer_types
    }


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
    compiled = torch.compile(quantized, backend="fxvino")
    from fxvino import collect_reports

    with collect_reports() as report, torch.no_grad():
        for scale in (1.0, 7.0):  # another range: other parameters, computed per call
            torch.testing.assert_close(compiled(x * scale), quantized(x * scale), atol=1e-5, rtol=1e-5)
    assert_all_on_openvino(report)
    assert report.ov_ops["quantized_decomposed.choose_qparams.tensor"] == 2, str(report)


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


def test_torchao_int8_weight_only_freezes_the_int8_weights():
    """torchao's weight-only int8 (a tensor subclass) reaches the graph as int8 data and scales;
    those inner tensors are frozen into OpenVINO constants like plain weights, and the products
    read the int8 weights directly (the scale moved from the product onto the weight)."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64)).eval()
    quantize_(model, Int8WeightOnlyConfig())
    x = torch.randn(4, 256)
    out, report = run_fxvino(model, x)
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
