"""Helpers around PyTorch's quantization flows; the quantized ops themselves are lowered in
``fxvino.lowering.quantized``."""

from fxvino.quantization.module_calls import separate_module_calls

__all__ = ["separate_module_calls"]
