"""int8 and int4 weights for the decoder IR, compressed by NNCF on the lowered model.

The weights are compressed on the OpenVINO model rather than on the PyTorch module: NNCF's data-free
weight compression of an ``ov.Model`` needs no copy of the module, no calibration data and no
second export, and it writes the pattern OpenVINO's CPU and GPU plugins read compressed (an i8/u8
or i4 Constant, Convert, Subtract of the zero point, Multiply by the scales) into each product, so
the products read 8- or 4-bit weights at run time. It is also the form optimum-intel's
``--weight-format int8/int4`` exports, which GenAI's users compare against.

int8 is asymmetric per output channel (every product, the embedding and the output layer); int4 is
symmetric in groups of ``group_size`` inputs, with the embedding and the output layer kept in int8
(NNCF's default: they hurt the most in 4 bits). A group size that does not divide a layer's inputs
is lowered to one that does (NNCF's ``ADJUST``): the suite's small models have 64 inputs.
"""

from __future__ import annotations

import logging

import openvino as ov


def compress(model: ov.Model, weights: str, group_size: int) -> ov.Model:
    """``model`` with its weights in ``weights`` (``"int8"`` or ``"int4"``): NNCF rewrites it in place."""
    import nncf
    from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

    log = logging.getLogger("nncf")
    level = log.level
    log.setLevel(logging.WARNING)  # NNCF tabulates its bit widths at INFO on every call
    try:
        if weights == "int8":
            return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
        return nncf.compress_weights(
            model,
            mode=nncf.CompressWeightsMode.INT4_SYM,
            group_size=group_size,
            ratio=1.0,
            advanced_parameters=AdvancedCompressionParameters(group_size_fallback_mode=GroupSizeFallbackMode.ADJUST),
        )
    finally:
        log.setLevel(level)
