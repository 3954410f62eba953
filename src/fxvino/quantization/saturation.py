"""Whether the int8 products of a compiled model may saturate on this CPU.

Without int8 dot-product instructions (VNNI), oneDNN's u8 x s8 kernels add each pair of products
in 16 bits (``vpmaddubsw``), which saturates where activations and weights are both large: a PT2E
int8 CNN came out 2.1-6.9% of its output range off PyTorch's simulation as an emulated Haswell,
against 1.5e-8 on a VNNI CPU. fxvino does not change the arithmetic the user quantized for (int8
was 0.53x f32's time on ResNet-50 on a Zen 3), so the note, logged once as a warning too, gives
both ways out measured there: the quantizer's 7-bit activations, which cannot saturate
(2 x 127 x 128 < 2**15) and keep int8's speed, or the plugin's low-precision transformations off,
which computes the dequantized graph in f32 (the simulation's values to 7e-8, at f32's speed).
"""

from __future__ import annotations

from typing import Any

import openvino as ov

from fxvino.devices import cpu_features, may_run_on_cpu
from fxvino.report import Note

_PRODUCTS = frozenset({"Convolution", "FullyConnected", "MatMul", "Deconvolution", "GroupConvolution"})
# The name ending of a FakeQuantize whose values keep to 7 bits (lowering/ops/quantized.py): a
# product over them cannot saturate. The plugin's runtime graph names the ops each layer fused.
SEVEN_BIT = "/7-bit"
# Runtime layers whose outputs lie within their input's bounds (a Reduce by the names it fused:
# a sum does not).
_BOUND_KEEPING = frozenset({"Reorder", "Reshape", "Transpose", "Pooling"})
_BOUND_KEEPING_REDUCE = ("ReduceMean", "ReduceMax", "ReduceMin")


def saturation_note(compiled: Any, device: str) -> Note | None:
    """The note for ``compiled`` when it runs int8 products on a CPU without VNNI, else None."""
    if not may_run_on_cpu(device) or "vnni" in cpu_features():
        return None
    try:
        executed = compiled.get_runtime_model().get_ordered_ops()
    except Exception:  # noqa: BLE001 - a device without a runtime model runs no CPU kernels
        return None
    # The activation's type, not the layer's runtimePrecision: a product over i8 weights with f32
    # activations (low-precision transformations off) reports "i8" but runs in f32.
    products = sum(
        1
        for op in executed
        if op.get_rt_info()["layerType"].astype(str) in _PRODUCTS
        and op.input(0).get_element_type() in (ov.Type.u8, ov.Type.i8)
        and not _seven_bit(op.input(0).get_source_output().get_node())
    )
    if not products:
        return None
    return Note(
        f"{products} int8 product(s) run on a CPU without VNNI, whose u8 x s8 kernels add pairs of products "
        "in 16 bits and may saturate (results then differ from PyTorch's simulation by more than the "
        "quantization's own error); quantize activations to 7 bits, e.g. "
        "get_default_x86_inductor_quantization_config(reduce_range=True), to avoid it at int8's speed, "
        "or compute them in f32 with OpenVINO's {'LP_TRANSFORMS_MODE': 'NO'} (options={'config': ...}, "
        "fxvino.load(config=...)): the simulation's values at f32's speed",
        warning="int8 saturation",
    )


def _seven_bit(layer: Any) -> bool:
    """Whether ``layer`` (of a runtime graph) produces values quantized to 7 bits: it fused such
    a FakeQuantize, or it reorders, reshapes, pools or averages the output of one that did (the
    plugin drops a requantize after a max pool, whose values keep their bounds)."""
    for _ in range(32):
        info = layer.get_rt_info()
        names = [n for n in info["originalLayersNames"].astype(str).split(",") if n]
        if any(name.endswith(SEVEN_BIT) for name in names):
            return True
        kind = info["layerType"].astype(str)
        keeps = kind in _BOUND_KEEPING or (kind == "Reduce" and all(n.startswith(_BOUND_KEEPING_REDUCE) for n in names))
        if not keeps:
            return False
        layer = layer.input(0).get_source_output().get_node()
    return False
