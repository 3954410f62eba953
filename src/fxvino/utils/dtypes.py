"""dtype correspondences between torch, OpenVINO and numpy, kept in one place."""

from __future__ import annotations

import numpy as np
import openvino as ov
import torch

TORCH_TO_OV: dict[torch.dtype, ov.Type] = {
    torch.float32: ov.Type.f32,
    torch.float16: ov.Type.f16,
    torch.bfloat16: ov.Type.bf16,
    torch.float64: ov.Type.f64,
    torch.int64: ov.Type.i64,
    torch.int32: ov.Type.i32,
    torch.int16: ov.Type.i16,
    torch.int8: ov.Type.i8,
    torch.uint8: ov.Type.u8,
    torch.bool: ov.Type.boolean,
}
OV_TO_TORCH: dict[ov.Type, torch.dtype] = {v: k for k, v in TORCH_TO_OV.items()}

# The 16-bit floats: ATen computes their arithmetic in f32 (its ``opmath_type``) and rounds, and
# OpenVINO's CPU plugin computes them in f32 or in bf16 by CPU class (``devices.widened_types``).
SIXTEEN_BIT_FLOATS: frozenset[torch.dtype] = frozenset({torch.float16, torch.bfloat16})

# numpy cannot hold bf16: it travels as int16 bits and is re-labelled on either side.
TORCH_TO_NUMPY_CARRIER: dict[torch.dtype, torch.dtype] = {torch.bfloat16: torch.int16}


def ov_type(dtype: torch.dtype) -> ov.Type:
    try:
        return TORCH_TO_OV[dtype]
    except KeyError:
        raise TypeError(f"OpenVINO has no element type for {dtype}") from None


def torch_dtype(t: ov.Type) -> torch.dtype:
    try:
        return OV_TO_TORCH[t]
    except KeyError:
        raise TypeError(f"no torch dtype for OpenVINO element type {t}") from None


def real_dtype(dtype: torch.dtype) -> torch.dtype:
    """The element type a tensor travels as: complex64 as float32 pairs ([..., 2]), others as themselves."""
    return torch.float32 if dtype == torch.complex64 else dtype


_INT32_MIN, _INT32_MAX = torch.iinfo(torch.int32).min, torch.iinfo(torch.int32).max


def in_int32(low: int, high: int) -> bool:
    """Whether values from ``low`` to ``high`` lie in the int32 range: OpenVINO's CPU plugin computes
    int64 as int32, so int64 values outside it are not the values torch computes with."""
    return low >= _INT32_MIN and high <= _INT32_MAX


def is_supported_dtype(dtype: torch.dtype) -> bool:
    return dtype in TORCH_TO_OV


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A numpy view of a contiguous CPU tensor (bf16 as int16 bits); no copy when possible."""
    carrier = TORCH_TO_NUMPY_CARRIER.get(t.dtype)
    if carrier is not None:
        t = t.view(carrier)
    return t.numpy(force=False) if not t.requires_grad else t.detach().numpy()


def to_ov_tensor(t: torch.Tensor) -> ov.Tensor:
    """Wrap a contiguous torch tensor for OpenVINO without copying.

    The result does not keep ``t`` alive: the caller must hold ``t`` while OpenVINO uses it.
    """
    if t.dtype in TORCH_TO_NUMPY_CARRIER:
        return ov.Tensor(to_numpy(t), list(t.shape), TORCH_TO_OV[t.dtype])
    return ov.Tensor(to_numpy(t), shared_memory=True)
