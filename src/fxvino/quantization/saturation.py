"""Whether the int8 products of a compiled model may saturate on this CPU.

Without int8 dot-product instructions (VNNI), oneDNN's u8 x s8 kernels add each pair of products
in 16 bits (``vpmaddubsw``), which saturates where activations and weights are both large: a PT2E
int8 CNN came out 2.1-6.9% of its output range off PyTorch's simulation as an emulated Haswell,
against 1.5e-8 on a VNNI CPU. No compile property turns it off, so the report says so, with the
quantizer's own remedy (7-bit activations cannot saturate: 2 x 127 x 128 < 2**15).
"""

from __future__ import annotations

from typing import Any

from fxvino.devices import cpu_features, may_run_on_cpu

_PRODUCTS = frozenset({"Convolution", "FullyConnected", "MatMul", "Deconvolution", "GroupConvolution"})


def saturation_note(compiled: Any, device: str) -> str | None:
    """The note for ``compiled`` when it runs int8 products on a CPU without VNNI, else None."""
    if not may_run_on_cpu(device) or "vnni" in cpu_features():
        return None
    try:
        executed = compiled.get_runtime_model().get_ordered_ops()
    except Exception:  # noqa: BLE001 - a device without a runtime model runs no CPU kernels
        return None
    products = 0
    for op in executed:
        info = op.get_rt_info()
        if info["layerType"].astype(str) in _PRODUCTS and info["runtimePrecision"].astype(str) in ("u8", "i8"):
            products += 1
    if not products:
        return None
    return (
        f"{products} int8 product(s) run on a CPU without VNNI, whose u8 x s8 kernels add pairs of products "
        "in 16 bits and may saturate (results then differ from PyTorch's simulation by more than the "
        "quantization's own error); quantize activations to 7 bits, e.g. "
        "get_default_x86_inductor_quantization_config(reduce_range=True), to avoid it"
    )
