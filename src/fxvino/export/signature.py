"""How an exported model is called: its inputs and outputs as leaves of the caller's pytrees.

The IR takes and gives flat, named tensors. The signature keeps what turns a Python call into
those tensors and back: the pytree structure of ``(args, kwargs)`` and of the result, and per
leaf its name, kind, dtype and shape (dynamic dims with their bounds). It is written into the
manifest as JSON, so that ``fxvino.load`` can check and bind calls without tracing anything.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import importlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree

from .containers import register_known_containers

logger = logging.getLogger("fxvino")

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class Dim:
    """A dynamic dimension: the user's ``Dim`` name (or torch's symbol) and its bounds."""

    name: str
    min: int
    max: int | None  # None: unbounded

    def holds(self, size: int) -> bool:
        return size >= self.min and (self.max is None or size <= self.max)

    def __str__(self) -> str:
        return f"{self.name}[{self.min}..{'' if self.max is None else self.max}]"


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One input or output of the call: a tensor, a shape scalar, a constant, or (an output) one
    of the call's input tensors returned unchanged."""

    name: str
    kind: str  # "tensor" | "symint" | "symfloat" | "symbool" | "constant" | "input" (outputs only)
    dtype: torch.dtype | None = None
    shape: tuple[int | Dim, ...] | None = None
    value: Any = None  # a constant's value
    port: int = -1  # the OpenVINO input or output index (tensors and shape scalars)
    # An "input" output: the name of the input leaf it returns, and whether the model copied it
    # (``x.clone()``: a new tensor of equal values) or returned it as it is (that very tensor).
    source: str | None = None
    copy: bool = False

    def describe(self) -> str:
        if self.kind == "constant":
            return f"{self.name}={self.value!r} (fixed at export)"
        if self.kind == "input":
            return f"{self.name} (input {self.source}{', copied' if self.copy else ''})"
        if self.kind != "tensor":
            return f"{self.name} ({self.kind})"
        dims = ", ".join(str(d) for d in self.shape or ())
        return f"{self.name} ({str(self.dtype).removeprefix('torch.')}, [{dims}])"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.dtype is not None:
            out["dtype"] = str(self.dtype).removeprefix("torch.")
        if self.shape is not None:
            out["shape"] = [d if isinstance(d, int) else dataclasses.asdict(d) for d in self.shape]
        if self.kind == "constant":
            out["value"] = self.value
        if self.kind == "input":
            out["input"], out["copy"] = self.source, self.copy
        if self.port >= 0:
            out["port"] = self.port
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Leaf:
        dtype = d.get("dtype")
        shape = d.get("shape")
        return cls(
            name=d["name"],
            kind=d["kind"],
            dtype=getattr(torch, dtype) if dtype is not None else None,
            shape=tuple(s if isinstance(s, int) else Dim(**s) for s in shape) if shape is not None else None,
            value=d.get("value"),
            port=d.get("port", -1),
            source=d.get("input"),
            copy=bool(d.get("copy", False)),
        )


def json_value(value: Any) -> Any:
    """``value`` if JSON keeps it as it is (a constant input or output), else its repr."""
    try:
        return value if json.loads(json.dumps(value)) == value else repr(value)
    except (TypeError, ValueError):
        return repr(value)


@dataclasses.dataclass
class Signature:
    inputs: list[Leaf]
    outputs: list[Leaf]
    in_spec: pytree.TreeSpec | None  # structure of (args, kwargs); None: flat positional tensors
    out_spec: pytree.TreeSpec | None  # structure of the result; None: a tuple of the leaves

    @functools.cached_property
    def tensor_inputs(self) -> list[Leaf]:
        return sorted((leaf for leaf in self.inputs if leaf.kind == "tensor"), key=lambda leaf: leaf.port)

    @functools.cached_property
    def _call(self) -> tuple[int, list[str], dict[str, Any], bool]:
        """What binding a call needs, worked out once: the number of positional inputs, the
        keywords, each keyword's value fixed at export (``_MISSING`` if it must be given), and
        whether every argument is one leaf (no nested containers: the fast path)."""
        args_spec, kwargs_spec = self.in_spec.children()
        keys = list(kwargs_spec.context or [])
        # Placeholders go through plain containers: a DynamicCache cannot be built of them.
        values = [leaf.value if leaf.kind == "constant" else _MISSING for leaf in self.inputs]
        defaults = pytree.tree_unflatten(values, plain_spec(self.in_spec))[1]
        required: dict[str, Any] = {}
        for k, spec in zip(keys, kwargs_spec.children(), strict=True):
            known = pytree.tree_leaves(defaults[k])
            required[k] = _MISSING if any(v is _MISSING for v in known) else pytree.tree_unflatten(known, spec)
        flat = all(c.is_leaf() for c in args_spec.children()) and all(c.is_leaf() for c in kwargs_spec.children())
        return args_spec.num_children, keys, required, flat

    def dims(self) -> dict[str, Dim]:
        """Every dynamic dimension of the inputs, by name."""
        return {d.name: d for leaf in self.inputs for d in (leaf.shape or ()) if isinstance(d, Dim)}

    def expected(self) -> str:
        return ", ".join(leaf.describe() for leaf in self.inputs)

    # -- calls ----------------------------------------------------------------------------------

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
        """The IR's input tensors for a call, in port order; errors say what was wrong and what is valid."""
        leaves = self._flatten(args, kwargs)
        tensors: list[torch.Tensor | None] = [None] * len(self.tensor_inputs)
        sizes: dict[str, tuple[int, str, int]] = {}  # a named dim's size, and where it was first seen
        for leaf, value in zip(self.inputs, leaves, strict=True):
            if leaf.kind == "constant":
                if isinstance(leaf.value, (bool, int, float, str, type(None))) and value != leaf.value:
                    raise ValueError(
                        f"input {leaf.name} was {leaf.value!r} when the model was exported, and the IR is "
                        f"specialized to it; got {value!r}"
                    )
                continue
            tensors[leaf.port] = _checked(leaf, value)
            for d, dim in enumerate(leaf.shape or ()):
                if not isinstance(dim, Dim) or not dim.name.isidentifier():
                    continue  # (a derived size such as 2*seq is checked against its bounds only)
                size = value.shape[d]
                first = sizes.setdefault(dim.name, (size, leaf.name, d))
                if first[0] != size:
                    raise ValueError(
                        f"input {leaf.name} has size {size} in dim {d}, input {first[1]} has {first[0]} in dim "
                        f"{first[2]}: both are {dim.name} and must be equal"
                    )
        return tensors  # type: ignore[return-value]

    def _flatten(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        if self.in_spec is None:  # no structure recorded: the tensors, positionally
            if kwargs or len(args) != len(self.inputs):
                raise TypeError(f"expected {len(self.inputs)} positional inputs: {self.expected()}")
            return list(args)
        positional, keys, defaults, flat = self._call
        if len(args) != positional:
            raise TypeError(
                f"the exported model takes {_call_form(positional, keys)} ({self.expected()}); "
                f"got {len(args)} positional input(s)"
            )
        if len(kwargs) > len(keys) or any(k not in defaults for k in kwargs):
            unknown = [k for k in kwargs if k not in defaults]
            raise TypeError(
                f"unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
                f"the exported model takes {_call_form(positional, keys)}: {self.expected()}"
            )
        ordered = {}
        for k in keys:
            value = kwargs.get(k, defaults[k])  # an input fixed at export (``use_cache=False``) may be left out
            if value is _MISSING:
                raise TypeError(f"missing input {k!r}; the exported model takes: {self.expected()}")
            ordered[k] = value
        if flat:
            return [*args, *ordered.values()]
        call = (tuple(args), ordered)
        try:  # the values at the signature's leaves, whatever they are (a list where a tensor goes)
            return self.in_spec.flatten_up_to(call)
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"the exported model takes inputs structured as {structure(self.in_spec)} ({self.expected()}); "
                f"got {structure(pytree.tree_structure(call))} ({e})"
            ) from None

    def rebuild(self, values: Sequence[Any]) -> Any:
        """The call's result in the structure the model returned (``out_spec``)."""
        if self.out_spec is None:
            return tuple(values)
        if self.out_spec.is_leaf():  # one tensor, returned as it is
            return values[0]
        return pytree.tree_unflatten(list(values), self.out_spec)

    # -- JSON -----------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs": [leaf.to_json() for leaf in self.inputs],
            "outputs": [leaf.to_json() for leaf in self.outputs],
            "in_spec": dump_spec(self.in_spec),  # torch.utils._pytree.treespec_dumps, parsed
            "out_spec": dump_spec(self.out_spec),
            "dynamic_dims": {name: {"min": d.min, "max": d.max} for name, d in sorted(self.dims().items())},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Signature:
        signature = cls(
            inputs=[Leaf.from_json(x) for x in d["inputs"]],
            outputs=[Leaf.from_json(x) for x in d["outputs"]],
            in_spec=load_spec(d.get("in_spec")),
            out_spec=load_spec(d.get("out_spec")),
        )
        names = {leaf.name for leaf in signature.tensor_inputs}
        for leaf in signature.outputs:
            if leaf.kind == "input" and leaf.source not in names:
                raise ValueError(f"output {leaf.name} returns input {leaf.source!r}, which is no tensor input")
        return signature


def structure(spec: pytree.TreeSpec) -> str:
    """``spec`` in brief: ``((*, *), {input_ids: *})``, ``*`` for a leaf."""
    if spec.is_leaf():
        return "*"
    children = [structure(c) for c in spec.children()]
    keys = spec.context if isinstance(spec.context, list) and len(spec.context) == len(children) else None
    if spec.type in (dict, collections.OrderedDict) or keys is not None:
        body = "{" + ", ".join(f"{k}: {c}" for k, c in zip(keys or [], children, strict=False)) + "}"
    elif spec.type is list:
        body = "[" + ", ".join(children) + "]"
    else:
        body = "(" + ", ".join(children) + ("," if len(children) == 1 else "") + ")"
    if spec.type in (tuple, list, dict):
        return body
    return f"{getattr(spec.type, '__name__', spec.type)}{body}"


def _call_form(positional: int, keys: Sequence[str]) -> str:
    parts = [f"{positional} positional input(s)"]
    if keys:
        parts.append(f"keyword(s) {', '.join(keys)}")
    return " and ".join(parts)


def _checked(leaf: Leaf, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"input {leaf.name} must be a torch.Tensor, got {type(value).__name__}; expected {leaf.describe()}"
        )
    if value.dtype != leaf.dtype:
        raise TypeError(f"input {leaf.name} has dtype {value.dtype}; expected {leaf.dtype} ({leaf.describe()})")
    if value.device.type != "cpu":
        raise ValueError(f"input {leaf.name} is on {value.device}; the exported model takes CPU tensors")
    shape = leaf.shape or ()
    if value.dim() != len(shape):
        raise ValueError(
            f"input {leaf.name} has shape {list(value.shape)}; expected rank {len(shape)}: {leaf.describe()}"
        )
    for d, (size, want) in enumerate(zip(value.shape, shape, strict=True)):
        ok = size == want if isinstance(want, int) else want.holds(size)
        if not ok:
            raise ValueError(
                f"input {leaf.name} has size {size} in dim {d} (shape {list(value.shape)}); "
                f"expected {want if isinstance(want, int) else f'{want.name} in {_range(want)}'}: {leaf.describe()}"
            )
    return value


def _range(d: Dim) -> str:
    return f"[{d.min}, {'inf' if d.max is None else d.max}]"


def path_name(path: Sequence[Any]) -> str:
    """A port name from a pytree key path: ``logits``, ``hidden_states.0``, ``output.1``, ``output``."""
    parts = []
    for k in path:
        if isinstance(k, pytree.MappingKey):
            parts.append(str(k.key))
        elif isinstance(k, pytree.SequenceKey):
            parts.append(str(k.idx))
        elif isinstance(k, pytree.GetAttrKey):
            parts.append(k.name)
        else:
            parts.append(str(k).strip(".[]'\""))
    if not parts:
        return "output"
    if isinstance(path[0], pytree.SequenceKey):
        parts.insert(0, "output")
    return ".".join(parts)


def leaf_paths(spec: pytree.TreeSpec) -> list[Sequence[Any]]:
    """The key path of each leaf of ``spec``, read off a tree of placeholders built from it, or,
    for containers that cannot hold placeholders, off the structure itself (``_spec_paths``)."""
    try:
        tree = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
        return [path for path, _ in pytree.tree_flatten_with_path(tree)[0]]
    except Exception:  # noqa: BLE001 - a container that computes on its leaves (DynamicCache)
        return list(_spec_paths(spec, ()))


def child_keys(spec: pytree.TreeSpec) -> list[str] | None:
    """The names of ``spec``'s children where its context lists one string per child (dicts,
    ``ModelOutput``; ``DynamicCache``, whose context is ``[keys, layout]``), else None."""
    n = len(spec.children())
    context = spec.context
    for candidate in (context, context[0] if isinstance(context, (list, tuple)) and context else None):
        if isinstance(candidate, (list, tuple)) and _names(list(candidate), n):
            return list(candidate)
    return None


def plain_spec(spec: pytree.TreeSpec) -> pytree.TreeSpec:
    """``spec`` with every container other than tuples, lists and dicts made a dict of the same
    keys (or a tuple): the same leaves in the same order, rebuilt without anyone's code."""
    if spec.is_leaf():
        return spec
    children = [plain_spec(c) for c in spec.children()]
    if spec.type in (tuple, list, dict):
        return pytree.TreeSpec(spec.type, spec.context, children)
    keys = child_keys(spec)
    if keys is not None:
        return pytree.TreeSpec(dict, keys, children)
    return pytree.TreeSpec(tuple, None, children)


def _spec_paths(spec: pytree.TreeSpec, prefix: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
    """Key paths from the structure alone: a child is named by its key where the node's context
    lists one string per child (dicts, ``ModelOutput``; ``DynamicCache``'s ``[keys, layout]``),
    else by its position."""
    if spec.is_leaf():
        yield prefix
        return
    children = spec.children()
    keys = child_keys(spec)
    for i, child in enumerate(children):
        key = pytree.MappingKey(keys[i]) if keys is not None else pytree.SequenceKey(i)
        yield from _spec_paths(child, (*prefix, key))


def dump_spec(spec: pytree.TreeSpec | None) -> Any:
    """``spec`` as torch's pytree JSON (``treespec_dumps``, parsed, so the manifest shows it as
    JSON rather than as a string), or None for a structure that has no serialized form."""
    if spec is None:
        return None
    try:
        return json.loads(pytree.treespec_dumps(spec))
    except Exception as e:  # noqa: BLE001 - a container type registered without a serialized name
        logger.warning("fxvino.export: the structure %s cannot be serialized (%s); it is saved flat", spec, e)
        return None


def load_spec(saved: Any) -> pytree.TreeSpec | None:
    """A structure saved by :func:`dump_spec`.

    Containers of other libraries (transformers' ``ModelOutput``) are known to pytree once their
    module is imported: like pickle, the module is imported by its name. If that fails, such a
    container comes back as a dict of the same keys (or its children as a tuple), with a warning.
    """
    if saved is None:
        return None
    text = json.dumps(saved)
    try:
        return pytree.treespec_loads(text)
    except NotImplementedError:
        pass
    protocol, root = json.loads(text)
    for name in sorted(_types(root) - set(pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE)):
        module = name.rpartition(".")[0]
        if not module:
            continue
        try:
            importlib.import_module(module)
        except Exception as e:  # noqa: BLE001 - any failure leaves the type unknown: handled below
            logger.debug("fxvino.load: importing %s for the saved structure failed: %s", module, e)
    register_known_containers()  # DynamicCache: a pytree node only once transformers registers it
    unknown = _types(root) - set(pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE)
    if unknown:
        logger.warning(
            "fxvino.load: %s cannot be imported here; results of that type come back as dicts",
            ", ".join(sorted(unknown)),
        )
        root = _plain(root, unknown)
    return pytree.treespec_loads(json.dumps([protocol, root]))


def _types(node: Mapping[str, Any]) -> set[str]:
    found = {node["type"]} if node.get("type") else set()
    for child in node.get("children_spec", ()):
        found |= _types(child)
    return found


def _plain(node: dict[str, Any], unknown: set[str]) -> dict[str, Any]:
    """``node`` with containers of ``unknown`` types made dicts (keys kept) or tuples."""
    node = dict(node, children_spec=[_plain(c, unknown) for c in node.get("children_spec", ())])
    if node.get("type") in unknown:
        try:
            context = json.loads(node["context"])
        except (TypeError, ValueError):
            context = None
        n = len(node["children_spec"])
        keys = next((c for c in (context, _head(context)) if _names(c, n)), None)  # DynamicCache: [keys, layout]
        if keys is not None:
            node["type"], node["context"] = "builtins.dict", json.dumps(keys)
        else:
            node["type"], node["context"] = "builtins.tuple", "null"
    return node


def _head(context: Any) -> Any:
    return context[0] if isinstance(context, list) and context else None


def _names(keys: Any, n: int) -> bool:
    """Whether ``keys`` names ``n`` children: a list of ``n`` strings."""
    return isinstance(keys, list) and len(keys) == n and all(isinstance(k, str) for k in keys)
