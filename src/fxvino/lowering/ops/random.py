"""Random numbers: rand, randn, native_dropout, and the sampling ops (uniform, normal, bernoulli, ...).

OpenVINO's RandomUniform takes its seeds as compile-time attributes, so a compiled model would
draw the same numbers on every call. Instead a partition that draws random numbers gets one
extra input, a fresh 64-bit seed that the runtime takes from torch's default generator on every
call (``runtime.draw_seed``), and the numbers are a counter-based hash of (seed, stream, element
index) computed in the graph with 32-bit integer ops. The contract is Inductor's: under
``torch.manual_seed`` results are reproducible and independent across calls and across ops, but
they are not the numbers eager PyTorch draws (its generator streams cannot be replayed in
OpenVINO).
"""

from __future__ import annotations

import math

import numpy as np
import openvino.opset16 as ops
import torch

from fxvino.lowering import eager_checks
from fxvino.lowering import helpers as h
from fxvino.lowering.ops.activation import leaky_relu
from fxvino.lowering.registry import lowers

aten = torch.ops.aten

# Multipliers of the "lowbias32" integer hash (C. Wellons' hash-prospector), and the golden
# ratio that spreads stream numbers over the 32-bit space.
MIX_1, MIX_2, GOLDEN = 0x7FEB352D, 0x846CA68B, 0x9E3779B9
# Random bits kept per float: a value must never round up to 1.0 in the output dtype.
_MANTISSA_BITS = {torch.float16: 11, torch.bfloat16: 8}
_FLOAT_BITS = 24
# A counter's two ranges are folded into constants: up to 256 kB each, beyond that a draw is padded.
LONGEST_COUNTER_RANGE = 1 << 16


def _u32(value: int) -> np.ndarray:
    """A uint32 bit pattern as the i32 constant OpenVINO computes with (wrapping arithmetic)."""
    return np.array(value & 0xFFFFFFFF, dtype=np.uint32).view(np.int32)


def _c(value: int):
    return ops.constant(_u32(value)).output(0)


def _shr(x, bits: int):
    """Logical right shift of i32 bit patterns, as an exact division.

    The CPU plugin runs BitwiseRightShift in a reference kernel, ~35x slower than a division: it
    took 1.3 s of a 2.1 s BERT training forward (dropout draws millions of numbers). The low
    ``bits`` are cleared first, so the quotient is exact (truncating and flooring division agree,
    and with ``bits >= 8`` it fits f32's 24-bit mantissa should the plugin divide in float); masking
    then drops the sign's copies, as a logical shift would.
    """
    if not 8 <= bits <= 30:
        raise ValueError(f"shift by {bits}: the exact-division shift needs 8 <= bits <= 30")
    high = ops.bitwise_and(x, _c(~((1 << bits) - 1)))
    return ops.bitwise_and(ops.divide(high, _c(1 << bits)), _c((1 << (32 - bits)) - 1)).output(0)


def _mix(x):
    """lowbias32: every input bit affects every output bit (bias ~ 0.17 ulp)."""
    x = ops.bitwise_xor(x, _shr(x, 16))
    x = ops.multiply(x, _c(MIX_1))
    x = ops.bitwise_xor(x, _shr(x, 15))
    x = ops.multiply(x, _c(MIX_2))
    return ops.bitwise_xor(x, _shr(x, 16)).output(0)


def random_bits(ctx, shape, stream: int):
    """32 random bits (i32) per element of ``shape`` for ``stream`` of this call's seed.

    Element ``i`` gets ``mix(i + key)``. For a static shape the counter is never a whole constant
    array: a Range over constant bounds is folded by OpenVINO into one (a 6 MB constant per
    attention dropout, 219 MB of BERT-base's training forward, held for the compiled model's
    life), so the elements are numbered as ``row * columns + column`` with the key added to the
    small row part, which keeps every full-size tensor a run-time one. A shape with no balanced
    split (``rand(N)``) is counted over a padded near-square, then cut to its size.
    """
    node = shape.get_node()
    if node.get_type_name() == "Constant" and 0 in node.get_data():  # OpenVINO cannot reshape [0] to [0, 5, 0]
        return ops.broadcast(_c(0), shape).output(0)
    # Both seed words and the stream go into one key (scalar work), so each element is hashed
    # once: a dropout draws millions of numbers, and every hash round is 14 integer layers over
    # all of them (two rounds were 30% of a BERT-base training forward on 2 cores).
    key = _keys(ctx.random_seed(), [stream])
    ctx.stream_keys.append((stream, key))
    dims = [int(d) for d in node.get_data()] if node.get_type_name() == "Constant" else None
    if dims is None:
        numel = ops.reduce_prod(shape, h.const(0, torch.int64), False)
        counter = ops.add(ops.range(_c(0), ops.convert(numel, "i32"), _c(1), "i32"), key)
    else:
        numel = math.prod(dims)
        rows, columns = _rows_and_columns(dims)
        if max(rows, columns) > LONGEST_COUNTER_RANGE:  # no balanced split (a long 1-D draw): count over
            columns = math.isqrt(numel) + 1  # a padded square and cut the tail off (a reference-kernel Slice)
            rows = -(-numel // columns)
        # ``columns`` as a run-time value: with a constant, OpenVINO reassociates
        # (row * columns + key) + column into key + a folded [rows, columns] constant.
        stride = ops.bitwise_or(ops.bitwise_and(key, _c(0)), _c(columns))
        row_start = ops.add(ops.multiply(h.unsqueeze(_iota(rows), 1), stride), key)  # [rows, 1]
        counter = ops.add(row_start, h.unsqueeze(_iota(columns), 0))
        if rows * columns != numel:
            counter = ops.slice(h.reshape(counter.output(0), [-1]), h.i64([0]), h.i64([numel]), h.i64([1]))
    return ops.reshape(_mix(counter), shape, False).output(0)


def _keys(seed, streams: list[int]):
    """The hash keys of ``streams`` under this call's ``seed`` (i32, one per stream; a scalar
    for one stream)."""
    s0 = ops.gather(seed, _c(0), _c(0))
    s1 = ops.gather(seed, _c(1), _c(0))
    golden = [_u32(GOLDEN * (s + 1)) for s in streams]
    golden = ops.constant(golden[0] if len(streams) == 1 else np.stack(golden)).output(0)
    return _mix(ops.add(_mix(ops.bitwise_xor(s0, golden)), s1))


def share_stream_keys(ctx) -> None:
    """Computes every draw's key in one vector instead of each on its own.

    A key is 28 scalar integer ops. The CPU plugin runs each as a node of its own, and keeps
    every node's kernel for the compiled model's life: GPT-2's training forward, with 37
    dropouts, ran 1189 scalar elementwise nodes. Vectorized, the graph has one chain and a
    Gather per draw, and the keys are the same numbers."""
    if len(ctx.stream_keys) < 2:
        return
    streams = [stream for stream, _ in ctx.stream_keys]
    keys = _keys(ctx.random_seed(), streams)
    for i, (_, key) in enumerate(ctx.stream_keys):
        key.replace(ops.gather(keys, _c(i), _c(0)).output(0))
    ctx.stream_keys.clear()


def _iota(n: int):
    """0 .. n-1 as i32 (the hash's arithmetic type)."""
    return ops.range(_c(0), _c(n), _c(1), "i32").output(0)


def _rows_and_columns(dims: list[int]) -> tuple[int, int]:
    """Splits a shape into leading and trailing dims whose products are closest to each other."""
    best = (math.prod(dims), 1)
    for cut in range(len(dims) + 1):
        rows, columns = math.prod(dims[:cut]), math.prod(dims[cut:])
        if max(rows, columns) < max(best):
            best = (rows, columns)
    return best


def uniform(ctx, shape, dtype: torch.dtype, stream: int):
    """Uniform on [0, 1) in ``dtype``, with as many random bits as the dtype can hold below 1."""
    bits = _MANTISSA_BITS.get(dtype, _FLOAT_BITS)
    value = ops.convert(_shr(random_bits(ctx, shape, stream), 32 - bits), "f32")
    return ops.multiply(value, h.const(2.0**-bits, torch.float32)).output(0)


def _shape_like(x):
    """``x``'s shape, as a constant when static (so empty shapes are seen at lowering time)."""
    dims = h.static_shape(x)
    return h.as_shape(dims) if None not in dims else h.shape_of(x)


def _plain_rand(node) -> str | None:
    if node.kwargs.get("generator") is not None:
        return "an explicit torch.Generator cannot be drawn from inside OpenVINO"
    return None


@lowers(aten.rand.default, validator=_plain_rand)
def rand(ctx, node, size, **kwargs):
    dtype = h.out_dtype(node)
    return h.cast(uniform(ctx, h.as_shape(size), dtype, ctx.new_stream()), dtype)


@lowers(aten.randn.default, validator=_plain_rand)
def randn(ctx, node, size, **kwargs):
    return h.cast(normal(ctx, h.as_shape(size)), h.out_dtype(node))


@lowers(aten.native_dropout.default)
def native_dropout(ctx, node, x, p, train):
    """Keeps each element with probability 1 - p and scales it by 1 / (1 - p); returns the mask too."""
    dtype = h.out_dtype(node)
    if train is False or p == 0:
        return [x, ops.broadcast(h.const(True, torch.bool), _shape_like(x)).output(0)]
    if p == 1:
        shape = _shape_like(x)
        return [
            ops.broadcast(h.const(0, dtype), shape).output(0),
            ops.broadcast(h.const(False, torch.bool), shape).output(0),
        ]
    keep = ops.greater(uniform(ctx, _shape_like(x), torch.float32, ctx.new_stream()), h.const(p, torch.float32))
    # x * (mask / (1 - p)) as ATen computes it: a dropped NaN stays NaN. A Select, not a Convert of
    # the mask: the CPU plugin converts booleans in a reference kernel.
    noise = ops.select(keep, h.const(1.0 / (1.0 - p), dtype), h.const(0.0, dtype))
    return [ops.multiply(x, noise).output(0), keep.output(0)]


@lowers(aten.rrelu_with_noise_functional.default, validator=_plain_rand)
def rrelu_with_noise(ctx, node, x, noise, lower=0.125, upper=1 / 3, training=False, **kwargs):
    """RReLU. In training each element at or below 0 is scaled by its own draw from
    U(lower, upper), which is also the returned noise (1 elsewhere, NaN included); in eval by the
    mean slope, the noise returned as it came."""
    dtype = h.out_dtype(node)
    if not training:
        return [leaky_relu(ctx, node, x, (lower + upper) / 2), noise]
    draw = _affine(uniform(ctx, _shape_like(x), torch.float32, ctx.new_stream()), lower, upper - lower, dtype)
    slope = ops.select(ops.less_equal(x, h.const(0, dtype)), draw, h.const(1, dtype)).output(0)
    return [ops.multiply(x, slope).output(0), slope]


def normal(ctx, shape):
    """Standard normal in f32 for ``shape``: Box-Muller on two uniform streams,
    sqrt(-2 ln(1 - u1)) * cos(2 pi u2)."""
    u1 = uniform(ctx, shape, torch.float32, ctx.new_stream())
    u2 = uniform(ctx, shape, torch.float32, ctx.new_stream())
    log = ops.log(ops.subtract(h.const(1.0, torch.float32), u1))  # 1 - u1 is in (0, 1]
    radius = ops.sqrt(ops.multiply(log, h.const(-2.0, torch.float32)))
    angle = ops.cos(ops.multiply(u2, h.const(2 * math.pi, torch.float32)))
    return ops.multiply(radius, angle).output(0)


def _affine(z, loc, scale, dtype: torch.dtype):
    """``loc + scale * z`` in f32 (loc/scale: numbers or tensors), cast to ``dtype``."""
    return h.cast(ops.add(ops.multiply(z, h.cast(scale, torch.float32)), h.cast(loc, torch.float32)).output(0), dtype)


@lowers(aten.rand_like.default)
def rand_like(ctx, node, x, **kwargs):
    dtype = h.out_dtype(node)
    return h.cast(uniform(ctx, _shape_like(x), dtype, ctx.new_stream()), dtype)


@lowers(aten.randn_like.default)
def randn_like(ctx, node, x, **kwargs):
    return h.cast(normal(ctx, _shape_like(x)), h.out_dtype(node))


@lowers(aten.uniform.default, validator=_plain_rand)
def uniform_(ctx, node, x, low=0.0, high=1.0, **kwargs):
    u = uniform(ctx, _shape_like(x), h.out_dtype(node), ctx.new_stream())
    return _affine(u, low, high - low, h.out_dtype(node))


def _deviation_checked(ctx, std) -> None:
    """torch raises for a negative (or NaN) standard deviation; the plugin drew with it."""
    eager_checks.holds(ctx, ops.greater_equal(eager_checks.as_f32(std), h.const(0.0, torch.float32)).output(0))


@lowers(aten.normal_functional.default, validator=_plain_rand)
def normal_functional(ctx, node, x, mean=0.0, std=1.0, **kwargs):
    _deviation_checked(ctx, std)
    return _affine(normal(ctx, _shape_like(x)), mean, std, h.out_dtype(node))


@lowers(aten.normal.float_float, validator=_plain_rand)
def normal_float_float(ctx, node, mean, std, size, **kwargs):
    _deviation_checked(ctx, std)
    return _affine(normal(ctx, h.as_shape(size)), mean, std, h.out_dtype(node))


@lowers(aten.normal.Tensor_Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor, validator=_plain_rand)
def normal_tensor(ctx, node, mean, std, **kwargs):
    _deviation_checked(ctx, std)
    shape = h.broadcast_shape(*[v for v in (mean, std) if h.is_output(v)])
    return _affine(normal(ctx, shape), mean, std, h.out_dtype(node))


@lowers(aten.bernoulli.p, validator=_plain_rand)
def bernoulli_p(ctx, node, x, p=0.5, **kwargs):
    """1 with probability ``p``, in ``x``'s shape and dtype."""
    u = uniform(ctx, _shape_like(x), torch.float32, ctx.new_stream())
    return h.cast(ops.less(u, h.const(p, torch.float32)).output(0), h.out_dtype(node))


@lowers(aten.exponential.default, validator=_plain_rand)
def exponential(ctx, node, x, lambd=1.0, **kwargs):
    """-ln(1 - u) / lambd (inverse CDF)."""
    u = uniform(ctx, _shape_like(x), torch.float32, ctx.new_stream())
    z = ops.negative(ops.log(ops.subtract(h.const(1.0, torch.float32), u)))
    return _affine(z.output(0), 0.0, 1.0 / lambd, h.out_dtype(node))


def _randint_range(node) -> str | None:
    reason = _plain_rand(node)
    if reason is not None:
        return reason
    if node.target is aten.randint_like.default:
        low, high = 0, node.args[1]
    elif node.target is aten.randint_like.low_dtype:
        low, high = node.args[1], node.args[2]
    elif node.target is aten.randint.low:
        low, high = node.args[0], node.args[1]
    else:
        low, high = 0, node.args[0]
    if not isinstance(low, int) or not isinstance(high, int):
        return "symbolic bounds"
    if high - low > 2**_FLOAT_BITS:
        return f"a range wider than 2**{_FLOAT_BITS} values"
    return None


def _randint(ctx, node, low: int, high: int, shape):
    """floor(u * (high - low)) + low: exact for ranges up to 2**24 (u has 24 random bits)."""
    u = uniform(ctx, shape, torch.float32, ctx.new_stream())
    k = ops.floor(ops.multiply(u, h.const(float(high - low), torch.float32)))
    return h.cast(ops.add(k, h.const(float(low), torch.float32)).output(0), h.out_dtype(node))


@lowers(aten.randint.default, validator=_randint_range)
def randint(ctx, node, high, size, **kwargs):
    return _randint(ctx, node, 0, high, h.as_shape(size))


@lowers(aten.randint.low, validator=_randint_range)
def randint_low(ctx, node, low, high, size, **kwargs):
    return _randint(ctx, node, low, high, h.as_shape(size))


@lowers(aten.randint_like.default, validator=_randint_range)
def randint_like(ctx, node, x, high, **kwargs):
    return _randint(ctx, node, 0, high, _shape_like(x))


@lowers(aten.randint_like.low_dtype, validator=_randint_range)
def randint_like_low(ctx, node, x, low, high, **kwargs):
    return _randint(ctx, node, low, high, _shape_like(x))


@lowers(aten.log_normal.default, validator=_plain_rand)
def log_normal(ctx, node, x, mean=1.0, std=2.0, **kwargs):
    z = _affine(normal(ctx, _shape_like(x)), mean, std, torch.float32)
    return h.cast(ops.exp(z).output(0), h.out_dtype(node))


@lowers(aten.cauchy.default, validator=_plain_rand)
def cauchy(ctx, node, x, median=0.0, sigma=1.0, **kwargs):
    """median + sigma * tan(pi * (u - 1/2)) (inverse CDF)."""
    u = uniform(ctx, _shape_like(x), torch.float32, ctx.new_stream())
    z = ops.tan(ops.multiply(ops.subtract(u, h.const(0.5, torch.float32)), h.const(math.pi, torch.float32)))
    return _affine(z.output(0), median, sigma, h.out_dtype(node))


@lowers(aten.geometric.default, validator=_plain_rand)
def geometric(ctx, node, x, p, **kwargs):
    """Trials up to the first success: ceil(ln(1 - u) / ln(1 - p)), at least 1."""
    u = uniform(ctx, _shape_like(x), torch.float32, ctx.new_stream())
    log = ops.log(ops.subtract(h.const(1.0, torch.float32), u))
    k = ops.ceil(ops.divide(log, h.const(math.log1p(-p), torch.float32)))
    return h.cast(ops.maximum(k, h.const(1.0, torch.float32)).output(0), h.out_dtype(node))
