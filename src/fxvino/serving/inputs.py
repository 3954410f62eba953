"""Turning request bodies into model inputs, shared by the TorchServe handlers and the Ray deployment.

Every function raises :class:`BadRequest` with a message the client can act on; servers turn
it into a 400 answer for that request alone, and keep serving the others.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

# ImageNet normalisation: what ResNet-style classifiers were trained with.
IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int64": torch.int64}


class BadRequest(ValueError):
    """A request the model cannot be run on; the message says what was expected."""


def body(row: Any) -> Any:
    """The payload of one TorchServe request row (``data`` or ``body``), JSON decoded when it is JSON."""
    value = row.get("data", row.get("body")) if isinstance(row, Mapping) else row
    if value is None:
        raise BadRequest("empty request: send a JSON body or a file")
    if isinstance(value, (bytes, bytearray)):
        try:
            return json.loads(value)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return bytes(value)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def tensor_from_json(value: Any, shape: Sequence[int] | None, dtype: torch.dtype, key: str = "data") -> torch.Tensor:
    """One sample from a nested JSON list (or ``{key: nested list}``), checked against ``shape``."""
    if isinstance(value, Mapping):
        if key not in value:
            raise BadRequest(f"expected a JSON object with {key!r} (a nested list), got keys {sorted(value)}")
        value = value[key]
    if not isinstance(value, list):
        raise BadRequest(f"expected a nested JSON list of numbers, got {type(value).__name__}")
    try:
        t = torch.tensor(value, dtype=dtype)
    except (TypeError, ValueError, RuntimeError) as e:
        raise BadRequest(f"expected a rectangular nested list of numbers: {e}") from e
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise BadRequest(f"expected shape {list(shape)}, got {list(t.shape)}")
    return t


NPY_MAGIC = b"\x93NUMPY"


def tensor_from_npy(data: bytes, shape: Sequence[int] | None, dtype: torch.dtype) -> torch.Tensor:
    """One sample sent as a ``.npy`` file (``numpy.save``): compact where JSON lists are not
    (a 3x224x224 image is 600 kB instead of ~3 MB of text). Never unpickles."""
    import numpy as np

    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise BadRequest(f"expected a .npy file (numpy.save) without pickled objects: {e}") from e
    t = torch.from_numpy(np.ascontiguousarray(array)).to(dtype)
    if shape is not None and tuple(t.shape) != tuple(shape):
        raise BadRequest(f"expected shape {list(shape)}, got {list(t.shape)}")
    return t


def image_tensor(data: bytes, size: int) -> torch.Tensor:
    """An encoded image (PNG, JPEG, ...) as a normalised ``[3, size, size]`` float tensor.

    Resize the shorter side to ``size * 256 / 224`` then centre-crop, the usual ImageNet
    evaluation transform, written with PIL and torch (torchvision is not a dependency).
    """
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data)).convert("RGB")
    except (UnidentifiedImageError, OSError) as e:
        raise BadRequest(f"expected an image file (PNG, JPEG, ...); PIL cannot read the body: {e}") from e
    short = round(size * 256 / 224)
    w, h = image.size
    scale = short / min(w, h)
    image = image.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.BILINEAR)
    w, h = image.size
    left, top = (w - size) // 2, (h - size) // 2
    image = image.crop((left, top, left + size, top + size))
    pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8).reshape(size, size, 3)
    x = pixels.permute(2, 0, 1).float() / 255.0
    return (x - torch.tensor(IMAGE_MEAN).view(3, 1, 1)) / torch.tensor(IMAGE_STD).view(3, 1, 1)


def token_ids(value: Any, tokenizer: Any, max_length: int) -> list[int]:
    """Token ids of one text request: ``{"input_ids": [...]}``, or ``{"text": ...}``/plain text with a tokenizer."""
    if isinstance(value, Mapping) and "input_ids" in value:
        ids = value["input_ids"]
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
            raise BadRequest("'input_ids' must be a non-empty list of non-negative integers")
        if len(ids) > max_length:
            raise BadRequest(f"{len(ids)} input_ids is more than max_length {max_length}")
        return ids
    text = value.get("text") if isinstance(value, Mapping) else value
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadRequest(f"text must be UTF-8: {e}") from e
    if not isinstance(text, str):
        raise BadRequest('expected {"input_ids": [...]}, {"text": "..."} or a plain-text body')
    if tokenizer is None:
        raise BadRequest('this model has no tokenizer in its archive: send {"input_ids": [...]}')
    return tokenizer(text, truncation=True, max_length=max_length)["input_ids"]


def pad_batch(sequences: Sequence[Sequence[int]], length: int, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of a batch, every row padded to ``length``.

    One fixed length keeps one compiled graph per batch shape, instead of a recompile per
    sequence length.
    """
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(sequences), length), dtype=torch.int64)
    for i, seq in enumerate(sequences):
        ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.int64)
        mask[i, : len(seq)] = 1
    return ids, mask


def dtype_named(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; valid: {', '.join(DTYPES)}")
    return DTYPES[name]
