"""What the OpenVINO plugin executes for a compiled model, next to native conversion's.

Latency follows the executable graph, not the ``ov.Model`` we hand over: the CPU plugin fuses
MatMul with constant weights into FullyConnected, layer norm into MVN, attention into one
Subgraph, and folds what it can. Comparing layer-type histograms with ``ov.convert_model``'s
shows where a lowering costs speed, and :func:`constant_work` finds the worst pattern: layers
that read only constants, so they redo the same work on every call (GPT-2's weights were
transposed 48 times per call before ``linalg._matmul`` stored them pre-transposed).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import openvino as ov
import torch

from fxvino.devices import core
from fxvino.options import PRECISIONS
from fxvino.report import Report, collect_reports

# Layer types that are bookkeeping, not work done per call.
_NOT_WORK = {"Const", "Input", "Parameter", "Output", "Result"}


def _layer_type(op: Any) -> str:
    return op.get_rt_info()["layerType"].astype(str)


def runtime_ops(compiled: ov.CompiledModel, precisions: bool = False) -> collections.Counter:
    """Histogram of the layer types in ``compiled``'s executable graph; with ``precisions``, of
    "type precision" pairs (the precision each layer runs in: u8/i8 for int8 execution)."""
    ops = compiled.get_runtime_model().get_ordered_ops()
    if not precisions:
        return collections.Counter(_layer_type(op) for op in ops)
    return collections.Counter(f"{_layer_type(op)} {op.get_rt_info()['runtimePrecision'].astype(str)}" for op in ops)


def constant_work(compiled: ov.CompiledModel) -> list[str]:
    """Executable layers all of whose inputs are constants: work compile time should have done."""
    found = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        kind = _layer_type(op)
        if kind in _NOT_WORK or kind == "Reshape" or not op.inputs():  # the plugin reshapes in place
            continue
        sources = [_layer_type(i.get_source_output().get_node()) for i in op.inputs()]
        if all(s == "Const" for s in sources):
            found.append(f"{kind} {op.get_friendly_name()}")
    return found


def fxvino_runtime(
    model: Callable, inputs: Sequence[Any], options: Mapping[str, Any] | None = None, precisions: bool = False
) -> tuple[collections.Counter, list[str], Report]:
    """Compile ``model`` with fxvino, run it once, and return (histogram, constant work, report)."""
    compiled_fn = torch.compile(model, backend="fxvino", options=dict(options or {}))
    with collect_reports() as report, torch.no_grad():
        compiled_fn(*inputs)
    hist: collections.Counter = collections.Counter()
    work: list[str] = []
    for g in report.graphs:
        for p in g.ov_partitions:
            if p.compiled is None:
                raise RuntimeError(f"partition {p.name} was freed before it could be inspected")
            hist += runtime_ops(p.compiled, precisions)
            work += constant_work(p.compiled)
    return hist, work, report


def native_runtime(
    model: torch.nn.Module, inputs: Sequence[Any], precision: str = "f32", precisions: bool = False
) -> collections.Counter:
    """The same histogram for ``ov.convert_model`` + ``compile_model`` (the engine's own bound)."""
    with torch.no_grad():
        if isinstance(model, torch.fx.GraphModule):  # an exported (e.g. PT2E) graph: no TorchScript trace
            ov_model = ov.convert_model(torch.export.export(model, tuple(inputs)))
        else:
            example = inputs[0] if len(inputs) == 1 else tuple(inputs)
            ov_model = ov.convert_model(model, example_input=example)
    config = {"INFERENCE_PRECISION_HINT": PRECISIONS[precision], "PERFORMANCE_HINT": "LATENCY"}
    return runtime_ops(core().compile_model(ov_model, "CPU", config), precisions)


def pt2e_int8(model: torch.nn.Module, inputs: Sequence[Any], fold_quantize: bool) -> torch.nn.Module:
    """``model`` quantized with PyTorch's stock x86 PT2E quantizer, calibrated on ``inputs``: the
    graph ``fxvino graph --int8`` inspects (unfolded, native OpenVINO can convert it too)."""
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from fxvino.quantization import ready_for_quantizer

    exported = ready_for_quantizer(torch.export.export(model, tuple(inputs)).module())
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = prepare_pt2e(exported, quantizer)
    prepared(*inputs)
    return convert_pt2e(prepared, fold_quantize=fold_quantize)


def format_comparison(ours: collections.Counter, native: collections.Counter | None, work: list[str]) -> str:
    """A table of layer counts (fxvino vs native) and the constant work found."""
    kinds = sorted(set(ours) | set(native or {}), key=lambda k: (-ours.get(k, 0), k))
    width = max(len(k) for k in kinds) if kinds else 10
    lines = [f"{'layer type':{width}s}  {'fxvino':>7s}" + (f"  {'native':>7s}" if native is not None else "")]
    for k in kinds:
        row = f"{k:{width}s}  {ours.get(k, 0):7d}"
        if native is not None:
            mark = "" if ours.get(k, 0) == native.get(k, 0) else "  *"
            row += f"  {native.get(k, 0):7d}{mark}"
        lines.append(row)
    total = f"{'total':{width}s}  {sum(ours.values()):7d}"
    lines.append(total + (f"  {sum(native.values()):7d}" if native is not None else ""))
    if work:
        lines.append(f"\n{len(work)} layer(s) compute from constants only, on every call:")
        lines += [f"  {w}" for w in work]
    else:
        lines.append("\nno layer computes from constants only")
    return "\n".join(lines)
