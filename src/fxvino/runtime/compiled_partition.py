"""Running a compiled OpenVINO partition from PyTorch.

The call path is what per-call overhead is made of, so it is kept short. Each infer request
comes from a pool (concurrent callers never share one) together with torch views of its own
input and output buffers. A small static-shaped input is copied into the request's buffer:
handing OpenVINO new memory on every call (``set_input_tensor``) costs more than copying a few
kilobytes. A large input is handed over without a copy instead, and stays bound while calls
pass the same tensor over the same memory (OpenVINO reads it afresh at each inference). Small
outputs are copied into fresh torch tensors, so a result never changes when the model runs
again. A large dynamic-shaped output (a KV cache growing by one position per decode step) is
handed over without a copy instead, and the request that owns its memory is kept out of the pool
until every tensor viewing that memory is freed: the next call takes another request, so nothing
overwrites a live result.

A partition's compiled model and the map of its arguments and results onto the model's ports are
one ``_Binding``, which each request keeps: a partition rebound to another model (compiled with
others that share its weights: shared_weights.py) makes new requests and never pools old ones.
"""

from __future__ import annotations

import math
import queue
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import openvino as ov
import torch

from fxvino.lowering.convert import InputSpec, OutputSpec
from fxvino.runtime import heap_trim as heap
from fxvino.runtime.position_writes import Absorbed
from fxvino.utils.dtypes import OV_TO_TORCH, to_ov_tensor

# Inputs up to this size are copied into the request's own buffer rather than bound.
COPY_IN_BYTES = 64 * 1024

# The binding's own infer, without the Python wrapper that converts inputs and builds a result
# dict (we read outputs through views): a few microseconds per call.
# A dynamic-shaped output at least this large is lent rather than copied (see the module doc); at
# most MAX_LENT requests per partition are out on loan (a caller keeping every result would
# otherwise make a request, with its own buffers, per call), past that outputs are copied. A
# DynamicCache step of a 30-layer, 576-wide Llama returns 60 caches of 100-190 kB: copying them
# cost ~2 ms per token, lending them from 64 kB took its decode from 33.5 to 32.4 ms per token.
LEND_BYTES = 64 * 1024
# Training graphs lend every result at least this large, static ones too (``lend_static``), and
# make the large forward results the graph also reads dynamic-shaped (training/aot.py).
LEND_STATIC_BYTES = 256 * 1024
MAX_LENT = 4

_infer = getattr(getattr(ov, "_pyopenvino", None), "InferRequest", ov.InferRequest).infer
_NO_INPUTS: dict = {}


def draw_seed() -> torch.Tensor:
    """Two random i32 from torch's default generator: graphs drawing random numbers get a fresh
    seed per call, so ``torch.manual_seed`` makes them reproducible (lowering/ops/random.py)."""
    return torch.randint(-(2**31), 2**31 - 1, (2,), dtype=torch.int32)


def _torch_view(tensor: ov.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """A torch tensor over an OpenVINO tensor's memory (no copy)."""
    return _torch_view_of(tensor.data, dtype)


def _torch_view_of(array: Any, dtype: torch.dtype | None) -> torch.Tensor:
    """A torch tensor over ``array``, reinterpreted as ``dtype`` when the array carries it in
    another type of the same size (bf16 as int16, bool as u8)."""
    view = torch.from_numpy(array)  # its storage holds ``array`` until the last view is freed
    return view.view(dtype) if dtype is not None and view.dtype != dtype else view


class Piece(NamedTuple):
    """Where one output lies in a model that returns several outputs packed into one flat tensor
    per element type, with every output's sizes in one i64 tensor (an idle ``If``'s outputs cost
    each request per port: shared_weights.py)."""

    data: int  # the port of the flat tensor
    sizes: int  # the port of the sizes
    start: int  # where this output's sizes begin there
    rank: int
    before: tuple[tuple[int, int], ...]  # (start, rank) of the outputs ahead of it in ``data``


def _unpacked(request: ov.InferRequest, piece: Piece) -> Any:
    sizes = request.get_output_tensor(piece.sizes).data
    offset = sum(math.prod(int(n) for n in sizes[s : s + r]) for s, r in piece.before)
    shape = tuple(int(n) for n in sizes[piece.start : piece.start + piece.rank])
    flat = request.get_output_tensor(piece.data).data
    return flat[offset : offset + math.prod(shape)].reshape(shape)


class _Plain(NamedTuple):
    """A request's whole call when every input is copied in (a size written into its 0-d buffer)
    and every output is static and copied out: what the general path decides per argument and
    result, decided once. On the ``torch.relu(x) + 1`` probe the general path spent 5.3 us around
    a 6.8 us inference, this one 4.0-4.2 (copying the input in and the output out are 1.7 of them)."""

    inputs: tuple[tuple[int, torch.Tensor, torch.dtype, torch.Size], ...]  # (position, view, dtype, shape)
    scalars: tuple[tuple[int, Any, type], ...]  # (position, the request's 0-d array, int or float)
    # (the request's own array, the dtype to reinterpret its copy as, None if torch reads it right)
    outputs: tuple[tuple[Any, torch.dtype | None], ...]
    # One output: returned without a comprehension's frame (with the inlined ``_put_back`` below,
    # ~1 us per probe call, in-process A/B medians 8.8-9.1 against 10.0-10.2 above Dynamo alone).
    single: bool


class _Request:
    """An infer request and torch views of the buffers it owns (built once, reused)."""

    __slots__ = (
        "request",
        "binding",
        "inputs",
        "scalars",
        "held",
        "outputs",
        "loans",
        "on_loan",
        "retired",
        "lender",
        "copied_out",
        "plain",
        "views",
    )

    def __init__(self, binding: _Binding, lender: CompiledPartition | None = None):
        self.request = request = binding.compiled.create_infer_request()
        self.binding = binding  # what this request was made for: a rebound partition makes new ones
        for i, tensor in binding.fixed:
            request.set_input_tensor(i, tensor)
        self.inputs = {i: _torch_view(request.get_input_tensor(i), dtype) for i, dtype in binding.copy_in}
        self.scalars = {i: request.get_input_tensor(i).data for i in binding.scalar_in}
        # Port -> the tensor bound there by the last call, and where its data was: the same
        # tensor again (a StaticCache's K and V on every decode step) is already bound.
        self.held: dict[int, tuple[weakref.ref, int, torch.Size]] = {}
        self.outputs: dict[int, Any] = {}  # static outputs: the request's own array, read in place
        # Outputs handed over without a copy and still alive: id of the weak reference to each lent
        # array -> (the reference, the array's data address)
        self.loans: dict[int, tuple[weakref.ref, int]] = {}
        self.on_loan = False  # kept out of the pool until ``loans`` is empty
        self.retired = False  # never to be pooled again (its copy-in views went stale)
        self.lender = lender
        self.views: dict[int, torch.Tensor] = {}  # result position -> a view of a static result's memory
        lends = lender is not None and lender.lend_static
        absorbed = lender.absorbed if lender is not None else None
        # Every result a static tensor, none lent: each call copies them out of these arrays,
        # decided once rather than per result (a StaticCache decode step's 121 small results:
        # the 0.7 ms its call spends around the inference shrank by 0.04-0.05 ms).
        self.copied_out = self._copied_out(absorbed) if binding.static_results and not lends else None
        plain = binding.plain and self.copied_out is not None and absorbed is None
        self.plain = self._plain() if plain else None

    def _copied_out(self, absorbed: Absorbed | None) -> tuple[tuple[Any, torch.dtype | None], ...]:
        """(the request's own array, the dtype to reinterpret its copy as, None if torch reads it
        right); (None, None) for a result the partition's own writes alone read."""
        outputs = []
        dropped = absorbed.dropped if absorbed is not None else frozenset()
        for k, spec in enumerate(self.binding.outputs):
            if k in dropped:
                outputs.append((None, None))
                continue
            array = self.outputs[spec.index] = self.request.get_output_tensor(spec.index).data
            read_as = torch.from_numpy(array).dtype
            outputs.append((array, spec.dtype if spec.dtype is not None and spec.dtype != read_as else None))
        return tuple(outputs)

    def _plain(self) -> _Plain:
        inputs = tuple(
            (spec.position, view, view.dtype, view.shape)
            for i, spec in self.binding.call_inputs
            if (view := self.inputs.get(i)) is not None
        )
        scalars = tuple(
            (spec.position, array, self.binding.scalar_in[i])
            for i, spec in self.binding.call_inputs
            if (array := self.scalars.get(i)) is not None
        )
        return _Plain(inputs, scalars, self.copied_out, len(self.copied_out) == 1)

    def result_view(self, k: int) -> torch.Tensor:
        """Result ``k`` (a tensor output) over the request's own memory, valid until its next
        inference: what the partition's own writes read (position_writes.Absorbed)."""
        view = self.views.get(k)
        if view is not None:
            return view
        binding = self.binding
        spec = binding.outputs[k]
        if spec.index in binding.packed:
            return _torch_view_of(_unpacked(self.request, binding.packed[spec.index]), spec.dtype)
        view = _torch_view_of(self.request.get_output_tensor(spec.index).data, spec.dtype)
        if spec.index in binding.static_out:
            self.views[k] = view
        return view

    def _freed(self, ref: weakref.ref) -> None:
        """A lent output's memory was freed (any thread, any time)."""
        self.lender._returned(self, ref)

    def output(self, index: int, dtype: torch.dtype | None, lend: bool = False) -> torch.Tensor:
        """The output as a fresh tensor; a static output lives in one buffer, read in place.
        With ``lend``, a large dynamic output (any large output in a training graph) is returned
        over the request's own memory.

        The copy is numpy's, on this thread: torch's copy of a few hundred kB runs on its OpenMP
        workers, which then spin while OpenVINO's own threads run the next inference on the same
        cores (BERT-base's 393 kB output cost 3 ms per 18 ms call on 2 cores that way)."""
        array = self.outputs.get(index)
        if array is None or (lend and self.lender.lend_static):
            binding = self.binding
            if index in binding.packed:
                return _torch_view_of(_unpacked(self.request, binding.packed[index]).copy(), dtype)
            tensor = self.request.get_output_tensor(index)
            lendable = (index not in binding.static_out and index not in binding.copied) or self.lender.lend_static
            if lend and lendable:
                array = tensor.data  # its size read from numpy: one call into OpenVINO fewer
                if array.nbytes >= self.lender.lend_bytes:
                    view = _torch_view_of(array, dtype)
                    address = view.data_ptr()
                    # A weak reference with a callback, kept here, costs a tenth of weakref.finalize.
                    ref = weakref.ref(array, self._freed)
                    self.loans[id(ref)] = (ref, address)
                    # Passed back as an input (a DynamicCache's next step), it is bound as it is.
                    self.lender.lent_tensors[address] = (tensor, view.shape, view.dtype)
                    return view
            if array is None:
                array = tensor.data
                if index in self.binding.static_out:
                    self.outputs[index] = array
        return _torch_view_of(array.copy(), dtype)


def static_bytes(port: ov.ConstOutput | ov.Output) -> int:
    """Bytes of a static-shaped port, 0 for a dynamic one."""
    shape = port.get_partial_shape()
    if not shape.is_static:
        return 0
    return port.get_element_type().size * math.prod(int(d) for d in shape.to_shape())


class _Binding:
    """A compiled model and how a partition's arguments and results map onto its ports."""

    __slots__ = (
        "compiled",
        "inputs",
        "outputs",
        "call_inputs",
        "copy_in",
        "scalar_in",
        "static_out",
        "fixed",
        "copied",
        "packed",
        "static_results",
        "plain",
        "trim_pending",
    )

    def __init__(
        self,
        compiled: ov.CompiledModel,
        inputs: Sequence[InputSpec],
        outputs: Sequence[OutputSpec],
        copied: frozenset[int] = frozenset(),
        packed: Mapping[int, Piece] | None = None,
    ):
        self.compiled = compiled
        # Output indices past the model's ports, read out of packed outputs (shared_weights.py).
        self.packed = packed or {}
        # Outputs always copied, never lent, though their ports are dynamic: a graph's static
        # outputs run through an If (shared_weights.py). A lent output keeps its request, and so
        # the compiled model with its packed weights, alive.
        self.copied = copied
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        # Inputs that hold one value for the model's life (shared_weights.py) are bound once per
        # request; the others are set on every call.
        self.fixed = tuple((i, spec.value) for i, spec in enumerate(self.inputs) if spec.kind == "fixed")
        self.call_inputs = tuple((i, spec) for i, spec in enumerate(self.inputs) if spec.kind != "fixed")
        # Static-shaped small tensor inputs are copied in (index -> expected dtype).
        self.copy_in: list[tuple[int, torch.dtype]] = []
        for i, spec in self.call_inputs:
            port = compiled.inputs[i]
            shape = port.get_partial_shape()
            copyable = spec.kind in ("tensor", "complex", "seed") and port.get_element_type() in OV_TO_TORCH
            if not copyable or not shape.is_static:
                continue
            if static_bytes(port) <= COPY_IN_BYTES:
                self.copy_in.append((i, OV_TO_TORCH[port.get_element_type()]))
        # A size or float computed outside the partition (a 0-d i64 or f64 port) is written into
        # the request's own buffer: a 0-d tensor made and bound per call cost ~40 us of a dynamic
        # scalar graph's call (EnCodec's padding arithmetic, 17 calls per forward).
        # Port -> the Python type its value is read as.
        self.scalar_in: dict[int, type] = {
            i: float if spec.kind == "symfloat" else int
            for i, spec in self.call_inputs
            if spec.kind in ("symint", "symfloat")
        }
        # The plugin's own buffers for the static inputs fxvino binds are freed at the first call:
        # the heap is trimmed after it when they are large (runtime/heap_trim.py).
        copied_in = {i for i, _ in self.copy_in}
        bound = sum(static_bytes(port) for i, port in enumerate(compiled.inputs) if i not in copied_in)
        self.trim_pending = bound >= heap.TRIM_BYTES
        self.static_out = frozenset(i for i, port in enumerate(compiled.outputs) if port.get_partial_shape().is_static)
        self.static_results = all(
            spec.kind == "tensor" and spec.index in self.static_out and spec.index not in self.packed
            for spec in self.outputs
        )
        # Every call input copied in, every result a static tensor output: requests get a _Plain.
        self.plain = self.static_results and all(
            (spec.kind == "tensor" and i in copied_in) or i in self.scalar_in for i, spec in self.call_inputs
        )


class CompiledPartition:
    """A callable over a partition's runtime arguments, returning its outputs as a tuple."""

    def __init__(
        self,
        compiled: ov.CompiledModel,
        inputs: Sequence[InputSpec],
        outputs: Sequence[OutputSpec],
        lend_static: bool = False,
        copied: frozenset[int] = frozenset(),
        packed: Mapping[int, Piece] | None = None,
    ):
        # Training graphs: a forward's outputs are activations the backward frees, a backward's
        # are gradients the next zero_grad frees, so their memory is lent whatever their shape:
        # copying them cost more than OpenVINO's inference of BERT's forward and backward.
        self.lend_static = lend_static
        self.lend_bytes = LEND_STATIC_BYTES if lend_static else LEND_BYTES  # the least a lent result holds
        self.binding: _Binding | None = _Binding(compiled, inputs, outputs, copied, packed)
        # Requests are made on first use: not in the fake mode the compiler runs under.
        self._pool: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._loans = threading.Lock()
        self._on_loan = 0  # requests out of the pool because callers hold their outputs
        self._lent_slots: set[_Request] = set()
        self._closed = False
        self._bound = threading.Event()  # cleared while the partition waits for a new compiled model
        self._bound.set()
        self.shared: Any = None  # shared_weights.py's record, for partitions that can share weights
        self.absorbed: Absorbed | None = None  # writes into inputs done after each inference
        self.packed_constants: list[Any] = []  # kept for later graphs over the same weights (lowering/convert.py)
        # Outputs on loan, by data address: (OpenVINO's tensor, the torch view's shape and dtype).
        self.lent_tensors: dict[int, tuple[ov.Tensor, torch.Size, torch.dtype]] = {}

    def absorb(self, absorbed: Absorbed) -> bool:
        """Do ``absorbed``'s writes in every call, right after the inference, from the results'
        own memory, and return None for the results only they read; False (nothing changed) when
        a result they read is not a tensor output."""
        binding = self.binding
        reads = {*absorbed.values, *(k for out, k in absorbed.indices if out)}
        if binding is None or any(binding.outputs[k].kind != "tensor" for k in reads):
            return False
        with self._loans:
            self.absorbed = absorbed
            self._drain()  # requests made before decided their results without it
        return True

    @property
    def compiled(self) -> ov.CompiledModel | None:
        binding = self.binding
        return binding.compiled if binding is not None else None

    def suspend(self) -> None:
        """Drop the compiled model until :meth:`rebind` gives another; calls meanwhile wait.
        (shared_weights.py frees every member's packed weights before compiling them together.)"""
        with self._loans:
            self._bound.clear()
            self.binding = None
            self._drain()

    def rebind(
        self,
        compiled: ov.CompiledModel,
        inputs: Sequence[InputSpec],
        outputs: Sequence[OutputSpec],
        copied: frozenset[int] = frozenset(),
        packed: Mapping[int, Piece] | None = None,
    ) -> None:
        """Run on ``compiled`` from now on; requests made for the old model are not pooled again."""
        binding = _Binding(compiled, inputs, outputs, copied, packed)
        with self._loans:
            self.binding = binding
            self._drain()
            self._bound.set()

    def _drain(self) -> None:
        while True:
            try:
                self._pool.get_nowait()
            except queue.Empty:
                break

    def close(self) -> None:
        """Free the compiled model: drop it and the idle requests, which hold it too. Requests
        whose outputs are still lent are dropped when those die. Calls must not follow."""
        with self._loans:
            self._closed = True
            self.binding = None
            self._bound.set()
            self._drain()

    def _new_request(self) -> _Request:
        binding = self.binding
        if binding is None and not self._closed:
            self._bound.wait()
            binding = self.binding
        return _Request(binding, self)

    def _returned(self, slot: _Request, ref: weakref.ref) -> None:
        """A lent output's memory was freed (a weak reference's callback: any thread, any time):
        forget it, and pool the request again when it was the last."""
        with self._loans:
            _, address = slot.loans.pop(id(ref), (None, 0))
            self.lent_tensors.pop(address, None)
            if slot.loans or not slot.on_loan:
                return
            slot.on_loan = False
            self._on_loan -= 1
            self._lent_slots.discard(slot)
            if self._poolable(slot):
                self._pool.put(slot)

    def _poolable(self, slot: _Request) -> bool:
        return not slot.retired and not self._closed and slot.binding is self.binding

    def _put_back(self, slot: _Request) -> None:
        with self._loans:
            if slot.loans:
                slot.on_loan = True
                self._on_loan += 1
                # Held here while on loan: the weak references that return it are only its own.
                self._lent_slots.add(slot)
                return
            if self._poolable(slot):
                self._pool.put(slot)

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        try:
            slot = self._pool.get_nowait()
        except queue.Empty:
            slot = self._new_request()
        plain = slot.plain
        if plain is not None:
            for position, view, dtype, shape in plain.inputs:
                a = args[position]
                if a.dtype != dtype or a.shape != shape:
                    break  # the general path binds it instead
                view.copy_(a)
            else:
                for position, array, convert in plain.scalars:
                    array[()] = convert(args[position])
                try:
                    _infer(slot.request, _NO_INPUTS, True, False)
                    if plain.single:
                        array, dtype = plain.outputs[0]
                        result = torch.from_numpy(array.copy())
                        return (result if dtype is None else result.view(dtype),)
                    return tuple([_torch_view_of(array.copy(), dtype) for array, dtype in plain.outputs])
                finally:  # _put_back and _poolable, inlined: nothing of a plain call is lent
                    with self._loans:
                        if not slot.retired and not self._closed and slot.binding is self.binding:
                            self._pool.put(slot)
        return self._call(slot, args)

    def _call(self, slot: _Request, args: tuple[Any, ...]) -> tuple[Any, ...]:
        request, binding = slot.request, slot.binding
        # ov.Tensor(shared_memory=True) does not own its memory: ``alive`` keeps every buffer
        # we hand over (contiguous copies included) referenced until inference is done.
        alive = []
        rebound = False  # a buffer we copy into was replaced by a bound tensor
        try:
            for i, spec in binding.call_inputs:
                kind = spec.kind
                if kind == "tensor":
                    a = args[spec.position]
                elif kind == "complex":
                    a = torch.view_as_real(args[spec.position].resolve_conj())
                elif kind == "seed":
                    a = draw_seed()
                else:  # a symint or symfloat: into the request's own 0-d buffer
                    slot.scalars[i][()] = binding.scalar_in[i](args[spec.position])
                    continue
                view = slot.inputs.get(i)
                if view is not None:
                    if a.dtype == view.dtype and a.shape == view.shape:
                        view.copy_(a)
                        continue
                    rebound = True
                held = slot.held.get(i)
                contiguous = a.is_contiguous()
                if contiguous:
                    address = a.data_ptr()
                    if held is not None and held[0]() is a and held[1:] == (address, a.shape):
                        continue  # the same memory in the same layout, read afresh by this inference
                    slot.held[i] = (weakref.ref(a), address, a.shape)
                    lent = self.lent_tensors.get(address)
                    if lent is not None and lent[1] == a.shape and lent[2] == a.dtype:
                        alive.append(a)
                        request.set_input_tensor(i, lent[0])  # an output of ours, bound as it is
                        continue
                else:
                    slot.held.pop(i, None)
                    a = a.contiguous()
                alive.append(a)
                request.set_input_tensor(i, to_ov_tensor(a))
            _infer(request, _NO_INPUTS, True, False)  # inputs are set; results are read below
            if binding.trim_pending:
                binding.trim_pending = False
                heap.trim()
            absorbed = self.absorbed
            if absorbed is not None:
                return self._written(slot, args, absorbed)
            if slot.copied_out is not None:
                return tuple([_torch_view_of(array.copy(), dtype) for array, dtype in slot.copied_out])
            lend = self._on_loan < MAX_LENT
            return tuple(_take(slot, spec, args, lend) for spec in binding.outputs)
        finally:
            if rebound:  # its views no longer show what OpenVINO reads: start afresh
                slot.retired = True
                self._put_back(slot)
                slot = self._new_request()
            self._put_back(slot)

    def _written(self, slot: _Request, args: tuple[Any, ...], absorbed: Absorbed) -> tuple[Any, ...]:
        """The writes the partition does itself, then its results (None for those only they read)."""
        absorbed.apply(args, slot.result_view)
        if slot.copied_out is not None:
            return tuple(
                [None if array is None else _torch_view_of(array.copy(), dtype) for array, dtype in slot.copied_out]
            )
        lend = self._on_loan < MAX_LENT
        dropped = absorbed.dropped
        return tuple(
            None if k in dropped else _take(slot, spec, args, lend) for k, spec in enumerate(slot.binding.outputs)
        )


def _take(slot: _Request, spec: OutputSpec, args: Sequence[Any], lend: bool) -> Any:
    if spec.kind == "python":
        return spec.value
    if spec.kind == "view":  # a view of an input: sizes and offset computed, the data is the input's
        position, strides, offset_index = spec.value
        base = args[position]
        sizes = [int(s) for s in _array(slot, spec.index)]
        offset = int(_array(slot, offset_index))
        return base.as_strided(sizes, strides, base.storage_offset() + offset)
    if spec.kind == "complex":
        return torch.view_as_complex(slot.output(spec.index, torch.float32))
    if spec.kind == "symint":
        return int(_array(slot, spec.index))
    if spec.kind == "symfloat":
        return float(_array(slot, spec.index))
    if spec.kind == "symbool":
        return bool(_array(slot, spec.index))
    return slot.output(spec.index, spec.dtype, lend)


def _array(slot: _Request, index: int) -> Any:
    piece = slot.binding.packed.get(index)
    return slot.request.get_output_tensor(index).data if piece is None else _unpacked(slot.request, piece)
