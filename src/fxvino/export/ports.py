"""Names and bounds on the exported ``ov.Model``'s ports, and the signature that describes them.

``lower_graph`` makes a Parameter per tensor placeholder with ``-1`` for every symbolic dim. An IR
for deployment says more: its inputs carry the call's names (``input_ids``), each dynamic dim the
bounds torch.export proved for it (``ov.Dimension(min, max)``; unbounded: ``-1``), and its outputs
names from their place in the returned structure (``logits``), so that OpenVINO users and
servers can address them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import openvino as ov
import openvino.opset16 as ops
import sympy
import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from fxvino.lowering.convert import LoweredGraph
from fxvino.utils.dtypes import OV_TO_TORCH

from .frozen import FrozenGraph
from .signature import Dim, Leaf, Signature, json_value, leaf_paths, path_name

# OpenVINO's largest dimension; torch's "no upper bound" comes as int_oo or as huge numbers.
_UNBOUNDED = 2**63 - 1


def _bound(x: Any) -> int | None:
    if x in (int_oo, sympy.oo) or not getattr(x, "is_number", True):
        return None
    n = int(x)
    return None if n >= _UNBOUNDED - 1 else n


class _Dims:
    """Symbolic sizes as :class:`Dim`s: names from the user's ``Dim``s, bounds from torch.export's
    range constraints (a derived size such as ``2*seq`` gets the bounds of its expression)."""

    def __init__(self, ranges: Mapping[sympy.Symbol, ValueRanges]):
        self.ranges = dict(ranges)
        self.names: dict[sympy.Symbol, str] = {}

    def name(self, symbol: sympy.Symbol, name: str | None) -> None:
        if name is not None and symbol not in self.names and name not in self.names.values():
            self.names[symbol] = name

    def of(self, size: int | torch.SymInt) -> int | Dim:
        if isinstance(size, int):
            return size
        expr = size.node.expr
        if expr.is_number:
            return int(expr)
        try:
            r = bound_sympy(expr, self.ranges)
            low, high = _bound(r.lower), _bound(r.upper)
        except Exception:  # noqa: BLE001 - an expression sympy cannot bound: dynamic, unbounded
            low, high = None, None
        text = str(expr.xreplace({s: sympy.Symbol(n) for s, n in self.names.items()}))
        return Dim(text, max(low or 0, 0), high)


def _partial_shape(shape: Sequence[int | Dim]) -> ov.PartialShape:
    return ov.PartialShape(
        [d if isinstance(d, int) else ov.Dimension(d.min, -1 if d.max is None else d.max) for d in shape]
    )


def name_ports(
    model: ov.Model,
    lowered: LoweredGraph,
    frozen: FrozenGraph,
    ranges: Mapping[sympy.Symbol, ValueRanges],
    in_spec: pytree.TreeSpec | None,
    out_spec: pytree.TreeSpec | None,
    dim_names: Sequence[Mapping[int, str]] = (),
) -> Signature:
    """Name and bound ``model``'s ports (in place) and describe the call they make up."""
    dims = _Dims(ranges)
    # The user's names for the symbols first, so that every shape below reads with them.
    for i, node in enumerate(frozen.placeholders):
        val = node.meta.get("val") if node is not None else None
        names = dim_names[i] if i < len(dim_names) else {}
        for d, size in enumerate(getattr(val, "shape", ())):
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                dims.name(size.node.expr, names.get(d))
    for node in frozen.placeholders:
        val = node.meta.get("val") if node is not None else None
        for size in getattr(val, "shape", ()):
            if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol):
                dims.name(size.node.expr, str(size.node.expr))

    placeholders = list(frozen.gm.graph.find_nodes(op="placeholder"))
    port_of = {placeholders[pos]: port for port, pos in enumerate(lowered.runtime_positions)}
    params = model.get_parameters()
    used: set[str] = set()
    inputs: list[Leaf] = []
    for i, node in enumerate(frozen.placeholders):
        if node is None:
            inputs.append(Leaf(_input_name(in_spec, i), "constant", value=json_value(frozen.constants[i])))
            continue
        val = node.meta["val"]
        shape = tuple(dims.of(s) for s in val.shape)
        port = port_of[node]
        param = params[port]
        param.set_partial_shape(_partial_shape(shape))
        param.output(0).get_tensor().set_names({node.name})
        used.add(node.name)
        inputs.append(Leaf(node.name, "tensor", val.dtype, shape, port=port))
    model.validate_nodes_and_infer_types()

    try:
        paths = leaf_paths(out_spec) if out_spec is not None else None
    except Exception:  # noqa: BLE001 - a container that cannot be rebuilt from placeholders
        paths = None
    output_node = next(iter(frozen.gm.graph.find_nodes(op="output")))
    results = pytree.tree_leaves(output_node.args[0])
    # Outputs that are inputs returned unchanged leave the IR: the caller has them already, and the
    # CPU plugin of OpenVINO 2026.4 frees wrongly around a Result that converts a Parameter to its
    # own type (what _own_tensor below would make of them) while the Parameter also feeds an SDPA
    # and inputs change shape between calls: BART's decode step returns its cross-attention cache
    # so, and heap corruption aborted the process on its fourth call.
    placeholder_of = {port: node for node, port in port_of.items()}
    ov_results = model.get_results()
    passed = {
        spec.index: port
        for spec in lowered.outputs
        if spec.kind == "tensor" and (port := _passed_input(model, ov_results[spec.index], spec.dtype)) is not None
    }
    for index in passed:
        model.remove_result(ov_results[index])
    input_leaf = {leaf.port: leaf for leaf in inputs if leaf.kind == "tensor"}
    outputs: list[Leaf] = []
    for k, spec in enumerate(lowered.outputs):
        name = path_name(paths[k]) if paths is not None and k < len(paths) else f"output.{k}"
        name = _unique(name, used)
        if spec.kind == "python":
            outputs.append(Leaf(name, "constant", value=json_value(spec.value)))
            continue
        if spec.index in passed:
            source = input_leaf[passed[spec.index]]
            copy = _copies(placeholder_of[source.port], results[k])
            outputs.append(Leaf(name, "input", source.dtype, source.shape, source=source.name, copy=copy))
            continue
        index = spec.index - sum(1 for i in passed if i < spec.index)  # the removed Results' ports are gone
        val = results[k].meta.get("val") if isinstance(results[k], torch.fx.Node) else None
        _own_tensor(model, index, to_bool=spec.dtype == torch.bool)
        model.output(index).get_tensor().set_names({name})
        if spec.kind == "tensor":
            outputs.append(Leaf(name, "tensor", spec.dtype, tuple(dims.of(s) for s in val.shape), port=index))
        else:
            outputs.append(Leaf(name, spec.kind, port=index))
    model.validate_nodes_and_infer_types()
    return Signature(inputs, outputs, in_spec, out_spec)


def _input_name(in_spec: pytree.TreeSpec | None, i: int) -> str:
    """A constant input's name from its place in ``(args, kwargs)``: ``use_cache``, ``args.1``."""
    if in_spec is None:
        return f"input.{i}"
    try:
        path = leaf_paths(in_spec)[i]
    except Exception:  # noqa: BLE001
        return f"input.{i}"
    name = path_name(path[1:]) if len(path) > 1 else f"input.{i}"
    positional = isinstance(path[0], pytree.SequenceKey) and path[0].idx == 0
    return f"args.{name.removeprefix('output.')}" if positional else name


def _unique(name: str, used: set[str]) -> str:
    candidate, n = name, 1
    while candidate in used:
        candidate, n = f"{name}_{n}", n + 1
    used.add(candidate)
    return candidate


def _passed_input(model: ov.Model, result: ov.Node, dtype: torch.dtype | None) -> int | None:
    """The input port whose Parameter ``result`` returns unchanged, or None.

    The lowering returns an input (``clone``, ``alias``, a cache rebuilt by concatenating it to
    nothing) as its Parameter itself, or through a Convert to its own type; a boolean one through
    a Convert to u8, the type boolean outputs leave in (the runtime views it as bool).
    """
    value = result.input_value(0)
    node = value.get_node()
    while node.get_type_name() == "Convert":
        source = node.input_value(0)
        have, want = source.get_element_type(), value.get_element_type()
        if have != want and not (have == ov.Type.boolean and want == ov.Type.u8 and dtype == torch.bool):
            return None
        value, node = source, source.get_node()
    if node.get_type_name() != "Parameter" or OV_TO_TORCH.get(node.get_element_type()) != dtype:
        return None  # (a u8 input returned as bool is a cast, not the input)
    return model.get_parameter_index(node)


_COPYING = frozenset(
    {
        torch.ops.aten.clone.default,
        torch.ops.aten._to_copy.default,
        torch.ops.aten.copy.default,
        torch.ops.aten.lift_fresh_copy.default,
    }
)


def _copies(placeholder: torch.fx.Node, output: torch.fx.Node) -> bool:
    """Whether ``output``, computed from ``placeholder`` without changing a value, passed
    through a copy on the way (``x.clone()``): then eager returns a new tensor, else (the
    input itself, an ``alias``, a cache concatenating it to nothing) the caller's own."""
    ancestors, stack = set(), [output]
    while stack:
        node = stack.pop()
        if node not in ancestors:
            ancestors.add(node)
            stack.extend(node.all_input_nodes)
    seen, stack = set(), [placeholder]
    while stack:  # the nodes on a path from placeholder to output
        node = stack.pop()
        if node in seen or node not in ancestors:
            continue
        seen.add(node)
        if node.op == "call_function" and node.target in _COPYING:
            return True
        stack.extend(node.users)
    return False


def _own_tensor(model: ov.Model, index: int, to_bool: bool) -> None:
    """Give output ``index`` a tensor of its own, so that its name is its own.

    OpenVINO keeps tensor names on the producing node's output: a Result reading a Parameter, or
    two Results reading one value, would share names. Such an output reads a Convert to its own
    type (which the plugin removes). Boolean outputs, which the lowering returns as u8 (the CPU
    plugin computes masks in u8), are converted back to ``boolean`` for users of the IR.
    """
    result = model.get_results()[index]
    source = result.input_value(0)
    target = ov.Type.boolean if to_bool else source.get_element_type()
    # OpenVINO names a Result's input tensor after the Result when the model is built: that name
    # is this output's own. (Named outputs are named in order: a second Result of one value finds
    # the first one's name there.)
    others = source.get_tensor().get_names() - {result.get_friendly_name()}
    if not others and source.get_element_type() == target:
        return
    result.input(0).replace_source_output(ops.convert(source, target).output(0))
