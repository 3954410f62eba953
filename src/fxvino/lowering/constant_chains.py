"""Chains of arithmetic with constants, kept from the CPU plugin's reassociation where it changes
eager's result by more than a rounding.

OpenVINO fuses ``(x + a) + b`` into ``x + (a + b)`` and ``(x * a) * b`` into ``x * (a * b)``
when the first op has no other reader (``LinOpSequenceFusion``; a Subtract by a constant is an
Add by then, and so is a Divide by a power of two a Multiply: ``exact_division.py`` keeps the
others divisions). Eager rounds after each op. Mostly the two differ by a
rounding of the result; two kinds of constants make them differ by far more:

- addends that cancel: ``(x + 1.5 * 2**23) - 1.5 * 2**23`` is the classic round-to-integer
  trick, which fused became ``x + 0`` (4,075 of 4,096 values off, up to 0.04); ``(x + 1) - 1``
  of 1e-8 is 0 in eager, 1e-8 fused;
- factors whose product leaves the float range: ``x * 1e30 * 1e30`` fused is ``x * inf`` (NaN
  for 0, inf for 1e-30, where eager gives 0 and 1e30), ``x / 1e30 / 1e30`` is ``x * 0`` (the
  plugin flushes the subnormal product).

There the later op's constant is made a run-time value, ``Select(true, c, c)`` with a true
OpenVINO cannot fold (``helpers.always_true``), which the fusion does not match: the plugin then
computes both ops, rounding after each, as eager does. The cost is that Select per such op per
call: nothing for a scalar, a read of the constant for a tensor (as eager reads it), in graphs
that have such a chain only. In a sum whose addends cancel, each rounding before
the cancellation shows in the result (``x * 1e-7 + 1 + 2 - 3``: fusing ``+ 1 + 2`` alone left
748 of 4,096 values off), so none of its ops is fused; in a product only the op whose factor
leaves the range, and the chain after it starts afresh, as the plugin's fusion does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import exact_division
from fxvino.lowering import helpers as h

_ADDITIVE = frozenset({"Add", "Subtract"})
_MULTIPLICATIVE = frozenset({"Multiply", "Divide"})
_FLOATS = frozenset({ov.Type.f32, ov.Type.f16, ov.Type.bf16, ov.Type.f64})


@dataclass
class _Chain:
    """Ops the plugin fuses into one: the constants of all but the first, and what they fuse to."""

    additive: bool
    value: torch.Tensor
    links: list[ov.Input] = field(default_factory=list)
    changed: bool = False  # fused, some result differs by more than a rounding


def keep_constant_chains(model: ov.Model) -> int:
    """Rewrites ``model`` in place (see the module doc); returns how many constants it made
    run-time values."""
    chain_of: dict[ov.Node, _Chain] = {}
    late: list[ov.Input] = []
    for node in model.get_ordered_ops():
        link = _link(node)
        if link is None:
            continue
        data, term, constant = link
        additive = node.get_type_name() in _ADDITIVE
        chain = chain_of.get(data.get_node())
        if chain is None or chain.additive != additive or len(data.get_target_inputs()) != 1:
            chain_of[node] = _Chain(additive, term)
            continue
        together = chain.value + term if additive else chain.value * term
        beyond = _beyond_a_rounding(chain.value, term, together, additive, _range_of(node))
        if beyond and not additive:  # relative errors of products do not grow: only this one is
            late.append(constant)  # kept apart, and a fresh chain starts after it
            continue
        # In a sum, each rounding before a cancellation shows in its result: none is fused.
        chain.links.append(constant)
        chain.value, chain.changed, chain_of[node] = together, chain.changed or beyond, chain
    for chain in {id(c): c for c in chain_of.values() if c.changed}.values():
        late.extend(chain.links)
    if not late:
        return 0
    always = h.always_true(model)
    if always is None:  # no input to make a run-time value of
        return 0
    for target in late:
        value = target.get_source_output()
        target.replace_source_output(ops.select(always, value, value).output(0))
    model.validate_nodes_and_infer_types()
    return len(late)


def _link(node: ov.Node) -> tuple[ov.Output, torch.Tensor, ov.Input] | None:
    """For an Add, Subtract, Multiply or Divide of floats with one Constant operand: its other
    operand, what it adds or multiplies by (in float64, as the plugin's fusion sees it), and the
    input the Constant feeds. None for any other node (a Divide of a constant by ``x``, or one
    the plugin keeps a division, too)."""
    kind = node.get_type_name()
    if kind not in _ADDITIVE | _MULTIPLICATIVE or node.get_output_element_type(0) not in _FLOATS:
        return None
    values = [h.constant_value(node.input_value(i)) for i in range(2)]
    if (values[0] is None) == (values[1] is None):
        return None
    at = 0 if values[0] is not None else 1
    if kind == "Divide" and (at == 0 or exact_division.kept_exact(node)):
        return None
    term = values[at].to(torch.float64)
    if kind == "Subtract" and at == 1:
        term = -term
    elif kind == "Divide":
        term = 1 / term
    return node.input_value(1 - at), term, node.input(at)


def _range_of(node: ov.Node) -> torch.finfo:
    """The float type the plugin computes ``node`` in: bf16 as bf16 (or f32, whose range is the
    same), f16 and f64 as f32."""
    return torch.finfo(torch.bfloat16 if node.get_output_element_type(0) == ov.Type.bf16 else torch.float32)


def _beyond_a_rounding(
    before: torch.Tensor, term: torch.Tensor, together: torch.Tensor, additive: bool, limits: torch.finfo
) -> bool:
    """Whether fusing ``term`` into ``before`` changes some result by more than a rounding."""
    finite = before.isfinite() & term.isfinite()
    overflows = finite & (together.abs() > limits.max)
    if additive:  # eager rounds x + before at the scale of before; fused, at the scale of together
        lost = before.abs() > 2 * together.abs()
    else:  # a product the plugin flushes to zero, or rounds as a subnormal
        lost = (before != 0) & (term != 0) & (together.abs() < limits.tiny)
    return bool((overflows | (finite & lost)).any())
