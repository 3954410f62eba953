"""Quantized models export as they run: the saved IR, loaded with ``fxvino.load``, gives
``torch.compile(backend="fxvino")``'s results, runs its products in int8 (static quantization)
or reads i8/u8/i4/u4 weights (weight-only), as the executed graph shows, and its ``.bin`` holds
the weights compressed.

Tolerance against ``torch.compile``: both run the same lowering of the same graph with the same
plugin properties, and were equal bit for bit on this machine; ``1e-5`` of the output's range
leaves room for the plugin picking another kernel (another accumulation order) for the export's
graph, never for a different quantization (one int8 step is ~1e-2 of the range here).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import fxvino
from fxvino import collect_reports
from fxvino.tools.exec_graph import runtime_ops

pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
x86 = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")

# Weight-only products in float, as PyTorch computes them (see tests/lowering/test_quantized.py):
# by default the CPU plugin may quantize their activations on the fly, which is not what is checked.
EXACT = {"DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
INT8 = {"u8", "i8"}


class _CNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.Conv2d(32, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.c2(torch.relu(self.c1(x))))
        return self.fc(x.mean((2, 3)))


class _MLP(torch.nn.Module):
    """Not an ``nn.Sequential``: NNCF's ``nn.Module`` backend adds a hook storage module to the
    model, which ``Sequential.forward`` would call as a layer (NNCF then fails on its own)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(256, 512), torch.nn.Linear(512, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


def _cnn() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _CNN().eval(), torch.randn(2, 3, 16, 16)


def _mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return _MLP().eval(), torch.randn(4, 256)


def _f32_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * 4 for p in model.parameters())


def _calibration(x: torch.Tensor) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(x.shape, generator=g) for _ in range(4)]


def _weights(compiled: Any, layer_types: tuple[str, ...]) -> list[str]:
    """The element type each product of the executed graph reads its weight (input 1) in."""
    return [
        op.inputs()[1].get_element_type().get_type_name()
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) in layer_types
    ]


def _precisions(compiled: Any, layer_types: tuple[str, ...]) -> set[str]:
    """The runtime precisions of ``layer_types`` in the executed graph (``runtime_ops``'s "type precision")."""
    hist: collections.Counter = runtime_ops(compiled, precisions=True)
    return {key.split(" ")[1] for key in hist if key.split(" ")[0] in layer_types}


def _export_and_load(
    quantized: torch.nn.Module, x: torch.Tensor, tmp_path: Path, config: dict[str, Any] | None = None
) -> tuple[Any, torch.Tensor, int]:
    """Export ``quantized``, save, load; returns (the loaded model, its result on ``x``, the .bin size),
    with its result checked against ``torch.compile(backend="fxvino")``'s."""
    options = {"config": config} if config else None
    exported = fxvino.export(quantized, (x,), options=options)
    assert not exported.report.torch_ops and not exported.report.fallbacks, str(exported.report)
    directory = exported.save(tmp_path / "ir")
    loaded = fxvino.load(directory, config=config)
    compiled = torch.compile(quantized, backend="fxvino", options=options)
    with collect_reports() as report, torch.no_grad():
        out, reference = loaded(x), compiled(x)
    torch.testing.assert_close(out, reference, rtol=0, atol=1e-5 * reference.abs().max().item())
    (partition,) = [p for g in report.graphs for p in g.ov_partitions]
    assert _products(loaded.compiled_model) == _products(partition.compiled)  # executed as torch.compile does
    return loaded, out, (directory / "openvino_model.bin").stat().st_size


def _products(compiled: Any) -> collections.Counter:
    """The executed graph's products by runtime precision and weight type: ``Convolution u8 i8``."""
    return collections.Counter(
        f"{op.get_rt_info()['layerType'].astype(str)} {op.get_rt_info()['runtimePrecision'].astype(str)} "
        f"{op.inputs()[1].get_element_type().get_type_name()}"
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) in ("Convolution", "FullyConnected")
    )


def _x86() -> Any:
    return x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())


def _close_to_simulation(out: torch.Tensor, simulated: torch.Tensor) -> None:
    """OpenVINO's int8 arithmetic against PT2E's float simulation of it: a few quantization steps."""
    assert (out - simulated).abs().max() <= 0.05 * simulated.abs().max()


@pytest.mark.parametrize("fold", [False, True], ids=["fold_quantize=False", "fold_quantize=True"])
def test_pt2e_x86_runs_int8(fold: bool, tmp_path: Path):
    """PT2E with the x86 quantizer: convolutions and the linear run on u8/i8 inputs and read i8
    weights; with ``fold_quantize=False`` the weights' quantize is folded at export, so both
    files hold int8 weights."""
    model, x = _cnn()
    prepared = pt2e.prepare_pt2e(torch.export.export(model, (x,)).module(), _x86())
    for batch in _calibration(x):
        prepared(batch)
    quantized = pt2e.convert_pt2e(prepared, fold_quantize=fold)
    loaded, out, size = _export_and_load(quantized, x, tmp_path)
    layers = ("Convolution", "FullyConnected")
    assert _precisions(loaded.compiled_model, layers) <= INT8
    assert _weights(loaded.compiled_model, layers) == ["i8"] * 3
    assert size < 0.35 * _f32_bytes(model), size  # int8 weights, f32 biases and scales
    _close_to_simulation(out, quantized(x))


def _openvino_quantizer() -> Any:
    quantizer = pytest.importorskip("executorch.backends.openvino.quantizer", reason="ExecuTorch is not installed")
    return quantizer.OpenVINOQuantizer()


@pytest.mark.parametrize("quantizer", ["x86", "openvino"])
def test_nncf_quantize_pt2e_runs_int8(quantizer: str, tmp_path: Path):
    """The flow of PyTorch's tutorial "PyTorch 2 Export Quantization for OpenVINO torch.compile
    Backend": NNCF's ``quantize_pt2e`` on the exported model with a PT2E quantizer (the tutorial's
    ``OpenVINOQuantizer`` lives in ExecuTorch; NNCF's function takes the x86 quantizer too)."""
    nncf = pytest.importorskip("nncf")
    from nncf.experimental.torch.fx import quantize_pt2e

    chosen = _x86() if quantizer == "x86" else _openvino_quantizer()
    model, x = _cnn()
    quantized = quantize_pt2e(
        torch.export.export(model, (x,)).module(), chosen, nncf.Dataset(_calibration(x)), subset_size=4
    )
    loaded, out, size = _export_and_load(quantized, x, tmp_path)
    # NNCF gives the image input an asymmetric range (zero point 136, with bias correction): the
    # plugin runs that 3-channel convolution in f32 (torch.compile's graph too); the rest in int8.
    products = _products(loaded.compiled_model)
    assert products["Convolution u8 i8"] >= 1 and products["FullyConnected u8 i8"] == 1, products
    assert size < 0.35 * _f32_bytes(model), size
    _close_to_simulation(out, quantized(x))


def test_nncf_quantize_runs_int8(tmp_path: Path):
    """``nncf.quantize`` on the exported model: q/dq activations, int8 weights decompressed in the graph."""
    nncf = pytest.importorskip("nncf")
    model, x = _cnn()
    quantized = nncf.quantize(torch.export.export(model, (x,)).module(), nncf.Dataset(_calibration(x)), subset_size=4)
    loaded, out, size = _export_and_load(quantized, x, tmp_path)
    layers = ("Convolution", "FullyConnected")
    assert _precisions(loaded.compiled_model, layers) <= INT8
    assert _weights(loaded.compiled_model, layers) == ["i8"] * 3
    assert size < 0.35 * _f32_bytes(model), size
    _close_to_simulation(out, quantized(x))


def _nncf_fx(mode: str, **kw: Any) -> Callable[[torch.nn.Module, torch.Tensor], torch.nn.Module]:
    def compress(model: torch.nn.Module, x: torch.Tensor) -> torch.nn.Module:
        import nncf

        exported = torch.export.export(model, (x,)).module()
        return nncf.compress_weights(exported, mode=getattr(nncf.CompressWeightsMode, mode), **kw)

    return compress


def _nncf_module(mode: str, **kw: Any) -> Callable[[torch.nn.Module, torch.Tensor], torch.nn.Module]:
    def compress(model: torch.nn.Module, x: torch.Tensor) -> torch.nn.Module:
        import nncf

        mode_ = getattr(nncf.CompressWeightsMode, mode)
        return nncf.compress_weights(model, mode=mode_, dataset=nncf.Dataset([x]), **kw)

    return compress


def _torchao(config: str) -> Callable[[torch.nn.Module, torch.Tensor], torch.nn.Module]:
    def quantize(model: torch.nn.Module, x: torch.Tensor) -> torch.nn.Module:
        from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, PerGroup, quantize_

        if config == "int8":
            quantize_(model, Int8WeightOnlyConfig())
        else:
            quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(64)))
        return model

    return quantize


@pytest.mark.parametrize(
    ("flow", "weights", "ratio"),
    [
        # NNCF keeps one layer of a 4-bit model in 8 bits (u8: asymmetric).
        pytest.param(_nncf_fx("INT8_SYM"), ["i8", "i8"], 0.27, id="nncf-fx-int8_sym"),
        pytest.param(_nncf_fx("INT4_ASYM", group_size=64), ["u4", "u8"], 0.2, id="nncf-fx-int4_asym"),
        pytest.param(_nncf_module("INT8_ASYM"), ["u8", "u8"], 0.27, id="nncf-module-int8_asym"),
        pytest.param(_nncf_module("INT4_SYM", group_size=64), ["i4", "u8"], 0.2, id="nncf-module-int4_sym"),
        pytest.param(_torchao("int8"), ["i8", "i8"], 0.27, id="torchao-int8"),
        pytest.param(_torchao("int4"), ["i4", "i4"], 0.16, id="torchao-int4"),
    ],
)
def test_weight_only_reads_compressed_weights(flow, weights: list[str], ratio: float, tmp_path: Path):
    """Weight-only int8/int4 (NNCF ``compress_weights`` on the exported graph and on the
    ``nn.Module`` with NNCF's hooks, torchao): every product reads its weight as stored, 4-bit
    values as 4-bit constants, and the .bin is the compressed size (f32: 789 kB)."""
    if "nncf" in flow.__qualname__:
        pytest.importorskip("nncf")
    model, x = _mlp()
    f32 = _f32_bytes(model)
    quantized = flow(model, x)
    loaded, out, size = _export_and_load(quantized, x, tmp_path, EXACT)
    assert _weights(loaded.compiled_model, ("FullyConnected",)) == weights
    assert size < ratio * f32, (size, f32)
    with torch.no_grad():
        eager = quantized(x)
    # NNCF decompresses in float16 in eager, OpenVINO in float32 (tests/lowering/test_quantized.py)
    torch.testing.assert_close(out, eager, rtol=0, atol=2e-3 * eager.abs().max().item())


def test_nncf_fake_quantize_modules_are_an_error_saying_what_to_do(monkeypatch):
    """``nncf.quantize`` on an ``nn.Module`` leaves fake-quantize modules that branch on tensor
    values, which torch.export cannot capture: the error says to quantize the exported graph.

    Its fake quantizers run on NNCF's own reference functions, those it falls back on where its C++
    extension cannot be built: building that extension, on a machine's first use, made this test
    17.7 s instead of 5.8 alone on 2 cores (42 s in the suite), and its kernels are not what is
    tested here."""
    nncf = pytest.importorskip("nncf")
    from nncf.torch.quantization.extensions import QuantizedFunctionsCPU
    from nncf.torch.quantization.reference import ReferenceQuantizedFunctions

    monkeypatch.setattr(QuantizedFunctionsCPU, "_loaded_namespace", ReferenceQuantizedFunctions)
    model, x = _mlp()
    quantized = nncf.quantize(model, nncf.Dataset([x]), subset_size=1)
    with pytest.raises(
        fxvino.ExportError, match=r"fake-quantize modules .*torch\.export\.export\(model, args\)\.module"
    ):
        fxvino.export(quantized, (x,))
