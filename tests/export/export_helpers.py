"""Helpers of the exporter's tests (conftest.py builds the models)."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Any

import openvino as ov
import torch

from fxvino.tools.exec_graph import runtime_ops


@dataclasses.dataclass
class Exported:
    model: torch.nn.Module  # in eval mode: the expectation
    exported: Any  # fxvino.ExportedModel
    saved: Path


def executed(compiled: ov.CompiledModel) -> collections.Counter:
    """The layer types OpenVINO's plugin executes for ``compiled``."""
    return runtime_ops(compiled)
