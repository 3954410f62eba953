"""Helpers around PyTorch's quantization flows; the quantized ops themselves are lowered in
``fxvino.lowering.ops.quantized``."""

from fxvino.quantization.export_prep import ready_for_quantizer, remove_dead_code
from fxvino.quantization.module_calls import separate_module_calls

__all__ = ["ready_for_quantizer", "remove_dead_code", "separate_module_calls"]
