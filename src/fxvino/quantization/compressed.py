"""Weights stored compressed in the graph (int8, 4-bit) stay compressed on OpenVINO.

NNCF's ``compress_weights`` and quantize flows, and PT2E with folded weights, store a weight as
integers and decompress it in the graph: ``int -> float -> (- zero point) -> (* scale) -> matmul``,
with 4-bit values first unpacked from bytes by bitwise ops. Folded at compile time, that chain
becomes an f32 weight: four to eight times the bytes to read per call and no low-precision
kernels. Kept as ops over an integer Constant, OpenVINO's CPU plugin recognises the decompression
and runs the product over the compressed weight.

So, on each integer constant big enough to be a weight: the bit unpacking (integer ops only) is
evaluated once, and its result becomes a 4-bit OpenVINO constant when its values fit 4 bits;
the float part of the decompression is kept out of constant folding.
"""

from __future__ import annotations

from typing import Any

import torch

from fxvino.report import Note
from fxvino.utils.fx import KEEP_UNFOLDED, fetch_attr

aten = torch.ops.aten

# Smaller integer constants (scalars, tiny zero points) gain nothing from staying compressed.
MIN_WEIGHT_ELEMENTS = 64

# Ops that rearrange, unpack or shift integers; they count only while their result is an integer.
_INT_UNPACK_OPS = frozenset(
    {
        aten._to_copy.default,
        aten.sub.Tensor,
        aten.add.Tensor,
        aten.bitwise_and.Scalar,
        aten.bitwise_and.Tensor,
        aten.bitwise_right_shift.Tensor_Scalar,
        aten.bitwise_left_shift.Tensor_Scalar,
        aten.__rshift__.Scalar,
        aten.__and__.Scalar,
        aten.unsqueeze.default,
        aten.cat.default,
        aten.stack.default,
        aten.view.default,
        aten.reshape.default,
        aten._unsafe_view.default,
    }
)

# Float ops of a decompression, between the integer weight and the product reading it.
_DECOMPRESS_OPS = frozenset(
    {
        aten._to_copy.default,
        aten.sub.Tensor,
        aten.mul.Tensor,
        aten.div.Tensor,
        aten.view.default,
        aten.reshape.default,
        aten._unsafe_view.default,
        aten.permute.default,
        aten.t.default,
        aten.unsqueeze.default,
        aten.squeeze.dim,
        aten.squeeze.dims,
    }
)

_BITS_ATTR = "_fxvino_element_bits"


def four_bit(t: torch.Tensor) -> bool:
    """Whether ``t`` holds values the lowering stores as a 4-bit Constant (see :func:`_mark_four_bit`)."""
    return getattr(t, _BITS_ATTR, None) == 4


def _mark_four_bit(t: torch.Tensor) -> torch.Tensor:
    """Tag ``t`` on the tensor object itself: node metadata does not survive partitioning, where
    constants become the partition's inputs, but the tensor reaching ``lower_graph`` is this one."""
    setattr(t, _BITS_ATTR, 4)
    return t


def keep_compressed_weights(gm: torch.fx.GraphModule) -> int:
    """Mark the decompressions of ``gm``'s integer weights; returns how many weights were kept."""
    kept = 0
    for root in list(gm.graph.find_nodes(op="get_attr")):
        value = fetch_attr(gm, root.target)
        if not isinstance(value, torch.Tensor) or value.dtype not in (torch.int8, torch.uint8):
            continue
        if value.numel() < MIN_WEIGHT_ELEMENTS:
            continue
        stored = _unpack_once(gm, root)
        if stored is None:
            continue
        _drop_zero_subtractions(gm, stored)
        if _keep_float_chain(stored):
            kept += 1
    if kept:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return kept


def _unpack_once(gm: torch.fx.GraphModule, root: torch.fx.Node) -> torch.fx.Node | None:
    """The node holding ``root``'s integer values as the float chain reads them, the unpacking
    evaluated into a new constant (4-bit when the values fit); None when the integer part
    branches or does not end in one node."""
    region, end = {root}, root
    while True:
        users = list(end.users)
        if len(users) == 1 and users[0].target in _INT_UNPACK_OPS and _is_int(users[0]):
            nxt = users[0]
            if not all(a in region or a.op == "get_attr" for a in nxt.all_input_nodes):
                return None
            region.add(nxt)
            end = nxt
            continue
        # The nibble unpacking branches: and/shift of one byte tensor, joined by a cat or stack.
        joins = {u2 for u in users if u.target in _INT_UNPACK_OPS and _is_int(u) for u2 in _forward_ints(u)}
        join = _single_join(users, joins, region)
        if join is None:
            break
        end = join
    if end is root:
        values = fetch_attr(gm, root.target)
    else:
        values = _evaluate(gm, end)
        if values is None:
            return None
    if not _fits_four_bits(values):
        return end
    if end is root:
        values = values.detach()  # tag an alias, not the user's tensor object: no copy of the data
    name = f"_fxvino_int4_{root.name}"
    gm.register_buffer(name, _mark_four_bit(values.contiguous()), persistent=False)
    with gm.graph.inserting_before(end):
        attr = gm.graph.get_attr(name)
    attr.meta = dict(end.meta)
    end.replace_all_uses_with(attr)
    return attr


def _forward_ints(node: torch.fx.Node) -> set[torch.fx.Node]:
    """Integer unpacking nodes reachable from ``node`` through single-user chains, ``node`` included."""
    seen = {node}
    while len(node.users) == 1:
        (node,) = node.users
        if node.target not in _INT_UNPACK_OPS or not _is_int(node):
            break
        seen.add(node)
    return seen


def _single_join(
    users: list[torch.fx.Node], reach: set[torch.fx.Node], region: set[torch.fx.Node]
) -> torch.fx.Node | None:
    """The one cat/stack where every branch from ``users`` ends, with the branches added to ``region``."""
    if len(users) < 2 or not reach:
        return None
    joins = [n for n in reach if n.target in (aten.cat.default, aten.stack.default)]
    if len(joins) != 1:
        return None
    join = joins[0]
    branch_nodes = reach - {join}
    inputs = set(join.all_input_nodes)
    if not all(a in branch_nodes for a in inputs) or len(inputs) != len(users):
        return None
    region |= branch_nodes | {join}
    return join


def _is_int(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and not val.is_floating_point() and not val.is_complex()


def _evaluate(gm: torch.fx.GraphModule, end: torch.fx.Node) -> torch.Tensor | None:
    """``end``'s value, computed from the constants it depends on."""
    values: dict[torch.fx.Node, object] = {}
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    needed: set[torch.fx.Node] = set()
    stack = [end]
    while stack:
        n = stack.pop()
        if n in needed:
            continue
        needed.add(n)
        stack.extend(n.all_input_nodes)
    for n in sorted(needed, key=order.__getitem__):
        if n.op == "get_attr":
            values[n] = fetch_attr(gm, n.target)
        elif n.op == "call_function":
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), values.__getitem__)
            values[n] = n.target(*args, **kwargs)
        else:
            return None
    result = values[end]
    return result if isinstance(result, torch.Tensor) else None


def _fits_four_bits(t: torch.Tensor) -> bool:
    if t.dtype not in (torch.int8, torch.uint8) or t.numel() == 0:
        return False
    lo, hi = int(t.min()), int(t.max())
    return (t.dtype == torch.uint8 and hi <= 15) or (t.dtype == torch.int8 and lo >= -8 and hi <= 7)


def _drop_zero_subtractions(gm: torch.fx.GraphModule, stored: torch.fx.Node) -> None:
    """``w - 0`` becomes ``w`` along the float chain: OpenVINO's decompression pattern wants
    Convert -> Subtract -> Multiply, and some flows subtract a (zero) zero point last."""
    node = stored
    while len(node.users) == 1:
        (user,) = node.users
        if user.target not in _DECOMPRESS_OPS:
            return
        if user.target is aten.sub.Tensor and user.args[0] is node and len(user.args) == 2:
            zero = _constant_value(gm, user.args[1])
            same = user.meta.get("val") is not None and node.meta.get("val") is not None
            if (
                zero is not None
                and not zero.any()
                and same
                and user.meta["val"].shape == node.meta["val"].shape
                and user.meta["val"].dtype == node.meta["val"].dtype
            ):
                user.replace_all_uses_with(node)
                gm.graph.erase_node(user)
                continue
        node = user


def _constant_value(gm: torch.fx.GraphModule, a: object) -> torch.Tensor | None:
    """``a``'s value when it depends on constants only (a zero point is often converted and
    reshaped on its way to the subtraction), else None."""
    if isinstance(a, (int, float)):
        return torch.tensor(a)
    if not isinstance(a, torch.fx.Node):
        return None
    stack, seen = [a], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "get_attr":
            continue
        if n.op != "call_function" or n.target not in _DECOMPRESS_OPS:
            return None
        stack.extend(n.all_input_nodes)
    return _evaluate(gm, a)


def _keep_float_chain(stored: torch.fx.Node) -> bool:
    """Keep the decompression after ``stored`` out of constant folding; True if it leads to an op
    that reads it (a product, a gather) rather than ending in the graph's output."""
    node, chain = stored, []
    while len(node.users) == 1:
        (user,) = node.users
        if user.op != "call_function" or user.target not in _DECOMPRESS_OPS:
            break
        chain.append(user)
        node = user
    if not chain or any(u.op == "output" for u in node.users) or not node.users:
        return False
    for n in chain:
        n.meta[KEEP_UNFOLDED] = True
    return True


def dynamic_quantization_note(compiled: Any) -> Note | None:
    """What the user must know when OpenVINO quantizes activations of ``compiled`` on the fly.

    The CPU plugin's products over compressed weights (weight-only int8/int4) quantize their
    activations to int8 in groups (``DYNAMIC_QUANTIZATION_GROUP_SIZE``, 32 by default) on CPUs
    with int8 dot products: the int4 kernel that does so was 3x faster than the float one on an
    AVX-512 VNNI machine, and it is what optimum-intel ships. Results then differ from PyTorch's
    weight-only arithmetic by about 1e-3 relative, so the report says so, with the way back.
    """
    try:
        group = int(compiled.get_property("DYNAMIC_QUANTIZATION_GROUP_SIZE"))
    except Exception:  # noqa: BLE001 - a device without the property does not do it
        return None
    if group <= 0:
        return None
    products = 0
    for op in compiled.get_runtime_model().get_ordered_ops():
        if op.get_rt_info()["layerType"].astype(str) != "FullyConnected" or len(op.inputs()) < 2:
            continue
        activation, weight = (op.inputs()[i].get_element_type() for i in (0, 1))
        if activation.is_real() and weight.is_integral():
            products += 1
    if not products:
        return None
    return Note(
        f"{products} product(s) over compressed weights may quantize their activations to int8 in groups "
        f"of {group} (OpenVINO's DYNAMIC_QUANTIZATION_GROUP_SIZE, used on CPUs with int8 dot products); "
        "options={'config': {'DYNAMIC_QUANTIZATION_GROUP_SIZE': 0}} keeps them in float: exact, slower"
    )
