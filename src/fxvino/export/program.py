"""Capture: a model to a decomposed ``torch.export.ExportedProgram``.

``torch.export`` (non-strict: it runs the model's Python as Python, which captures more models
than strict mode's Dynamo tracing) gives one whole graph with sizes symbolic where the user's
``Dim``s say. ``run_decompositions`` then brings it down to the ATen ops the lowering registry
knows, with fxvino's own decomposition table, so an exported graph is made of the same ops as
the graphs ``torch.compile`` hands fxvino.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from fxvino.capture import decompositions
from fxvino.options import Options

from .containers import register_known_containers
from .errors import ExportError
from .signature import plain_spec


class _Function(torch.nn.Module):
    """A plain function as a module: ``torch.export`` takes modules only."""

    def __init__(self, fn: Callable[..., Any]):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


def _as_module(fn: Callable[..., Any]) -> torch.nn.Module:
    """``fn`` in a module whose ``forward`` has ``fn``'s signature: torch.export names the graph's
    inputs (and so the IR's) after ``forward``'s parameters."""
    forward = _Function.forward
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return _Function(fn)

    def named_forward(self: _Function, *args: Any, **kwargs: Any) -> Any:
        return forward(self, *args, **kwargs)

    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    named_forward.__signature__ = sig.replace(parameters=[self_param, *sig.parameters.values()])  # type: ignore[attr-defined]
    cls = type(getattr(fn, "__name__", "function").strip("<>") or "function", (_Function,), {"forward": named_forward})
    return cls(fn)


@contextlib.contextmanager
def _in_eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """An exported IR is for inference: capture dropout and batch norm as in ``eval()``, then
    give every submodule its own mode back (the user's model is not left changed)."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
    except NotImplementedError:
        # A PT2E-converted graph refuses eval() (torchao's ``_disallow_eval_train``): its dropout
        # and batch norm are ops of the graph already, so only the flags are set, as eval() would.
        for m, _ in modes:
            m.training = False
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def capture(
    model: torch.nn.Module | Callable[..., Any] | ExportedProgram,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    dynamic_shapes: Any = None,
) -> ExportedProgram:
    """``model`` as an ``ExportedProgram`` (one given already is used as it is)."""
    if isinstance(model, ExportedProgram):
        if args or kwargs or dynamic_shapes is not None:
            raise ExportError(
                "fxvino.export: an ExportedProgram carries its own example inputs and dynamic shapes; "
                "pass it without args, kwargs or dynamic_shapes"
            )
        return model
    if not isinstance(args, (tuple, list)):
        raise ExportError(
            f"fxvino.export: args must be a tuple of the model's positional inputs, got {type(args).__name__}"
        )
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ExportError(f"fxvino.export: kwargs must be a dict, got {type(kwargs).__name__}")
    if not isinstance(model, torch.nn.Module):
        if not callable(model):
            raise ExportError(
                f"fxvino.export takes an nn.Module, a function or an ExportedProgram, got {type(model).__name__}"
            )
        model = _as_module(model)
    register_known_containers()  # a decoder's DynamicCache, in its result or its inputs
    with _in_eval_mode(model), torch.no_grad():
        try:
            captured = torch.export.export(
                model, tuple(args), dict(kwargs or {}), dynamic_shapes=dynamic_shapes, strict=False
            )
        except Exception as e:
            hint = _fake_quantize_hint(model)
            if hint is None:
                raise
            raise ExportError(f"fxvino.export: torch.export failed ({type(e).__name__}); {hint}") from e
    return captured


def _fake_quantize_hint(model: torch.nn.Module) -> str | None:
    """What to do instead when ``model`` holds fake-quantize modules, which torch.export cannot
    capture: NNCF's quantizers (``nncf.quantize`` on an ``nn.Module``) and torch.ao's
    ``FakeQuantize`` (what ``nncf.strip`` makes of them) branch on tensor values in their forward."""
    kinds: list[type] = [torch.ao.quantization.FakeQuantizeBase]
    layers = sys.modules.get("nncf.torch.quantization.layers")  # only if the model could hold them
    if layers is not None:
        kinds.append(layers.BaseQuantizer)
    found = next((m for m in model.modules() if isinstance(m, tuple(kinds))), None)
    if found is None:
        return None
    return (
        f"the model holds fake-quantize modules ({type(found).__module__}.{type(found).__name__}), whose "
        "value-dependent branches torch.export cannot capture. Quantize the exported graph instead, as "
        "NNCF's PT2E flow does: nncf.quantize(torch.export.export(model, args).module(), dataset), or "
        "PT2E's prepare_pt2e/convert_pt2e; then fxvino.export the result"
    )


def decomposition_table(options: Options) -> Mapping[torch._ops.OpOverload, Callable]:
    """torch.export's Core ATen table with fxvino's changes (``capture/decompositions.py``).

    AOTAutograd's tracer decomposes composite ops (``linear``, ``layer_norm``, SDPA) on its own,
    which is why fxvino's table leaves them out; ``run_decompositions`` keeps every op its table
    does not name. So the table here is torch.export's default (Core ATen with the composite
    ops), less the ops OpenVINO runs whole, plus fxvino's and the user's own decompositions.
    """
    table = torch.export.default_decompositions()
    for op in decompositions.KEEP_UNDECOMPOSED:
        if op in table:
            table.pop(op)
    for op, fn in decompositions.decomposition_table(options).items():
        table[op] = fn
    return table


def decompose(program: ExportedProgram, options: Options) -> ExportedProgram:
    """``program`` in the ops the lowering registry knows (a new program; the given one is kept)."""
    with _flat_call(program) as (in_spec, out_spec):
        decomposed = program.run_decompositions(decomposition_table(options))
    if in_spec is not None:
        signature = decomposed.module_call_graph[0].signature
        signature.in_spec, signature.out_spec = in_spec, out_spec
    return decomposed


@contextlib.contextmanager
def _flat_call(program: ExportedProgram) -> Iterator[tuple[Any, Any]]:
    """``program``'s inputs and results in plain containers while it is decomposed; yields their
    real structures (``(None, None)`` when it has none).

    ``run_decompositions`` traces the program again, rebuilding the containers of its inputs and
    result from their leaves and flattening them. Rebuilding transformers' ``DynamicCache``
    computes (each layer starts from ``torch.tensor([])`` and concatenates the keys to it): the
    retrace then holds constants it loses ("Constant tensor lifted_tensor_0 is not in the
    constants dictionary"). Dicts and tuples of the same leaves rebuild without computing (and
    keep the arguments' names); the structures are put back on the decomposed program.
    """
    graph = program.module_call_graph
    signature = graph[0].signature if graph and graph[0].fqn == "" else None
    if signature is None or signature.in_spec is None or signature.out_spec is None:
        yield None, None
        return
    in_spec, out_spec = signature.in_spec, signature.out_spec
    signature.in_spec, signature.out_spec = plain_spec(in_spec), plain_spec(out_spec)
    try:
        yield in_spec, out_spec
    finally:
        signature.in_spec, signature.out_spec = in_spec, out_spec


def input_dim_names(
    model: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None, dynamic_shapes: Any
) -> dict[int, dict[int, str]]:
    """The user's ``Dim`` names per example tensor (``id(tensor)`` -> {dim: name}).

    The exported program knows its symbols only as ``s0``, ``s1``; the manifest and the docs of an
    IR read better with the names the user gave (``batch``, ``seq``).
    """
    if dynamic_shapes is None or isinstance(model, ExportedProgram):
        return {}
    kwargs = dict(kwargs or {})
    try:
        forward = model.forward if isinstance(model, torch.nn.Module) else model
        bound = inspect.signature(forward).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return {}
    if isinstance(dynamic_shapes, Mapping):
        pairs = [(bound[k], v) for k, v in dynamic_shapes.items() if k in bound]
    elif isinstance(dynamic_shapes, (tuple, list)):
        pairs = list(zip(bound.values(), dynamic_shapes, strict=False))
    else:
        return {}
    names: dict[int, dict[int, str]] = {}
    for value, spec in pairs:
        _walk_dims(value, spec, names)
    return names


def _walk_dims(value: Any, spec: Any, names: dict[int, dict[int, str]]) -> None:
    if spec is None:
        return
    if isinstance(value, torch.Tensor):
        items = (
            spec.items() if isinstance(spec, Mapping) else enumerate(spec) if isinstance(spec, (tuple, list)) else ()
        )
        for d, dim in items:
            name = getattr(dim, "__name__", None)
            if isinstance(d, int) and isinstance(name, str):
                names.setdefault(id(value), {})[d] = name
    elif isinstance(value, Mapping) and isinstance(spec, Mapping):
        for k, v in value.items():
            if k in spec:
                _walk_dims(v, spec[k], names)
    elif isinstance(value, (tuple, list)) and isinstance(spec, (tuple, list)):
        for v, s in zip(value, spec, strict=False):
            _walk_dims(v, s, names)
    elif isinstance(spec, (tuple, list)) and type(value) in pytree.SUPPORTED_NODES:
        # Another pytree node (a DynamicCache, an EncoderDecoderCache): its spec lists its children's.
        try:
            children, _ = pytree.SUPPORTED_NODES[type(value)].flatten_fn(value)
        except Exception:  # noqa: BLE001 - a node that cannot be flattened here: no names from it
            return
        for v, s in zip(children, spec, strict=False):
            _walk_dims(v, s, names)
