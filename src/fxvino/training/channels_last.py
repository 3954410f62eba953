"""Channels-last activations between a CNN's training forward and backward.

The CPU plugin runs convolutions channels-last (its ``acdb`` layout), but a graph's inputs and
outputs are plain (``abcd``). So a training forward reordered every saved activation to plain on
its way out (ResNet-50 batch 8: 101 reorders, ~100 ms of a ~290 ms forward), and the backward,
whose elementwise work the plugin runs in the plain layout of those inputs, reordered between it
and every convolution (126 reorders, ~50 ms). Eager PyTorch and Inductor pay neither: they keep
such activations channels-last and let strides describe them.

Here the forward saves them as NHWC tensors (:func:`save_channels_last`): a Transpose the plugin
merges into the reorder it already made, so it costs nothing. The backward then computes on
"rows" (:func:`compute_in_rows`): an activation ``[N, C, H, W]`` is held as ``[N, H*W, C]``, the
same bytes as the NHWC tensor and as the plugin's channels-last layout. Elementwise ops and
per-channel reductions run on rows unchanged; a convolution reads ``Reshape(Transpose(rows))``,
which the plugin turns into a no-op reorder (it merges a Transpose with the reorder after it, and
a Reshape that splits one axis between them, when the Transpose has one reader: so each reader
gets its own), and a convolution's result enters rows the same way. The pass uses rank 3, not an
NHWC rank 4: for rank-4 tensors the plugin picks layouts by itself (a Transpose out of a
convolution kept it channels-last, and so made its readers run on a permuted layout), while for
rank 3 it has only the plain one.
"""

from __future__ import annotations

import math

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import torch
import torch.fx
from openvino.utils.node_factory import NodeFactory

from fxvino.lowering import helpers as h
from fxvino.training.saved_values import SavedValues

aten = torch.ops.aten

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


# --------------------------------------------------------------------------- the FX partition


def save_channels_last(forward: torch.fx.GraphModule, backward: torch.fx.GraphModule) -> int:
    """Saves a convolutional forward's activations as NHWC tensors, and has the backward permute
    them back on entry; returns how many.

    An activation is a saved rank-4 value the forward computes (not one of its inputs, which
    reach the backward without a copy) whose shape is a convolution's input or output shape.
    Values also returned to the caller are left alone."""
    shapes = _convolution_shapes(forward)
    if not shapes:
        return 0
    saved = SavedValues(forward, backward)
    for i, value in list(saved.movable()):
        val = value.meta.get("val")
        if not isinstance(val, torch.Tensor) or tuple(val.shape) not in shapes:
            continue
        with forward.graph.inserting_before(forward.graph.output_node()):
            nhwc = forward.graph.call_function(aten.permute.default, (value, list(TO_NHWC)))
        nhwc.meta["val"] = val.permute(TO_NHWC).contiguous()
        meta = {k: v for k, v in saved.backward_meta(value).items() if k != "tensor_meta"}
        saved.resave(i, nhwc, {**meta, "val": nhwc.meta["val"]}, aten.permute.default, (list(TO_NCHW),))
    return saved.commit()


def _convolution_shapes(graph: torch.fx.GraphModule) -> set[tuple[int, ...]]:
    """The static rank-4 shapes of 2-d convolutions' inputs and outputs in ``graph``."""
    shapes: set[tuple[int, ...]] = set()
    for node in graph.graph.find_nodes(op="call_function", target=aten.convolution.default):
        for v in (
            node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None,
            node.meta.get("val"),
        ):
            if isinstance(v, torch.Tensor) and v.dim() == 4 and all(isinstance(d, int) for d in v.shape):
                shapes.add(tuple(v.shape))
    return shapes


def is_nhwc_transpose(node: ov.Node) -> bool:
    """Whether ``node`` is the Transpose of a rank-4 value to NHWC that saves an activation."""
    return (
        node.get_type_name() == "Transpose"
        and node.get_output_partial_shape(0).rank == ov.Dimension(4)
        and _constant_ints(node.input_value(1)) == list(TO_NHWC)
    )


# --------------------------------------------------------------------------- the OpenVINO backward

_ELEMENTWISE = frozenset(
    {
        "Abs", "Add", "Ceiling", "Clamp", "Convert", "Divide", "Equal", "Erf", "Exp", "Floor",
        "Greater", "GreaterEqual", "IsFinite", "IsInf", "IsNaN", "Less", "LessEqual", "Log",
        "LogicalAnd", "LogicalNot", "LogicalOr", "LogicalXor", "Maximum", "Minimum", "Multiply",
        "Negative", "NotEqual", "Power", "Relu", "Select", "Sigmoid", "Sign", "Sqrt",
        "SquaredDifference", "Subtract", "Tanh",
    }
)  # fmt: skip
_REDUCTIONS = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"})

Key = tuple[str, int]


def _key(value: ov.Output) -> Key:
    return value.get_node().get_name(), value.get_index()


def _static(value: ov.Output) -> list[int] | None:
    shape = value.get_partial_shape()
    return [d.get_length() for d in shape] if shape.is_static else None


def _constant_ints(value: ov.Output) -> list[int] | None:
    node = value.get_node()
    if node.get_type_name() != "Constant":
        return None
    return [int(v) for v in np.asarray(node.get_data()).reshape(-1)]


class _Rows:
    """The rows form of the values converted so far, and the nodes they made dead."""

    def __init__(self) -> None:
        self.rows: dict[Key, ov.Output] = {}
        self.originals: list[tuple[ov.Output, ov.Output, list[int]]] = []  # (NCHW value, its rows, shape)
        self.replaced: set[str] = set()  # nodes no materialised NCHW value may feed
        self.ones: dict[int, ov.Output] = {}  # a row of ones per length, for column sums

    def add(self, original: ov.Output, rows: ov.Output, shape: list[int]) -> None:
        self.rows[_key(original)] = rows
        self.originals.append((original, rows, shape))

    def get(self, value: ov.Output) -> ov.Output | None:
        return self.rows.get(_key(value))


def compute_in_rows(model: ov.Model) -> int:
    """Moves a backward's elementwise work on NHWC-saved activations into rows form; returns how
    many ops it converted (0: the model is unchanged)."""
    state = _Rows()
    factory = NodeFactory("opset16")
    converted = 0
    for node in model.get_ordered_ops():
        if node.get_output_size() != 1:
            continue
        kind = node.get_type_name()
        out = node.output(0)
        shape = _static(out)
        if kind == "Transpose" and shape is not None and len(shape) == 4:
            if _constant_ints(node.input_value(1)) == list(TO_NCHW):
                n, c, height, width = shape
                state.add(out, h.reshape(node.input_value(0), [n, height * width, c]), shape)
            elif state.get(node.input_value(0)) is not None:
                converted += _transpose_from_rows(node, state)
        elif kind in _ELEMENTWISE and shape is not None and len(shape) == 4:
            converted += _elementwise_in_rows(node, shape, state, factory)
        elif kind in _REDUCTIONS and state.get(node.input_value(0)) is not None:
            converted += _reduce_in_rows(node, state, factory)
        elif kind == "MatMul":
            converted += _matmul_on_rows(node, state)
        elif kind == "Slice" and state.get(node.input_value(0)) is not None:
            converted += _slice_in_rows(node, state)
        elif kind == "ScatterElementsUpdate":
            converted += _scatter_in_rows(node, state)
    if not converted:
        return 0
    for original, rows, shape in state.originals:
        for target in list(original.get_target_inputs()):
            if target.get_node().get_name() not in state.replaced:
                target.replace_source_output(_to_nchw(rows, shape))
    _copy_for_extra_views(model)
    model.validate_nodes_and_infer_types()
    return converted


# The CPU plugin lets a Reshape and a merged reorder (a Transpose into a convolution's layout)
# share their input's memory. With three such readers of one computed value it got that sharing
# wrong: a batch-norm gradient read in rows by a column sum through a Reshape, by a
# convolution through a merged reorder and by a weight gradient through a Reshape gave
# gradients off by 100% (the plugin copied the value for one reader after its memory had been
# reused; tests/training/data/three_views_*). Any two of the three computed right, and
# ResNet-50's backward has at most two per value. So past two such readers, Reshapes read a
# copy. (Several convolutions reading one value, Transposes only, were always computed right.)
_IN_PLACE_READERS = frozenset({"Reshape", "Transpose"})
_SHARED_READERS = 2


def _copy_for_extra_views(model: ov.Model) -> int:
    """Gives the Reshapes past the second in-place reader of a computed value a copy to read
    (``Maximum(x, x)``: an identity the plugin keeps, NaN included, where it removes ``x * 1``
    and ``x + -0``), at most two Reshapes per copy; returns how many copies. Views of a graph
    input are left alone: its memory is never reused."""
    copies = 0
    ordered = model.get_ordered_ops()
    live = {node.get_name() for node in ordered}  # replaced nodes may still be referenced
    for node in ordered:
        if node.get_output_size() != 1 or _views_an_input(node):
            continue
        out = node.output(0)
        readers = [
            t
            for t in out.get_target_inputs()
            if t.get_node().get_type_name() in _IN_PLACE_READERS and t.get_node().get_name() in live
        ]
        readers.sort(key=lambda t: t.get_node().get_type_name() == "Reshape")  # merged reorders stay
        extra = [t for t in readers[_SHARED_READERS:] if t.get_node().get_type_name() == "Reshape"]
        for i in range(0, len(extra), _SHARED_READERS):
            copy = ops.maximum(out, out).output(0)
            copies += 1
            for target in extra[i : i + _SHARED_READERS]:
                target.replace_source_output(copy)
    return copies


def _views_an_input(node: ov.Node) -> bool:
    """Whether ``node`` is a graph input or constant, or a chain of Reshapes and Transposes of one."""
    while node.get_type_name() in _IN_PLACE_READERS:
        node = node.input_value(0).get_node()
    return node.get_type_name() in ("Parameter", "Constant")


def _to_nchw(rows: ov.Output, shape: list[int]) -> ov.Output:
    """An NCHW reader's own copy of the value: one Transpose per reader, so that the plugin can
    merge each with the reorder to its reader's layout."""
    n, c, height, width = shape
    return h.reshape(h.transpose(rows, [0, 2, 1]), [n, c, height, width])


def _operand(value: ov.Output, shape: list[int], state: _Rows) -> ov.Output | None:
    """``value`` as an operand of a rows-form op whose NCHW result is ``shape``, or None."""
    found = state.get(value)
    if found is not None:
        return found
    s = _static(value)
    if s is None or len(s) > 4:
        return None
    n_, c_, height_, width_ = [1] * (4 - len(s)) + s
    n, c, height, width = shape
    if math.prod(s) == 1:
        return value if not s else h.reshape(value, [1, 1, 1])
    if height_ == 1 and width_ == 1:
        return h.reshape(value, [n_, 1, c_])  # per-channel (and per-sample) values
    if c_ == 1 and (height_, width_) == (height, width):
        return h.reshape(value, [n_, height * width, 1])
    if s != shape:
        return None
    spread = _spread(value)
    if spread is not None:
        return ops.broadcast(h.reshape(spread, [n, 1, c]), h.i64([n, height * width, c])).output(0)
    # A full-size value computed outside rows: free from a convolution's channels-last result,
    # else one copy (where the plain chain would have reordered into the next convolution).
    return h.transpose(h.reshape(value, [n, c, height * width]), [0, 2, 1])


def _spread(value: ov.Output) -> ov.Output | None:
    """The ``[N, C, 1, 1]`` value ``value`` broadcasts over the pixels (a global pooling's
    gradient), or None."""
    producer = value.get_node()
    if (
        producer.get_type_name() != "Broadcast"
        or producer.get_input_size() != 2
        or producer.get_attributes().get("mode") not in ("numpy", "bidirectional")
    ):
        return None
    source, full = _static(producer.input_value(0)), _static(value)
    if source is None or full is None or len(source) != 4 or source[2:] != [1, 1] or source[:2] != full[:2]:
        return None
    return producer.input_value(0)


def _elementwise_in_rows(node: ov.Node, shape: list[int], state: _Rows, factory: NodeFactory) -> int:
    """An elementwise op with an operand in rows, or over a pooling gradient spread over the
    pixels (which would otherwise be transposed into rows for its reader)."""
    attrs = node.get_attributes()
    if attrs.get("auto_broadcast", "numpy") != "numpy":
        return 0
    values = [node.input_value(i) for i in range(node.get_input_size())]
    if not any(state.get(v) is not None or _spread(v) is not None for v in values):
        return 0
    operands = [_operand(v, shape, state) for v in values]
    if any(o is None for o in operands):
        return 0
    rows = factory.create(node.get_type_name(), operands, attrs).output(0)
    state.add(node.output(0), rows, shape)
    state.replaced.add(node.get_name())
    return 1


def _transpose_from_rows(node: ov.Node, state: _Rows) -> int:
    """A permutation of a rows-form value that keeps H before W, together (a weight gradient's
    swap of samples and channels): one Transpose of the rows, then a Reshape of its result."""
    order = _constant_ints(node.input_value(1))
    source = node.input_value(0)
    shape = _static(source)
    if order is None or shape is None:
        return 0
    composed = [TO_NCHW[o] for o in order]  # the permutation of the NHWC axes
    where = composed.index(1)
    if where + 1 >= len(composed) or composed[where + 1] != 2:
        return 0
    rows_order = [{0: 0, 1: 1, 3: 2}[a] for a in composed if a != 2]  # NHWC axes -> rows axes (HW = 1)
    rows = state.get(source)
    result = _static(node.output(0))
    if rows_order != [0, 1, 2]:
        node.output(0).replace(h.reshape(h.transpose(rows, rows_order), result))
        state.replaced.add(node.get_name())
        return 1
    # To NHWC: the rows' own bytes. A Reshape of it (a channels-last weight gradient's operand)
    # is that Reshape of the rows; other readers read the rows viewed as NHWC.
    for target in list(node.output(0).get_target_inputs()):
        reader = target.get_node()
        if reader.get_type_name() == "Reshape" and _static(reader.output(0)) is not None:
            shape = _static(reader.output(0))
            reader.output(0).replace(rows if shape == _static(rows) else h.reshape(rows, shape))
    if node.output(0).get_target_inputs():
        node.output(0).replace(h.reshape(rows, result))
    state.replaced.add(node.get_name())
    return 1


def _reduce_in_rows(node: ov.Node, state: _Rows, factory: NodeFactory) -> int:
    """A reduction over whole NCHW axes (H and W together), run on rows; 0 where the result's
    axis order would differ (channels and pixels both kept)."""
    source = node.input_value(0)
    shape = _static(source)
    axes = _constant_ints(node.input_value(1))
    result = _static(node.output(0))
    if shape is None or axes is None or result is None:
        return 0
    axes = {a % 4 for a in axes}
    if (2 in axes) != (3 in axes) or (1 not in axes and 2 not in axes):
        return 0
    rows_axes = sorted({0} & axes | ({1} if 2 in axes else set()) | ({2} if 1 in axes else set()))
    reduced = _column_sums(node, state.get(source), shape, rows_axes, state)
    if reduced is None:
        attrs = node.get_attributes()
        reduced = factory.create(node.get_type_name(), [state.get(source), h.i64(rows_axes)], attrs).output(0)
    if _static(reduced) != result:
        reduced = h.reshape(reduced, result)
    node.output(0).replace(reduced)
    state.replaced.add(node.get_name())
    return 1


def _column_sums(node: ov.Node, rows: ov.Output, shape: list[int], rows_axes: list[int], state: _Rows):
    """A per-channel sum or mean over samples and pixels as ``ones @ rows`` summed over the
    samples, or None.

    The plugin's ReduceSum over the leading axes of a plain tensor updates its accumulators in
    memory for every row: 2-3x the time of the same sum over an NCHW tensor's trailing axes
    (ResNet-50's batch-norm gradients: 60 ms against 35), where a MatMul by a row of ones takes
    what the NCHW sum took."""
    if rows_axes != [0, 1] or node.get_type_name() not in ("ReduceSum", "ReduceMean"):
        return None
    if rows.get_element_type() != ov.Type.f32:
        return None
    n, c, height, width = shape
    ones = state.ones.get(height * width)
    if ones is None:
        ones = state.ones[height * width] = ops.constant(np.ones((1, height * width), np.float32)).output(0)
    per_sample = ops.matmul(ones, rows, False, False)  # [N, 1, C]
    sums = ops.reduce_sum(per_sample, h.i64([0, 1]), False).output(0)
    if node.get_type_name() == "ReduceMean":
        sums = ops.divide(sums, ops.constant(np.float32(n * height * width))).output(0)
    return sums


def _matmul_on_rows(node: ov.Node, state: _Rows) -> int:
    """A product of ``Reshape(x, [N, C, H*W])``: rows are that matrix transposed, which the
    MatMul reads by flipping its operand's transpose flag. A pointwise convolution's weight
    gradient sums such products over the batch; with both operands in rows the batch joins the
    pixels as one longer product instead (no [N, Cout, Cin] stack to sum, and a deeper product
    where a layer has few pixels: 49 at 7x7)."""
    attrs = node.get_attributes()
    flags = [attrs["transpose_a"], attrs["transpose_b"]]
    operands = [node.input_value(0), node.input_value(1)]
    sources: list[list[int] | None] = [None, None]
    for i, value in enumerate(operands):
        reshape = value.get_node()
        if reshape.get_type_name() != "Reshape":
            continue
        source = reshape.input_value(0)
        rows, shape = state.get(source), _static(source)
        if rows is None or shape is None:
            continue
        n, c, height, width = shape
        if _static(value) != [n, c, height * width]:
            continue
        operands[i], flags[i], sources[i] = rows, not flags[i], shape
    if sources == [None, None]:
        return 0
    batch_sum = _batch_sum_reader(node)
    if batch_sum is not None and sources[0] is not None and sources[1] is not None and flags == [True, False]:
        (n, ca, height, width), cb = sources[0], sources[1][1]
        merged = h.reshape(operands[0], [n * height * width, ca]), h.reshape(operands[1], [n * height * width, cb])
        batch_sum.output(0).replace(ops.matmul(merged[0], merged[1], True, False).output(0))
        state.replaced.add(batch_sum.get_name())
    else:
        node.output(0).replace(ops.matmul(operands[0], operands[1], flags[0], flags[1]).output(0))
    state.replaced.add(node.get_name())
    return 1


def _batch_sum_reader(node: ov.Node) -> ov.Node | None:
    """The ReduceSum over axis 0 (not kept) that is ``node``'s only reader, or None."""
    targets = list(node.output(0).get_target_inputs())
    if len(targets) != 1:
        return None
    reader = targets[0].get_node()
    if reader.get_type_name() != "ReduceSum" or reader.get_attributes().get("keep_dims"):
        return None
    axes = _constant_ints(reader.input_value(1))
    return reader if axes is not None and [a % 3 for a in axes] == [0] else None


def _scatter_in_rows(node: ov.Node, state: _Rows) -> int:
    """A max-pool gradient, scattered into each (sample, channel) plane of ``[N, C, H*W]``
    zeros, scattered instead along the pixels of rows: its updates and indices are rows of
    their ``[N, C, h, w]`` values, and its result is the rows of every Reshape of it to
    ``[N, C, H, W]`` (no Transpose into rows or out of them)."""
    data, indices, updates, axis = (node.input_value(i) for i in range(4))
    if _constant_ints(axis) not in ([2], [-1]):
        return 0
    fill = data.get_node()
    if fill.get_type_name() != "Broadcast" or _static(fill.input_value(0)) not in ([], [1]):
        return 0
    plane = _static(data)
    if plane is None or len(plane) != 3:
        return 0
    n, c, length = plane
    readers = [t.get_node() for t in node.output(0).get_target_inputs()]
    shapes = [_static(r.output(0)) for r in readers]
    if not all(r.get_type_name() == "Reshape" for r in readers) or any(
        s is None or len(s) != 4 or s[:2] != [n, c] or s[2] * s[3] != length for s in shapes
    ):
        return 0
    sources = []
    for value in (indices, updates):
        reshape = value.get_node()
        source = reshape.input_value(0)
        shape = _static(source)
        if reshape.get_type_name() != "Reshape" or shape is None or len(shape) != 4 or shape[:2] != [n, c]:
            return 0
        sources.append(_operand(source, shape, state))
    if None in sources:
        return 0
    zeros = ops.broadcast(fill.input_value(0), h.i64([n, length, c])).output(0)
    attrs = node.get_attributes()
    rows = ops.scatter_elements_update(zeros, *sources, h.i64(1), attrs["reduction"], attrs["use_init_val"])
    for reader, shape in zip(readers, shapes, strict=True):
        state.add(reader.output(0), rows.output(0), shape)
        state.replaced.add(reader.get_name())
    state.replaced.add(node.get_name())
    return 1


def _slice_in_rows(node: ov.Node, state: _Rows) -> int:
    """A Slice of spatial axes (a strided 1x1 convolution's input), taken on the NHWC bytes."""
    source = node.input_value(0)
    shape = _static(source)
    result = _static(node.output(0))
    if node.get_input_size() < 5 or shape is None or result is None:
        return 0
    axes = _constant_ints(node.input_value(4))
    if axes is None or not {a % 4 for a in axes} <= {2, 3}:
        return 0
    n, c, height, width = shape
    nhwc = h.reshape(state.get(source), [n, height, width, c])
    moved = h.i64([{2: 1, 3: 2}[a % 4] for a in axes])
    sliced = ops.slice(nhwc, node.input_value(1), node.input_value(2), node.input_value(3), moved).output(0)
    rn, rc, rh, rw = result
    state.add(node.output(0), h.reshape(sliced, [rn, rh * rw, rc]), result)
    state.replaced.add(node.get_name())
    return 1
