"""Helpers of the diffusion tests: seeded images, per-component compile counts, report checks."""

from __future__ import annotations

import collections

import numpy as np
import torch

import fxvino
from harness import assert_all_on_openvino

# Float32 images of the compiled pipeline must equal eager's within this, on [0, 1] (issue 13).
TOLERANCE = 1e-3


def images(pipe, seed: int = 0, **kwargs) -> np.ndarray:
    """The pipeline's images on [0, 1] (numpy), for a fixed seed."""
    kwargs.setdefault("num_inference_steps", 2)
    kwargs.setdefault("output_type", "np")
    with torch.no_grad():
        return pipe(generator=torch.Generator().manual_seed(seed), **kwargs).images


def compiles_per_frame(report: fxvino.Report) -> collections.Counter:
    """OpenVINO compiles per Dynamo frame (one frame per compiled component when nothing breaks the
    graph): graph names are ``g<frame>/<recompile>.<n>``."""
    return collections.Counter(g.name[1:].split("/")[0] for g in report.graphs if g.partitions)


def check_report(report: fxvino.Report) -> None:
    """Every compiled graph ran fully on OpenVINO: no op in PyTorch, no fallback."""
    assert_all_on_openvino(report, partitions=None)
    assert all(g.ov_partitions and not g.torch_ops for g in report.graphs), str(report)
