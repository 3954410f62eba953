"""``fxvino.export``: a PyTorch model to one named, bounded ``ov.Model``, step by step.

capture (torch.export) -> decompose (fxvino's table) -> freeze (weights as constants) -> lower
(the lowering registry, all or nothing) -> name the ports -> the manifest.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from fxvino.compilation import plugin_config
from fxvino.options import Options
from fxvino.report import GraphReport, PartitionReport, publish

from . import frozen as freezing
from . import lowered as lowering
from . import program
from .manifest import Manifest, versions
from .model import ExportedModel
from .ports import name_ports


def export(
    model: torch.nn.Module | Callable[..., Any] | ExportedProgram,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    dynamic_shapes: Any = None,
    options: Mapping[str, Any] | None = None,
) -> ExportedModel:
    """Export ``model`` called with ``args``/``kwargs`` as one OpenVINO model.

    ``dynamic_shapes`` is ``torch.export``'s (``Dim``s per input dim); ``options`` are fxvino's
    (``device`` and ``config`` for running the result here, ``precision``, ``decompositions``,
    ``disabled_ops``). Raises :class:`ExportError` listing every op that does not lower.
    """
    opts = Options.parse(options)
    t0 = time.perf_counter()
    captured = program.capture(model, args, kwargs, dynamic_shapes)
    dim_names = _leaf_dim_names(captured, model, args, kwargs, dynamic_shapes)
    decomposed = program.decompose(captured, opts)  # a new program: the frozen graph is ours to change
    call_spec = decomposed.call_spec
    ranges = dict(decomposed.range_constraints)
    graph = freezing.freeze(decomposed)
    name = type(model).__name__ if not isinstance(model, ExportedProgram) else "exported_program"
    t1 = time.perf_counter()
    lowered = lowering.lower(graph.gm, opts, name)
    signature = name_ports(lowered.model, lowered, graph, ranges, call_spec.in_spec, call_spec.out_spec, dim_names)
    graph_config = plugin_config.plugin_config(lowered.model)
    plugin_config.round_truncated_casts(lowered.model, opts.compile_config(graph_config), opts.device)
    t2 = time.perf_counter()

    report = GraphReport(name, "export", num_nodes=sum(lowered.op_counts.values()))
    report.ov_ops.update(lowered.op_counts)
    report.frozen_inputs, report.folded_nodes = graph.frozen, graph.folded
    report.partitions.append(
        PartitionReport(name, report.num_nodes, collections.Counter(lowered.op_counts), lowering_seconds=t2 - t1)
    )
    publish(report)
    manifest = Manifest(
        signature=signature,
        precision=opts.precision,
        graph_config=graph_config,
        compile_config=opts.compile_config(graph_config),
        report={
            "op_nodes": report.num_nodes,
            "ops_on_openvino": dict(sorted(lowered.op_counts.items())),
            "frozen_inputs": graph.frozen,
            "folded_nodes": graph.folded,
            "capture_seconds": round(t1 - t0, 3),
            "lowering_seconds": round(t2 - t1, 3),
        },
        versions=versions(),
    )
    return ExportedModel(lowered.model, manifest, opts, report, keep=graph.gm)


def _leaf_dim_names(
    captured: ExportedProgram, model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None, dynamic_shapes: Any
) -> list[dict[int, str]]:
    """The user's ``Dim`` names for each input leaf of the call, where they can be matched."""
    names = program.input_dim_names(model, args, kwargs, dynamic_shapes)
    if not names:
        return []
    leaves, spec = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
    if spec != captured.call_spec.in_spec:
        return []
    return [names.get(id(leaf), {}) for leaf in leaves]
