"""Float division rounded once, as IEEE's division and eager's.

While compiling, OpenVINO's ``ConvertDivide`` rewrites a float ``x / y`` as ``x * y**-1``: two
roundings, so a quarter of random f32 quotients (``x / y``: 1,002 of 4,096 on a Zen 5) and half
of those by a constant (``x / 7``: 2,209) came out one f32 step from eager's, on every CPU
class. The rewrite skips a Divide whose runtime info says it must not be converted, and
OpenVINO's own PyTorch frontend says so of every division it makes; this pass says so of every
float Divide of a lowered model, but those by a constant power of two, whose reciprocal is exact
(``x / 8``, attention's scale for 64-wide heads), which stay multiplies the plugin can fuse with
the ops around them. A division is then one vector divide where the rewrite made a reciprocal
and a multiply.

Nor does it mark a division by or of a constant whose other operand comes from a reduction,
a convolution, a matrix product or another op the CPU plugin fuses elementwise ops into
(through elementwise ops by constants): fused there, a kept Divide computes wrong values
(OpenVINO 2026.4: ``x.sum(1) / 6`` was up to 0.9 off in most values, ``1 / sqrt(mean(x) +
eps)``, layer norm's saved ``rstd``, came out as its reciprocal; OpenVINO's own conversion of
``x.sum(1) / 6`` is as wrong). Those keep the rewrite's two roundings.
"""

from __future__ import annotations

import openvino as ov
import torch

from fxvino.lowering import helpers as h
from fxvino.lowering.constant_values import ConstantValues

# ov::NonconvertibleDivide's key (OPENVINO_RTTI "nonconvertable_divide", version 0): the rewrite
# only asks whether the key is there.
_KEEP = "nonconvertable_divide_0"


def keep_divisions_exact(model: ov.Model) -> int:
    """Marks ``model``'s float Divides in place (see the module doc); returns how many."""
    marked = 0
    constant = ConstantValues(static_shapes=True)  # the plugin folds those shapes into constants
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Divide" or not node.get_output_element_type(0).is_real():
            continue
        if _exact_reciprocal(node.input_value(1)) or _may_fuse_into_a_kernel(node, constant):
            continue
        node.get_rt_info()[_KEEP] = ""
        marked += 1
    return marked


def kept_exact(node: ov.Node) -> bool:
    """Whether ``node`` is a Divide the plugin keeps (no multiply by a reciprocal to fuse)."""
    return node.get_type_name() == "Divide" and _KEEP in node.get_rt_info()


# Ops the CPU plugin fuses a chain of elementwise ops by constants into (as oneDNN post-ops).
_FUSING_KERNELS = frozenset(
    {
        "Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData",
        "MatMul", "MVN", "NormalizeL2", "Interpolate", "AvgPool", "MaxPool", "ReduceSum", "ReduceMean",
        "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogicalAnd", "ReduceLogicalOr",
    }
)  # fmt: skip


def _may_fuse_into_a_kernel(division: ov.Node, constant: ConstantValues) -> bool:
    """Whether ``division`` has a constant operand and its other one comes from a fusing
    kernel through elementwise ops whose other operands are constants."""
    operands = [division.input_value(i).get_node() for i in range(2)]
    constants = [constant(n) for n in operands]
    if constants.count(True) != 1:
        return False
    node = operands[constants.index(False)]
    while node.get_type_name() not in _FUSING_KERNELS:
        data = [node.input_value(i).get_node() for i in range(node.get_input_size())]
        data = [n for n in data if not constant(n)]
        if len(data) != 1 or node.get_type_name() not in _ELEMENTWISE:
            return False
        node = data[0]
    return True


# Elementwise ops the plugin chains as post-ops (with constant operands but the one).
_ELEMENTWISE = frozenset(
    {
        "Add", "Subtract", "Multiply", "Divide", "Power", "Maximum", "Minimum", "SquaredDifference",
        "Sqrt", "Exp", "Log", "Relu", "Clamp", "Abs", "Negative", "Sigmoid", "Tanh", "Gelu", "Swish",
        "HSwish", "HSigmoid", "Mish", "Elu", "PRelu", "Round", "Floor", "Ceiling", "Convert", "Erf",
        "SoftPlus", "Select",
    }
)  # fmt: skip


def _exact_reciprocal(divisor: ov.Output) -> bool:
    """Whether ``divisor`` is a constant whose every reciprocal is a normal f32 power of two."""
    value = h.constant_value(divisor)
    if value is None or value.numel() == 0:
        return False
    reciprocal = (1 / value.to(torch.float64)).abs()
    f32 = torch.finfo(torch.float32)
    normal = (reciprocal >= f32.tiny) & (reciprocal <= f32.max)
    return bool((normal & (torch.frexp(reciprocal).mantissa == 0.5)).all())
