"""Parameters, buffers and constants of an exported program as constants of its graph.

``torch.export`` lifts them to graph inputs (the graph signature says which is which). An IR
for deployment holds them as OpenVINO Constants, as ``torch.compile``'s inference graphs do:
the same pass (``passes.freezing.freeze_and_fold``) makes them ``get_attr`` nodes, keeps
compressed weights compressed and folds what they make constant.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind

from fxvino.passes import freezing

from .errors import ExportError


@dataclasses.dataclass
class FrozenGraph:
    """The program's graph with only its user inputs left as placeholders."""

    gm: torch.fx.GraphModule
    # Per user input leaf, in the call's flattened order: its placeholder, or None for an input
    # that torch.export specialized to a constant (``use_cache=False``), whose value is in ``constants``.
    placeholders: list[torch.fx.Node | None]
    constants: dict[int, Any]
    frozen: int  # parameters, buffers and constant tensors made constants
    folded: int  # ops on constants only, evaluated once here


def freeze(program: ExportedProgram) -> FrozenGraph:
    """Freeze ``program``'s state into its graph (in place: pass a program of your own)."""
    signature = program.graph_signature
    mutations = [
        s
        for s in signature.output_specs
        if s.kind in (OutputKind.BUFFER_MUTATION, OutputKind.PARAMETER_MUTATION, OutputKind.USER_INPUT_MUTATION)
    ]
    if mutations:
        written = ", ".join(f"{s.target or s.arg.name} ({s.kind.name.lower()})" for s in mutations)
        raise ExportError(
            f"fxvino.export: the model writes state in place ({written}); an exported IR holds its "
            "weights and buffers as constants, so it cannot carry such writes"
        )
    others = [s for s in signature.output_specs if s.kind != OutputKind.USER_OUTPUT]
    if others:
        raise ExportError(f"fxvino.export: outputs of kind {others[0].kind.name} are not exported (inference only)")
    gm = program.graph_module
    nodes = list(gm.graph.find_nodes(op="placeholder"))
    if len(nodes) != len(signature.input_specs):
        raise ExportError("fxvino.export: the exported graph's inputs do not match its signature")
    frozen: dict[int, torch.Tensor] = {}
    placeholders: list[torch.fx.Node | None] = []
    constants: dict[int, Any] = {}
    inlined: list[tuple[torch.fx.Node, Any]] = []
    for i, (spec, node) in enumerate(zip(signature.input_specs, nodes, strict=True)):
        if spec.kind == InputKind.USER_INPUT:
            if isinstance(spec.arg, ConstantArgument):
                constants[len(placeholders)] = spec.arg.value
                placeholders.append(None)
                inlined.append((node, spec.arg.value))
            else:
                placeholders.append(node)
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            frozen[i] = _state(program, spec.target)
        else:
            raise ExportError(f"fxvino.export: graph input {spec.arg.name} of kind {spec.kind.name} is not supported")
    _drop_metadata_checks(gm)
    with torch.no_grad():
        folded = freezing.freeze_and_fold(gm, frozen)  # by placeholder position: before inlining
    for node, value in inlined:
        _inline(gm, node, value)
    if inlined:
        gm.recompile()
    return FrozenGraph(gm, placeholders, constants, len(frozen), folded)


def _drop_metadata_checks(gm: torch.fx.GraphModule) -> None:
    """Erase ``_assert_tensor_metadata`` nodes: torch.export checks each ``.to(dtype)``'s input
    with one, which on a weight is always true once it is a constant, and which gives an int8
    weight a second user: the decompression of NNCF's compressed weights (``int8 -> f16 -> * scale``)
    then no longer reads as one chain, and ``keep_compressed_weights`` would let it fold into an f32
    weight. The runner checks every input's dtype at call time."""
    for node in list(gm.graph.find_nodes(op="call_function", target=torch.ops.aten._assert_tensor_metadata.default)):
        if not node.users:
            gm.graph.erase_node(node)


def _state(program: ExportedProgram, target: str) -> torch.Tensor:
    """A parameter's, buffer's or lifted constant's tensor (non-persistent buffers and constants
    live in ``program.constants``, the rest in its state dict)."""
    value = program.state_dict.get(target)
    if value is None:
        value = program.constants.get(target)
    if not isinstance(value, torch.Tensor):
        raise ExportError(f"fxvino.export: no tensor for {target} in the exported program's state")
    return value


def _inline(gm: torch.fx.GraphModule, node: torch.fx.Node, value: Any) -> None:
    """A constant user input's uses take its value; the placeholder goes."""
    for user in list(node.users):
        user.args, user.kwargs = torch.fx.node.map_arg((user.args, user.kwargs), lambda a: value if a is node else a)
    gm.graph.erase_node(node)
