"""What the training path (``aot_autograd=True``) asks of AOTAutograd beyond inference.

AOTAutograd's default partitioner saves for the backward whatever the forward computed that the
backward reads. In eager PyTorch or Inductor a saved ``weight.t()`` is a free view; from an
OpenVINO forward every saved tensor is a computed output that the runtime copies into a torch
tensor, so BERT's forward spent most of its transfers materialising and copying transposed
weights (two 3072x768 transposes took 100 ms of a 550 ms forward). The min-cut partitioner
Inductor uses saves the weight itself (an input: nothing to copy) and redoes cheap ops such as
views and pointwise ops in the backward, where OpenVINO fuses them; it also saves fewer
activations, which is peak memory. Random ops are never recomputed (their outputs, dropout masks
included, are saved), so forward and backward still see one draw.

It still saves permutations of activations (``x.t()`` for a weight gradient, attention heads
permuted for a batched product): free views in PyTorch, a Transpose copy in an OpenVINO forward
(GPT-2 small: 84 of them, ~220 ms of a 1.5 s training forward on 2 AVX2 cores). The forward now
saves the tensor under the view, and the backward takes the view itself, where the Transpose
feeds a product and OpenVINO folds it into the product's operand order.

The backward is compiled with the forward, not at the first ``backward()`` (AOTAutograd's
default), and run once on zeros there (:func:`prime`). The CPU plugin allocates a buffer for every
static input when it compiles a model and frees it only at the first inference that binds the
caller's tensors instead (runtime/heap_trim.py): compiled lazily, a backward's buffers (BERT-base: 1.1 GB, the
size of everything it reads) were held beside the first step's activations, which made that step
the run's peak (ResNet-50: 3.55 GB, against 2.9-3.0 GB in every later step).

A forward's saved activations are outputs the forward also reads, which the CPU plugin held a
second copy of; :func:`outputs_written_in_place` makes them dynamic-shaped, so they are written
once, into the tensors lent to PyTorch. The plugin's execution order follows the Results' order,
which :func:`results_in_execution_order` makes the order their values are computed in, so values
only a Result reads do not keep their sources alive to the end of the graph.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import torch
import torch.fx

from fxvino.lowering import helpers as h
from fxvino.lowering.convert import LoweredGraph
from fxvino.runtime import heap_trim as heap
from fxvino.runtime.compiled_partition import LEND_STATIC_BYTES, static_bytes
from fxvino.training import channels_last
from fxvino.training.saved_values import SavedValues

logger = logging.getLogger("fxvino")

aten = torch.ops.aten
PERMUTATIONS = (aten.permute.default, aten.t.default, aten.transpose.int)


def aot_partitioning() -> dict[str, Callable[..., Any]]:
    """Keyword arguments for ``aot_autograd`` when fxvino compiles the backward too."""
    return {"partition_fn": partition}


@contextlib.contextmanager
def backward_compiled_early() -> Iterator[None]:
    """AOTAutograd compiles the backward right after the forward, before any activation exists."""
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
        yield


# Integer divisions trap on a zero divisor: a graph with one is not run on zeros.
_INTEGER_DIVISIONS = frozenset({"Divide", "FloorMod", "Mod"})


def prime(compiled: ov.CompiledModel, model: ov.Model) -> bool:
    """Runs ``compiled`` (lowered from ``model``) once with every input bound to zeros, so that the
    plugin frees the input buffers it allocated when compiling, then trims the heap. Only for
    graphs whose static inputs reach ``heap.TRIM_BYTES``; False when it did not run. The zeros are
    one untouched allocation viewed by every input (zero pages: reading them costs no resident
    memory). The run's request is dropped; its arena is kept for the first real call (releasing it
    here moved BERT-base's heap so that every AdamW step faulted its temporaries in again: the
    optimizer took 390-450 ms instead of 145-180)."""
    ports = list(compiled.inputs)
    if not ports or not all(p.get_partial_shape().is_static for p in ports):
        return False
    sizes = [static_bytes(p) for p in ports]
    if sum(sizes) < heap.TRIM_BYTES:
        return False
    for op in model.get_ordered_ops():
        if op.get_type_name() in _INTEGER_DIVISIONS and op.get_output_element_type(0).is_integral_number():
            return False
    zeros = np.zeros(max(sizes), np.uint8)
    try:
        request = compiled.create_infer_request()
        for i, (port, size) in enumerate(zip(ports, sizes, strict=True)):
            request.set_input_tensor(i, ov.Tensor(zeros[:size], port.get_shape(), port.get_element_type()))
        request.infer()
        del request
    except Exception as e:  # noqa: BLE001 - priming saves memory; a failure must not stop the compile
        logger.debug(
            "fxvino: priming a backward on zeros failed (%s: %s); its first call frees them", type(e).__name__, e
        )
        return False
    heap.trim()
    return True


def outputs_written_in_place(model: ov.Model) -> int:
    """Rewrites a training forward so that each large output the graph also reads is written
    straight into its output tensor; returns how many outputs it rewrote.

    The CPU plugin keeps such an output in memory of its own for the compiled model's life (a
    region never reused for other values) and copies it into the output tensor after each
    inference. A training forward is made of them: every saved activation is also read by the next
    layer, so each was held twice, once lent to PyTorch and once by the plugin (BERT-base: 773 MB
    beside the 760 MB lent). An output of dynamic shape is written into the output tensor itself,
    where the graph's other readers find it. So each such output passes through a Reshape to its
    own shape, multiplied by a run-time 1 the plugin cannot fold, which makes its shape dynamic.
    A Reshape, Squeeze or Unsqueeze shares its input's memory: an output that views a value the
    graph reads counts as read too."""
    one: ov.Output | None = None
    rewritten = 0
    for result in model.get_results():
        value = result.input_value(0)
        if (
            value.get_node().get_type_name() in ("Parameter", "Constant")
            or static_bytes(value) < LEND_STATIC_BYTES  # 0 for a dynamic shape
            or not _read_in_graph(value)
        ):
            continue
        if one is None:
            always_true = h.always_true(model)
            if always_true is None:
                return 0
            one = ops.convert(always_true, ov.Type.i64).output(0)
        dims = ops.multiply(h.const(list(value.get_shape()), torch.int64), one)
        result.input(0).replace_source_output(ops.reshape(value, dims, False).output(0))
        rewritten += 1
    if rewritten:
        model.validate_nodes_and_infer_types()
    return rewritten


def prepare(lowered: LoweredGraph, kind: str) -> None:
    """What a training graph (``kind`` "forward" or "backward") needs before it compiles: saved
    activations written once, Results in execution order, no snippets where they cost."""
    if kind == "forward":
        outputs_written_in_place(lowered.model)
    elif _has_convolutions(lowered.model):
        channels_last.compute_in_rows(lowered.model)
    results_in_execution_order(lowered)
    without_snippets(lowered, kind)


def results_in_execution_order(lowered: LoweredGraph) -> int:
    """Lists a training graph's Results in the order their values are computed, and renumbers its
    outputs to match; returns how many outputs changed place.

    The CPU plugin schedules a graph depth first from its Results, in their order, so a node that
    only a Result reads runs when that Result's turn comes. A training graph has many of them: a
    forward's saved activations leave through reorders out of the plugin's blocked layout, and a
    backward's weight gradients are read by nothing else. In AOTAutograd's order (the forward's
    loss first, the gradients in parameter order) the plugin ran most of them last and kept
    their sources alive until then: ResNet-50's forward arena held each saved activation a
    second time (659 MB, against 139 in this order), BERT-base's backward held 483 MB of gradient
    work against 21."""
    model = lowered.model
    if model.get_sinks() or len(model.get_results()) < 2:
        return 0
    position = {node.get_name(): i for i, node in enumerate(model.get_ordered_ops())}

    def computed_at(result: ov.Node) -> int:
        value = result.input_value(0)
        while value.get_node().get_type_name() in _IN_PLACE_VIEWS or channels_last.is_nhwc_transpose(value.get_node()):
            value = value.get_node().input_value(0)  # placed right after its source
        return position[value.get_node().get_name()]

    results = list(model.get_results())
    order = sorted(range(len(results)), key=lambda i: computed_at(results[i]))
    if order == list(range(len(results))):
        return 0
    for result in results:
        model.remove_result(result)
    model.add_results([results[i] for i in order])
    new_index = {old: new for new, old in enumerate(order)}
    lowered.outputs[:] = [spec.moved(new_index.__getitem__) for spec in lowered.outputs]
    return sum(old != new for old, new in new_index.items())


_CONVOLUTIONS = frozenset(
    {"Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData"}
)


def without_snippets(lowered: LoweredGraph, kind: str) -> bool:
    """Asks the CPU plugin not to fuse a training forward's elementwise chains into snippets,
    nor a backward's without convolutions; returns whether it asked.

    Each snippet Subgraph keeps its own generated kernel and buffers for the compiled model's
    life, about 100-150 KB apiece against ~18 KB for the plugin's plain elementwise nodes, and
    a training graph has hundreds of them. Without them (Zen 5, AdamW steps, A/B): peaks fell
    from 3545 to 3388 MB (BERT-base), 4114 to 4063 (GPT-2) and 2141 to 2086 (ResNet-50, forward
    only), with ResNet-50's forward faster (276-308 against 307-433 ms) and the other times
    unchanged. ResNet-50's backward, though, took 609-614 ms instead of 540-553 without them:
    its batch-norm and ReLU gradients around the convolutions run better fused, so a backward
    with convolutions keeps them."""
    if kind == "backward" and _has_convolutions(lowered.model):
        return False
    lowered.plugin_config.setdefault("SNIPPETS_MODE", "DISABLE")
    return True


def _has_convolutions(model: ov.Model) -> bool:
    return any(op.get_type_name() in _CONVOLUTIONS for op in model.get_ordered_ops())


# A view is computed with its base. So is a saved activation's Transpose to NHWC
# (channels_last.py): the plugin merges it into the reorder out of its convolution's layout.
_IN_PLACE_VIEWS = frozenset({"Reshape", "Squeeze", "Unsqueeze"})


def _read_in_graph(value: ov.Output) -> bool:
    """Whether a node other than the Result reads ``value`` or the value it views. A Transpose
    counts as a view: the plugin merges the one of an activation saved channels-last
    (channels_last.py) into the reorder out of its convolution's layout."""
    while len(value.get_target_inputs()) < 2:
        node = value.get_node()
        if node.get_type_name() not in _IN_PLACE_VIEWS and not channels_last.is_nhwc_transpose(node):
            return False
        value = node.input_value(0)
    return True


def partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any):
    """Inductor's min-cut partition, then saved permutations moved to the backward and a CNN's
    activations saved channels-last."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    forward, backward = min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)
    save_bases_of_permutations(forward, backward)
    channels_last.save_channels_last(forward, backward)
    return forward, backward


def save_bases_of_permutations(forward: torch.fx.GraphModule, backward: torch.fx.GraphModule) -> int:
    """Saved tensors that are permutations of another forward tensor are saved as that tensor, and
    the backward permutes it on entry; returns how many."""
    saved = SavedValues(forward, backward)
    for i, value in list(saved.movable()):
        base = value.args[0]
        if value.target not in PERMUTATIONS or value.kwargs or not isinstance(base, torch.fx.Node):
            continue
        if "val" not in base.meta:
            continue
        meta = {**saved.backward_meta(value), "val": base.meta["val"]}
        if "tensor_meta" in base.meta:
            meta["tensor_meta"] = base.meta["tensor_meta"]
        saved.resave(i, base, meta, value.target, tuple(value.args[1:]))
    return saved.commit()
