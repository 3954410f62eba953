"""Backward ops of training graphs (``aot_autograd=True``) and training-mode batch norm.

Gradients are expressed with forward OpenVINO ops: ConvolutionBackpropData and convolutions
with swapped axes for ``convolution_backward``, ScatterElementsUpdate / ScatterNDUpdate with
sum reduction for max-pool and embedding gradients, a transposed convolution with a ones
kernel for average pooling, and the closed-form normalisation gradients for layer/group norm
and weight norm.
Outputs that ``output_mask`` switches off are returned as None (nothing reads them).
"""

from __future__ import annotations

import numpy as np
import openvino as ov
import openvino.opset16 as ops
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.ops.pooling import avg_divisors
from fxvino.lowering.registry import lowers

aten = torch.ops.aten


def _expand(v, n: int) -> list[int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


def _axes(values) -> ov.Output:
    return h.const(list(values), torch.int64)


def _static_spatial(node, n: int) -> str | None:
    """Decline unless grad_output and input (args 0 and 1) have static last ``n`` dims."""
    for p in (0, 1):
        if any(not isinstance(d, int) for d in h.meta(node.args[p]).shape[-n:]):
            return "needs static spatial sizes"
    return None


def _spatial_dims(node) -> int:
    return 3 if "3d" in node.target.__name__ else 2


# ----------------------------------------------------------------------------- convolution


def _conv_bw_ok(node) -> str | None:
    x, w = h.meta(node.args[1]), h.meta(node.args[2])
    if x.dim() not in (3, 4, 5):
        return "only batched 1-3d convolutions are lowered"
    if any(not isinstance(d, int) for d in w.shape):
        return "weights must have a static shape"
    if node.args[7] and node.args[9] != 1:
        return "grouped transposed convolution is not lowered"
    mask = node.args[10]
    if mask[1] and any(not isinstance(d, int) for t in (x, h.meta(node.args[0])) for d in t.shape):
        # The weight gradient is a convolution whose filter is grad_output itself.
        return "weight gradient under dynamic shapes (OpenVINO CPU convolutions need a static filter shape)"
    return None


def _weight_grad(x, go, groups: int, stride, padding, dilation, kernel):
    """dL/dW of a (grouped) convolution of ``x`` giving ``go``: a convolution over the batch axis.

    gw[co, ci, k] = sum_{n, o} go[n, co, o] * x_pad[n, ci, o * stride + k * dilation], i.e. ``x``
    with batch and channels swapped, convolved with ``go`` (same swap) as the filter, stride and
    dilation exchanged. Returns (C_go, C_x / groups, *kernel).
    """
    r = h.rank(x)
    n = r - 2
    sp = list(range(2, r))
    pointwise = _pointwise_weight_grad(x, go, groups, stride, padding, kernel)
    if pointwise is not None:
        return pointwise
    product = _im2col_weight_grad(x, go, groups, stride, padding, dilation, kernel)
    if product is not None:
        return product
    end = _weight_grad_end_padding(x, go, stride, padding, dilation, kernel)
    if groups == 1:
        xt = h.transpose(x, [1, 0, *sp])
        gt = h.transpose(go, [1, 0, *sp])
        gw = ops.convolution(xt, gt, dilation, padding, end, stride).output(0)
    else:
        cx, cg = h.static_shape(x)[1], h.static_shape(go)[1]
        xs = [h.dim(x, 0), groups, cx // groups] + [h.dim(x, d) for d in sp]
        gs = [h.dim(go, 0), groups, cg // groups] + [h.dim(go, d) for d in sp]
        # x: (N, G, Cig, ...) -> (Cig, G * N, ...); go: (N, G, Cog, ...) -> (G, Cog, N, ...)
        xt = h.transpose(h.reshape(x, xs), [2, 1, 0, *[d + 1 for d in sp]])
        xt = h.reshape(xt, [cx // groups, -1] + [h.dim(x, d) for d in sp])
        gt = h.transpose(h.reshape(go, gs), [1, 2, 0, *[d + 1 for d in sp]])
        gw = ops.group_convolution(xt, gt, dilation, padding, end, stride).output(0)
    if h.static_shape(gw)[2:] != list(kernel):
        # Longer than the kernel (trailing rows no window reached): crop.
        gw = ops.slice(gw, _axes([0] * n), _axes(kernel), _axes([1] * n), _axes(sp)).output(0)
    return _swap_leading_axes(gw)


# Up to this many kernel taps, from this many input channels and up to this many bytes of
# gathered windows, a 2-d weight gradient is one matrix product (see _im2col_weight_grad).
_IM2COL_TAPS = 9
_IM2COL_CHANNELS = 32
_IM2COL_BYTES = 32 << 20


def _im2col_weight_grad(x, go, groups: int, stride, padding, dilation, kernel):
    """dL/dW of a 2-d convolution as one matrix product, or None where it does not pay.

    gw[co, (i, j, ci)] = sum_{n, p} go[n, p, co] * cols[n, p, (i, j, ci)]: ``cols`` holds, for
    each output pixel p, the input window that produced it (channels-last: the kernel's taps
    side by side, gathered from the padded input), so the product contracts over every pixel
    of every sample at once. The convolution over the batch contracts over only the
    batch per tap (8 values at batch 8), which the plugin runs at a fraction of its speed:
    ResNet-50's 3x3 weight gradients took 6.9-13.9 ms each that way and 6.4-10.3 ms as products
    (isolated, Zen 5, 2 threads). The copy grows with the taps and the product's gain with the
    channels: the 7x7 stem over 3 channels ran 20 ms as a convolution, 26 ms as a product. The
    windows live in the plugin's arena: ResNet-50's 64-channel 56x56 layers gather 58 MB each
    for 0.5-1.5 ms saved, so above 32 MB the convolution stays (peak RSS 2057 -> 2031 MB, the
    backward 5-10 ms slower than with every 3x3 as a product).
    Both operands are channels-last, as the training backward holds activations (channels_last.py),
    where taking them costs nothing.
    """
    xs, gs = h.static_shape(x), h.static_shape(go)
    if groups != 1 or len(xs) != 4 or None in xs or None in gs or None in kernel:
        return None
    n, cin, _, _ = xs
    cout, ho, wo = gs[1:]
    kh, kw = kernel
    if kh * kw > _IM2COL_TAPS or cin < _IM2COL_CHANNELS:
        return None
    if n * ho * wo * kh * kw * cin * h.dtype_of(x).itemsize > _IM2COL_BYTES:
        return None
    end = _weight_grad_end_padding(x, go, stride, padding, dilation, kernel)
    padded = h.transpose(x, [0, 2, 3, 1])
    if any(padding) or any(end):
        begins, ends = h.const([0, *padding, 0], torch.int64), h.const([0, *end, 0], torch.int64)
        padded = ops.pad(padded, begins, ends, "constant", h.cast_like(0, padded)).output(0)
    hp, wp = h.static_shape(padded)[1:3]
    # Every window's pixels, window by window: one Gather of whole pixels (Cin values each) did
    # what nine strided Slices and a Concat did in 70% of the time.
    oy, ox, ky, kx = np.meshgrid(np.arange(ho), np.arange(wo), np.arange(kh), np.arange(kw), indexing="ij")
    pixels = (oy * stride[0] + ky * dilation[0]) * wp + ox * stride[1] + kx * dilation[1]
    flat = h.reshape(padded, [n, hp * wp, cin])
    taken = ops.gather(flat, ops.constant(pixels.reshape(-1).astype(np.int32)), h.const(1, torch.int64)).output(0)
    # Samples and pixels are one contraction: a product per sample summed over the batch wrote
    # and re-read an [N, Cout, taps*Cin] stack (75 MB for 512x512x3x3 at batch 8), and its
    # contraction was short where pixels are few (49 at 7x7).
    cols = h.reshape(taken, [n * ho * wo, kh * kw * cin])
    rows = h.reshape(h.transpose(go, [0, 2, 3, 1]), [n * ho * wo, cout])
    product = ops.matmul(rows, cols, True, False).output(0)
    return h.transpose(h.reshape(product, [cout, kh, kw, cin]), [0, 3, 1, 2])


def _weight_grad_end_padding(x, go, stride, padding, dilation, kernel) -> list[int]:
    """The end padding that makes the weight gradient's convolution exactly kernel-sized.

    The forward's end padding can hold rows no window reached (a stride that does not divide
    the padded input): with it the convolution over the batch computes kernel positions past
    the kernel, 16 taps for a stride-2 3x3 (ResNet-50's downsampling convolutions: 12 ms
    instead of 7) and 64 for the 7x7 stem. The least end padding that still covers every
    window is ``d * (k - 1) + s * (o - 1) + 1 - size - begin``, never more than the forward's.
    Unknown sizes keep the forward's padding (and the crop after it).
    """
    ends = _covering_end_padding(x, go, stride, padding, dilation, kernel)
    return list(padding) if ends is None else [max(0, e) for e in ends]


def _covering_end_padding(x, go, stride, padding, dilation, kernel) -> list[int] | None:
    """Per spatial axis, the end padding after which the last window ends exactly at the
    padded input's end: ``d * (k - 1) + s * (o - 1) + 1 - size - begin``. Negative where input
    rows past the last window exist; None where a size is unknown."""
    sizes, outs = h.static_shape(x)[2:], h.static_shape(go)[2:]
    if None in sizes or None in outs or None in kernel:
        return None
    return [
        d * (k - 1) + s * (o - 1) + 1 - size - p
        for size, o, k, s, p, d in zip(sizes, outs, kernel, stride, padding, dilation, strict=True)
    ]


def _swap_leading_axes(gw: ov.Output) -> ov.Output:
    """(A, B, *kernel) -> (B, A, *kernel). The convolution leaves its result channels-last in
    the CPU plugin, where a 4-d Transpose of it ran a generic kernel (7.5 ms for 512x512x3x3);
    flattened to 3-d it is a plain reorder and a fast permutation (1.6 ms)."""
    shape = h.static_shape(gw)
    sp = list(range(2, len(shape)))
    if None in shape:
        return h.transpose(gw, [1, 0, *sp])
    flat = h.transpose(h.reshape(gw, [shape[0], shape[1], -1]), [1, 0, 2])
    return h.reshape(flat, [shape[1], shape[0], *shape[2:]])


def _pointwise_weight_grad(x, go, groups: int, stride, padding, kernel):
    """dL/dW of a 1x1 convolution as matrix products, or None for other convolutions.

    gw[co, ci] = sum_n go[n, co, :] . x[n, ci, ::stride]: a batched MatMul over the batch and a
    sum. The convolution-over-the-batch form runs these as convolutions with an 8-channel,
    56x56 filter after transposing both operands, which the CPU plugin does slowly, and with a
    stride it computes stride**2 times the outputs it keeps: ResNet-50's 36 pointwise weight
    gradients were most of a 1 s batch-8 backward.
    """
    spatial = h.static_shape(go)[2:]
    if groups != 1 or any(k != 1 for k in kernel) or any(padding) or None in spatial:
        return None
    n = len(spatial)
    if any(s != 1 for s in stride):
        stops = [(o - 1) * s + 1 for o, s in zip(spatial, stride, strict=True)]
        x = ops.slice(x, _axes([0] * n), _axes(stops), _axes(stride), _axes(range(2, n + 2))).output(0)
    flat_go = h.reshape(go, [h.dim(go, 0), h.dim(go, 1), -1])
    flat_x = h.reshape(x, [h.dim(x, 0), h.dim(x, 1), -1])
    gw = ops.reduce_sum(ops.matmul(flat_go, flat_x, False, True), _axes([0]), False).output(0)
    return h.unsqueeze(gw, list(range(2, n + 2)))


def _input_grad_end_padding(x, go, stride, padding, dilation, kernel) -> tuple[list[int], list[int]]:
    """End padding and output padding for the input gradient's transposed convolution, so that
    it returns exactly the input's size: input rows no window reached (a stride that does not
    divide the padded input) are output padding, zeros the convolution writes itself. Cropping
    an end padding afterwards cost a row of work and a copy (ResNet-50's 3x3 gradients at 14x14
    computed 15x15 and sliced it), and padding a short result cost a copy (its strided 1x1
    downsampling gradients: 55x55 padded to 56x56, 2.9 ms). Unknown sizes get neither, and
    :func:`_fit` pads the result."""
    ends = _covering_end_padding(x, go, stride, padding, dilation, kernel)
    if ends is None:
        return [0] * len(kernel), [0] * len(kernel)
    return [max(e, 0) for e in ends], [max(-e, 0) for e in ends]


def _fit(y, like, n: int):
    """Pad (zeros) or crop the trailing spatial edge of ``y`` to the spatial size of ``like``."""
    ys, ls = h.static_shape(y)[2:], h.static_shape(like)[2:]
    if all(a is not None for a in ys + ls):
        extra = [b - a for a, b in zip(ys, ls, strict=True)]
        if not any(extra):
            return y
        ends = h.as_shape([0, 0, *extra])
    else:
        ends = ops.subtract(h.shape_of(like), h.shape_of(y)).output(0)
        ends = ops.concat([h.const([0, 0], torch.int64), ops.slice(ends, _axes([2]), _axes([2 + n]), _axes([1]))], 0)
    return ops.pad(y, h.const([0] * (n + 2), torch.int64), ends, "constant", h.cast_like(0, y)).output(0)


@lowers(aten.convolution_backward.default, validator=_conv_bw_ok)
def convolution_backward(
    ctx, node, go, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    dtype = h.out_dtype(node, 0) if output_mask[0] else h.dtype_of(go)
    go, x, w = (h.cast(v, dtype) for v in (go, x, w))
    n = h.rank(x) - 2
    stride, padding, dilation = (_expand(v, n) for v in (stride, padding, dilation))
    kernel = h.static_shape(w)[2:]
    grad_input = grad_weight = grad_bias = None
    if not transposed:
        if output_mask[0]:
            end, extra = _input_grad_end_padding(x, go, stride, padding, dilation, kernel)
            if groups == 1:
                gi = ops.convolution_backprop_data(
                    go, w, stride, None, padding, end, dilation, output_padding=extra
                ).output(0)
            else:
                ws = h.static_shape(w)
                gw_shape = [groups, ws[0] // groups, ws[1], *ws[2:]]
                gi = ops.group_convolution_backprop_data(
                    go, h.reshape(w, gw_shape), stride, None, padding, end, dilation, output_padding=extra
                ).output(0)
            grad_input = _fit(gi, x, n)
        if output_mask[1]:
            grad_weight = _weight_grad(x, go, groups, stride, padding, dilation, kernel)
    else:
        # y = conv_transpose(x, w): dL/dx is the forward convolution of go with w, and dL/dw
        # is the weight gradient of the convolution "go -> x" (roles swapped), already (Cin, Cout, k).
        if output_mask[0]:
            grad_input = ops.convolution(go, w, stride, padding, padding, dilation).output(0)
        if output_mask[1]:
            grad_weight = _weight_grad(go, x, 1, stride, padding, dilation, kernel)
    if output_mask[2]:
        grad_bias = ops.reduce_sum(go, _axes([0, *range(2, n + 2)]), False).output(0)
    return (grad_input, grad_weight, grad_bias)


# ----------------------------------------------------------------------------- pooling


def _flat_spatial(v, n: int):
    """(..., *spatial[n]) -> (..., prod(spatial))."""
    r = h.rank(v)
    lead = [h.dim(v, d) for d in range(r - n)]
    return h.reshape(v, [*lead, -1])


@lowers(aten.max_pool2d_with_indices_backward.default, aten.max_pool3d_with_indices_backward.default)
def max_pool_backward(ctx, node, go, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    # torch's indices are flat offsets within each (N, C) plane: scatter-add go into the plane.
    n = 2 if node.target is aten.max_pool2d_with_indices_backward.default else 3
    go = h.cast_like(go, x)
    upd = _flat_spatial(go, n)
    idx = _flat_spatial(h.cast(indices, torch.int64), n)
    zeros = ops.broadcast(h.cast_like(0, x), h.shape_of(_flat_spatial(x, n))).output(0)
    plane = ops.scatter_elements_update(zeros, idx, upd, h.const(-1, torch.int64), "sum").output(0)
    return ops.reshape(plane, h.shape_of(x), False).output(0)


@lowers(aten.rrelu_with_noise_backward.default)
def rrelu_with_noise_backward(ctx, node, go, x, noise, lower, upper, training, self_is_result):
    """RReLU's gradient, as ATen's decomposition: the forward's drawn slopes in training; else
    leaky ReLU's with the mean slope (where ``x > 0`` is false, NaN included)."""
    if training and upper - lower > 1e-6:
        return ops.multiply(go, h.cast_like(noise, go)).output(0)
    slope = ops.multiply(go, h.cast_like((lower + upper) / 2, go))
    return ops.select(ops.less(h.cast_like(0, x), x), go, slope).output(0)


def _avg_bw_ok(node) -> str | None:
    return _static_spatial(node, _spatial_dims(node))


@lowers(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default, validator=_avg_bw_ok)
def avg_pool_backward(
    ctx, node, go, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None
):
    n = 2 if node.target is aten.avg_pool2d_backward.default else 3
    kernel = _expand(kernel_size, n)
    stride = _expand(stride, n) if stride else kernel
    padding = _expand(padding, n)
    in_sizes, out_sizes = h.static_shape(x)[-n:], h.static_shape(go)[-n:]
    div = avg_divisors(in_sizes, out_sizes, kernel, stride, padding, count_include_pad, divisor_override)
    g = ops.divide(h.cast_like(go, x), h.cast_like(h.const(div, torch.float32), x)).output(0)
    # Spread each output's share over its window: a transposed convolution with a ones kernel
    # over single-channel planes, in the padded coordinate frame; then drop the padding.
    planes = h.reshape(g, [-1, 1, *out_sizes])
    ones = h.cast_like(h.const(np.ones([1, 1, *kernel], np.float32), torch.float32), x)
    spread = ops.convolution_backprop_data(planes, ones, stride, None, [0] * n, [0] * n, [1] * n).output(0)
    full = [(o - 1) * s + k for o, s, k in zip(out_sizes, stride, kernel, strict=True)]
    begins = [0, 0] + [-p for p in padding]
    ends = [0, 0] + [i - (f - p) for i, f, p in zip(in_sizes, full, padding, strict=True)]
    cropped = ops.pad(spread, h.as_shape(begins), h.as_shape(ends), "constant", h.cast_like(0, x)).output(0)
    return ops.reshape(cropped, h.shape_of(x), False).output(0)


def _adaptive_matrix(i: int, o: int) -> np.ndarray:
    """(o, i): row ``r`` averages input cells floor(r*i/o) .. ceil((r+1)*i/o)."""
    m = np.zeros((o, i), np.float32)
    for r in range(o):
        start, end = (r * i) // o, -((-(r + 1) * i) // o)
        m[r, start:end] = 1.0 / (end - start)
    return m


def _adaptive_bw_ok(node) -> str | None:
    return _static_spatial(node, _spatial_dims(node))


@lowers(
    aten._adaptive_avg_pool2d_backward.default, aten._adaptive_avg_pool3d_backward.default, validator=_adaptive_bw_ok
)
def adaptive_avg_pool_backward(ctx, node, go, x):
    n = 2 if node.target is aten._adaptive_avg_pool2d_backward.default else 3
    r = h.rank(x)
    g = h.cast_like(go, x)
    in_sizes, out_sizes = h.static_shape(x)[-n:], h.static_shape(go)[-n:]
    for k in range(n):
        axis = r - n + k
        order = [d for d in range(r) if d != axis] + [axis]
        back = [order.index(d) for d in range(r)]
        m = h.cast_like(h.const(_adaptive_matrix(in_sizes[k], out_sizes[k]), torch.float32), x)
        g = h.transpose(ops.matmul(h.transpose(g, order), m, False, False).output(0), back)
    return g


# ----------------------------------------------------------------------------- embedding


@lowers(aten.embedding_dense_backward.default)
def embedding_dense_backward(ctx, node, go, indices, num_weights, padding_idx, scale_grad_by_freq):
    dtype = h.out_dtype(node)
    go = h.cast(go, dtype)
    width = h.dim(go, -1)
    idx = h.reshape(h.cast(indices, torch.int64), [-1, 1])
    upd = ops.reshape(go, h.as_shape([-1, width]), False).output(0)
    if padding_idx is not None and padding_idx >= 0:
        hit = ops.equal(idx, h.const(padding_idx, torch.int64)).output(0)
        upd = ops.select(hit, h.const(0, dtype), upd).output(0)
    if scale_grad_by_freq:
        counts = ops.broadcast(h.const(0, dtype), h.as_shape([num_weights])).output(0)
        ones = ops.broadcast(h.const(1, dtype), ops.shape_of(idx, "i64").output(0)).output(0)
        counts = ops.scatter_nd_update(counts, idx, h.squeeze(ones, 1), "sum").output(0)
        upd = ops.divide(upd, ops.gather(counts, idx, h.const(0, torch.int64))).output(0)
    zeros = ops.broadcast(h.const(0, dtype), h.as_shape([num_weights, width])).output(0)
    return ops.scatter_nd_update(zeros, idx, upd, "sum").output(0)


# ----------------------------------------------------------------------------- normalisation


def _norm_input_grad(g, x_hat, rstd, axes):
    """rstd * (g - mean(g) - x_hat * mean(g * x_hat)) over ``axes``."""
    mean_g = ops.reduce_mean(g, axes, True)
    mean_gx = ops.reduce_mean(ops.multiply(g, x_hat), axes, True)
    inner = ops.subtract(ops.subtract(g, mean_g), ops.multiply(x_hat, mean_gx))
    return ops.multiply(rstd, inner).output(0)


@lowers(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(ctx, node, go, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    dtype = h.dtype_of(x)
    go, mean, rstd = (h.cast(v, dtype) for v in (go, mean, rstd))
    r = h.rank(x)
    k = len(normalized_shape)
    axes = _axes(range(r - k, r))
    batch_axes = _axes(range(r - k))
    x_hat = ops.multiply(ops.subtract(x, mean), rstd).output(0)
    g = go if weight is None else ops.multiply(go, h.cast(weight, dtype)).output(0)
    grad_input = _norm_input_grad(g, x_hat, rstd, axes) if output_mask[0] else None
    grad_weight = grad_bias = None
    if output_mask[1] and weight is not None:
        grad_weight = ops.reduce_sum(ops.multiply(go, x_hat), batch_axes, False).output(0)
    if output_mask[2] and bias is not None:
        grad_bias = ops.reduce_sum(go, batch_axes, False).output(0)
    return (grad_input, grad_weight, grad_bias)


@lowers(aten.native_group_norm_backward.default)
def native_group_norm_backward(ctx, node, go, x, mean, rstd, weight, n, c, hw, group, output_mask):
    dtype = h.dtype_of(x)
    go, mean, rstd = (h.cast(v, dtype) for v in (go, mean, rstd))
    by_channel = h.as_shape([n, c, -1])
    by_group = h.as_shape([n, group, -1])
    go_c = ops.reshape(go, by_channel, False).output(0)
    x_g = ops.reshape(x, by_group, False).output(0)
    mean, rstd = h.unsqueeze(mean, 2), h.unsqueeze(rstd, 2)
    x_hat_g = ops.multiply(ops.subtract(x_g, mean), rstd).output(0)
    x_hat_c = ops.reshape(x_hat_g, by_channel, False).output(0)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        g = go_c if weight is None else ops.multiply(go_c, h.reshape(h.cast(weight, dtype), [1, -1, 1])).output(0)
        g = ops.reshape(g, by_group, False).output(0)
        gi = _norm_input_grad(g, x_hat_g, rstd, _axes([2]))
        grad_input = ops.reshape(gi, h.shape_of(x), False).output(0)
    if output_mask[1] and weight is not None:
        grad_weight = ops.reduce_sum(ops.multiply(go_c, x_hat_c), _axes([0, 2]), False).output(0)
    if output_mask[2]:
        grad_bias = ops.reduce_sum(go_c, _axes([0, 2]), False).output(0)
    return (grad_input, grad_weight, grad_bias)


@lowers(aten._weight_norm_interface_backward.default)
def weight_norm_interface_backward(ctx, node, grad_w, v, g, norms, dim):
    """Gradients of ``w = v * g / ||v||`` (norms over every dim but ``dim``, kept as size 1):
    ``grad_g = sum(grad_w * v) / norm`` and ``grad_v = g / norm * (grad_w - v * grad_g / norm)``.
    Computed in the norms' type (f32 when ``g`` is bf16, as PyTorch's kernel accumulates)."""
    dtype = h.dtype_of(norms)
    grad_w, v_c, g_c = (h.cast(t, dtype) for t in (grad_w, v, g))
    r = h.rank(v)
    axes = [i for i in range(r) if i != h.norm_dim(dim, r)]
    dot = ops.multiply(grad_w, v_c).output(0)
    if axes:
        dot = ops.reduce_sum(dot, _axes(axes), True).output(0)
    grad_g = ops.divide(dot, norms).output(0)
    scale = ops.divide(g_c, norms)
    grad_v = ops.multiply(scale, ops.subtract(grad_w, ops.multiply(v_c, ops.divide(grad_g, norms))))
    return (h.cast(grad_v.output(0), h.dtype_of(v)), h.cast(grad_g, h.dtype_of(g)))


def _batch_norm_ok(node) -> str | None:
    if node.target is aten._native_batch_norm_legit.default:
        training = node.args[5]
        if training and (node.args[3] is not None or node.args[4] is not None):
            return "updates running_mean/running_var in place (functional graphs use the _functional variant)"
    return None


def _batch_norm(node, x, weight, bias, running_mean, running_var, training, momentum, eps, functional):
    dtype = h.out_dtype(node, 0)
    x = h.cast(x, dtype)
    r = h.rank(x)
    axes = _axes([0, *range(2, r)])
    shape = [1, -1] + [1] * (r - 2)
    if training:
        mean = ops.reduce_mean(x, axes, True).output(0)
        var = ops.reduce_mean(ops.squared_difference(x, mean), axes, True).output(0)
    else:
        mean = h.reshape(h.cast(running_mean, dtype), shape)
        var = h.reshape(h.cast(running_var, dtype), shape)
    rstd = ops.divide(h.const(1, dtype), ops.sqrt(ops.add(var, h.const(eps, dtype)))).output(0)
    # The squared deviations are one op and y = x * scale + shift (per-channel scale and shift,
    # as PyTorch's CPU kernel computes it): the centered x, squared by a Multiply of it by itself
    # and normalized, was written out and read back, two passes over the activation more per
    # layer (ResNet-50's training forward: ~1.3 ms each for a 256 x 56 x 56 batch norm).
    scale = rstd
    if weight is not None:
        scale = ops.multiply(scale, h.reshape(h.cast(weight, dtype), shape)).output(0)
    shift = ops.negative(ops.multiply(mean, scale)).output(0)
    if bias is not None:
        shift = ops.add(shift, h.reshape(h.cast(bias, dtype), shape)).output(0)
    y = ops.add(ops.multiply(x, scale), shift).output(0)
    vals = h.meta(node)
    if training:
        save_mean, save_rstd = h.reshape(mean, [-1]), h.reshape(rstd, [-1])
    else:  # torch returns empty save_mean / save_invstd outside training
        save_mean = h.const(np.zeros(tuple(vals[1].shape), np.float32), torch.float32)
        save_rstd = h.const(np.zeros(tuple(vals[2].shape), np.float32), torch.float32)
    outs = [y, save_mean, save_rstd]
    if functional:
        if training:
            count = ops.reduce_prod(ops.gather(h.shape_of(x), axes, h.const(0, torch.int64)), h.const(0, torch.int64))
            count = h.cast(count.output(0), dtype)
            unbiased = ops.divide(
                ops.multiply(h.reshape(var, [-1]), count),
                ops.maximum(ops.subtract(count, h.const(1, dtype)), h.const(1, dtype)),
            ).output(0)
            m = h.const(momentum, dtype)
            keep = h.const(1 - momentum, dtype)
            new_mean = ops.add(ops.multiply(keep, h.cast(running_mean, dtype)), ops.multiply(m, save_mean)).output(0)
            new_var = ops.add(ops.multiply(keep, h.cast(running_var, dtype)), ops.multiply(m, unbiased)).output(0)
        else:
            new_mean, new_var = running_mean, running_var
        outs += [new_mean, new_var]
    return tuple(outs)


@lowers(aten._native_batch_norm_legit.default, validator=_batch_norm_ok)
def native_batch_norm_legit(ctx, node, x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _batch_norm(node, x, weight, bias, running_mean, running_var, training, momentum, eps, False)


@lowers(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_legit_no_stats(ctx, node, x, weight, bias, training, momentum, eps):
    return _batch_norm(node, x, weight, bias, None, None, True, momentum, eps, False)


@lowers(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_legit_functional(ctx, node, x, weight, bias, running_mean, running_var, training, momentum, eps):
    return _batch_norm(node, x, weight, bias, running_mean, running_var, training, momentum, eps, True)


@lowers(aten._batch_norm_with_update_functional.default)
def batch_norm_with_update_functional(ctx, node, x, weight, bias, running_mean, running_var, momentum, eps):
    y, save_mean, save_rstd, new_mean, new_var = _batch_norm(
        node, x, weight, bias, running_mean, running_var, True, momentum, eps, True
    )
    reserve = h.const(np.zeros((0,), np.uint8), torch.uint8)  # cuDNN workspace; empty on CPU
    return (y, save_mean, save_rstd, reserve, new_mean, new_var)
