"""Every op family under ``dynamic=True``: one Dynamo graph and one OpenVINO compile serve all sizes.

Each case compiles ``fn`` once with symbolic sizes and runs it at several sizes; the outputs
must match eager, everything must run on OpenVINO, and the number of Dynamo graphs, fxvino
graph reports and OpenVINO partitions compiled must each stay 1 across the sizes (a lowering
that bakes a size into the OpenVINO model would still pass the first size and fail later ones;
one that needs static shapes would make Dynamo recompile).

Sizes avoid 0 and 1 (Dynamo specialises those) and never coincide with a case's fixed
dimensions at the first call: Dynamo's duck sizing would otherwise give both the same symbol
and recompile as soon as they differ.

``DYNAMIC_OPS`` lists the ATen overloads proven here; ``docs/ops.md`` is generated from it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

import fxvino
from harness import assert_all_on_openvino

aten = torch.ops.aten

SIZES = (5, 8, 13, 21)


def _perm(n: int, k: int) -> torch.Tensor:
    """``n`` rows of ``k`` distinct column indices below ``k + 2``: scatter targets without duplicates."""
    return torch.rand(n, k + 2).argsort(1)[:, :k]


def _frozen(module: torch.nn.Module) -> torch.nn.Module:
    """A module with fixed random weights (seeded): its parameters keep static shapes under Dynamo."""
    torch.manual_seed(0)
    for p in module.parameters():
        torch.nn.init.normal_(p)
    return module.eval()


@dataclasses.dataclass(frozen=True)
class Case:
    """One op under dynamic shapes: ``make(n)`` builds the inputs for size ``n``."""

    op: str  # the ATen overload this case proves
    fn: Callable[..., Any]
    make: Callable[[int], tuple[Any, ...]]
    id: str
    xfail: str | None = None  # a known lowering bug, with the reason (owned by the family's file)
    lowered_as: str | None = None  # what must show on OpenVINO when ``op`` is decomposed (default: op)


CASES: list[Case] = [
    # elementwise (binary, unary, comparison, where, with a size used as a scalar)
    Case("aten.add.Tensor", lambda x, y: x + y, lambda n: (torch.randn(n, n + 1), torch.randn(n + 1)), "add_bcast"),
    Case("aten.mul.Tensor", lambda x: x * x.shape[1], lambda n: (torch.randn(n, n + 1),), "mul_symint"),
    Case("aten.sub.Tensor", lambda x, y: x - y, lambda n: (torch.randn(n, 1), torch.randn(n + 1)), "sub_outer"),
    Case("aten.div.Tensor", lambda x, y: x / y, lambda n: (torch.randn(n, 3), torch.rand(n, 3) + 0.5), "div"),
    Case("aten.exp.default", lambda x: torch.exp(x).tanh(), lambda n: (torch.randn(2, n),), "exp"),
    Case("aten.relu.default", F.relu, lambda n: (torch.randn(n, 3, n + 2),), "relu"),
    Case("aten.gelu.default", F.gelu, lambda n: (torch.randn(n, 4),), "gelu"),
    Case("aten.sigmoid.default", torch.sigmoid, lambda n: (torch.randn(n),), "sigmoid"),
    Case("aten.gt.Tensor", lambda x, y: x > y, lambda n: (torch.randn(n, 2), torch.randn(n, 2)), "gt"),
    Case(
        "aten.where.self",
        lambda c, x, y: torch.where(c, x, y),
        lambda n: (torch.rand(n, 3) > 0.5, torch.randn(n, 3), torch.randn(1, 3)),
        "where",
    ),
    Case("aten.clamp.default", lambda x: x.clamp(-0.5, 0.5), lambda n: (torch.randn(n, 2),), "clamp"),
    Case(
        "aten.add.Tensor",
        lambda x, y: x + y * 3,
        lambda n: (torch.randint(-50, 50, (n, 2)), torch.randint(-50, 50, (n, 2))),
        "add_int64",
    ),
    # reductions
    Case("aten.sum.dim_IntList", lambda x: x.sum(1), lambda n: (torch.randn(n, n + 1),), "sum_dim"),
    Case("aten.sum.dim_IntList", lambda x: x.sum(), lambda n: (torch.randn(n, 3),), "sum_all"),
    Case("aten.mean.dim", lambda x: x.mean((0, 2), keepdim=True), lambda n: (torch.randn(n, 3, n + 2),), "mean"),
    Case("aten.amax.default", lambda x: x.amax(-1), lambda n: (torch.randn(3, n),), "amax"),
    Case("aten.var.correction", lambda x: x.var(0), lambda n: (torch.randn(n, 4),), "var"),
    Case("aten.prod.dim_int", lambda x: x.prod(1), lambda n: (torch.rand(4, n) + 0.5,), "prod"),
    Case("aten.argmax.default", lambda x: x.argmax(1), lambda n: (torch.randn(3, n),), "argmax"),
    Case("aten.max.dim", lambda x: x.max(0), lambda n: (torch.randn(n, 4),), "max_dim"),
    Case("aten.cumsum.default", lambda x: x.cumsum(1), lambda n: (torch.randn(2, n),), "cumsum"),
    # view / reshape / permute / expand / cat / slice / select / index / gather / scatter
    Case("aten.view.default", lambda x: x.view(-1), lambda n: (torch.randn(n, 3),), "view_flat"),
    Case(
        "aten.view.default",
        lambda x: x.reshape(x.shape[0], -1, 2).sum(-1),
        lambda n: (torch.randn(n, 2 * (n + 1)),),
        "reshape_split",
    ),
    Case(
        "aten.clone.default",
        lambda x: x.transpose(0, 1).reshape(-1),
        lambda n: (torch.randn(n, n + 1),),
        "reshape_noncontig",
    ),
    Case("aten.permute.default", lambda x: x.permute(2, 0, 1) * 2, lambda n: (torch.randn(n, 3, n + 1),), "permute"),
    Case(
        "aten.expand.default",
        lambda x, y: x.expand(-1, y.shape[0]) + 0,
        lambda n: (torch.randn(n, 1), torch.randn(n + 2)),
        "expand",
    ),
    Case("aten.unsqueeze.default", lambda x: x.unsqueeze(1) * 2, lambda n: (torch.randn(n, 3),), "unsqueeze"),
    Case("aten.squeeze.dims", lambda x: x.squeeze(1) * 2, lambda n: (torch.randn(n, 1, 3),), "squeeze"),
    Case(
        "aten.cat.default",
        lambda x, y: torch.cat([x, y], 1),
        lambda n: (torch.randn(3, n), torch.randn(3, n + 2)),
        "cat",
    ),
    Case("aten.slice.Tensor", lambda x: x[:, 1:-1] * 2, lambda n: (torch.randn(3, n),), "slice"),
    Case("aten.slice.Tensor", lambda x: x[::2, 2:] * 2, lambda n: (torch.randn(n, n + 3),), "slice_step"),
    Case("aten.select.int", lambda x: x[:, -1] + x[1], lambda n: (torch.randn(n, n),), "select"),
    Case(
        "aten.index.Tensor",
        lambda x, i: x[i],
        lambda n: (torch.randn(n, 3), torch.randint(0, n, (n + 2,))),
        "index",
    ),
    Case(
        "aten.index.Tensor",
        lambda x, i, j: x[i, j],
        lambda n: (torch.randn(n, n + 1), torch.randint(0, n, (n + 2,)), torch.randint(0, n + 1, (n + 2,))),
        "index_2d",
    ),
    Case(
        "aten.index_select.default",
        lambda x, i: x.index_select(1, i),
        lambda n: (torch.randn(3, n), torch.randint(0, n, (n + 3,))),
        "index_select",
    ),
    Case(
        "aten.gather.default",
        lambda x, i: x.gather(1, i),
        lambda n: (torch.randn(n, n + 2), torch.randint(0, n + 2, (n, 3))),
        "gather",
    ),
    Case(
        "aten.scatter.src",
        lambda x, i, s: x.scatter(1, i, s),
        lambda n: (torch.randn(n, n + 2), _perm(n, n), torch.randn(n, n)),
        "scatter_src",
    ),
    Case(
        "aten.scatter_add.default",
        lambda x, i, s: x.scatter_add(0, i, s),
        lambda n: (torch.randn(n, 3), torch.randint(0, n, (n + 2, 3)), torch.randn(n + 2, 3)),
        "scatter_add",
    ),
    Case(
        "aten.embedding.default",
        F.embedding,
        lambda n: (torch.randint(0, 7, (2, n)), torch.randn(7, 4)),
        "embedding",
    ),
    # matmul
    Case("aten.mm.default", torch.mm, lambda n: (torch.randn(n, 3), torch.randn(3, n + 2)), "mm"),
    Case("aten.bmm.default", torch.bmm, lambda n: (torch.randn(2, n, 3), torch.randn(2, 3, n + 1)), "bmm"),
    Case(
        "aten.addmm.default",
        F.linear,
        lambda n: (torch.randn(n, 4), torch.randn(3, 4), torch.randn(3)),
        "linear",
    ),
    Case(
        "aten.addmm.default",
        _frozen(torch.nn.Linear(4, 3)),
        lambda n: (torch.randn(n, 4),),
        "linear_frozen",
    ),
    Case(
        "aten.bmm.default",
        torch.matmul,
        lambda n: (torch.randn(2, n, 3, 4), torch.randn(2, n, 4, n + 1)),
        "matmul_4d",
    ),
    # convolution: weights are module parameters, frozen into constants as in real models
    Case(
        "aten.convolution.default",
        _frozen(torch.nn.Conv2d(3, 4, 3, padding=1)),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "conv2d",
    ),
    Case(
        "aten.convolution.default",
        _frozen(torch.nn.Conv2d(3, 4, 3, stride=2, bias=False)),
        lambda n: (torch.randn(2, 3, n + 2, n + 3),),
        "conv2d_stride",
    ),
    Case(
        "aten.convolution.default",
        _frozen(torch.nn.Conv1d(3, 4, 3, padding=2, dilation=2)),
        lambda n: (torch.randn(2, 3, n),),
        "conv1d_dilated",
    ),
    Case(
        "aten.convolution.default",
        _frozen(torch.nn.ConvTranspose2d(3, 4, 3, stride=2)),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "conv_transpose2d",
    ),
    # pooling
    Case(
        "aten.max_pool2d_with_indices.default",
        lambda x: F.max_pool2d(x, 2),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "max_pool2d",
    ),
    Case(
        "aten.max_pool2d_with_indices.default",
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "max_pool2d_ceil",
    ),
    Case(
        "aten.avg_pool2d.default",
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "avg_pool2d",
    ),
    Case(
        "aten._adaptive_avg_pool2d.default",
        lambda x: F.adaptive_avg_pool2d(x, (2, 3)),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "adaptive_avg_pool2d",
    ),
    Case(
        "aten.mean.dim",
        lambda x: F.adaptive_avg_pool2d(x, 1),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "global_avg_pool",
    ),
    # softmax
    Case("aten._softmax.default", lambda x: x.softmax(-1), lambda n: (torch.randn(3, n),), "softmax"),
    Case("aten._softmax.default", lambda x: x.softmax(0), lambda n: (torch.randn(n, n + 1),), "softmax_dim0"),
    Case("aten._log_softmax.default", lambda x: x.log_softmax(1), lambda n: (torch.randn(2, n, 3),), "log_softmax"),
    # attention and resampling (F.interpolate arrives as fxvino::upsample, capture/resample.py)
    Case(
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        F.scaled_dot_product_attention,
        lambda n: (torch.randn(2, 3, n, 4), torch.randn(2, 3, n + 1, 4), torch.randn(2, 3, n + 1, 4)),
        "sdpa",
    ),
    Case(
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda n: (torch.randn(2, 3, n, 4), torch.randn(2, 3, n, 4), torch.randn(2, 3, n, 4)),
        "sdpa_causal",
    ),
    Case(
        "aten.upsample_nearest2d.vec",
        lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "upsample_nearest_scale",
        lowered_as="fxvino.upsample.default",
    ),
    Case(
        "aten.upsample_nearest2d.vec",
        lambda x: F.interpolate(x, size=(7, 9), mode="nearest"),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "upsample_nearest_size",
        lowered_as="fxvino.upsample.default",
    ),
    Case(
        "aten.upsample_bilinear2d.vec",
        lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "upsample_bilinear_scale",
        lowered_as="fxvino.upsample.default",
    ),
    Case(  # a dynamic floor(size * 1.5) is left to the decomposition's symbolic arithmetic
        "aten.upsample_bilinear2d.vec",
        lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True),
        lambda n: (torch.randn(2, 3, n, n + 1),),
        "upsample_bilinear_fractional_scale",
        lowered_as="aten.index.Tensor",
    ),
    # creation from symbolic sizes
    Case("aten.arange.start_step", lambda x: torch.arange(x.shape[0]) * x, lambda n: (torch.randn(n),), "arange"),
    Case(
        "aten.full.default",
        lambda x: x.new_zeros(x.shape[0] + 1, 2) + 1,
        lambda n: (torch.randn(n),),
        "new_zeros",
    ),
    # norms
    Case(
        "aten.native_layer_norm.default",
        lambda x, w, b: F.layer_norm(x, (4,), w, b),
        lambda n: (torch.randn(2, n, 4), torch.randn(4), torch.randn(4)),
        "layer_norm",
    ),
    Case(
        "aten.native_layer_norm.default",
        lambda x: F.layer_norm(x, x.shape[1:]),
        lambda n: (torch.randn(2, n, n + 1),),
        "layer_norm_dynamic_shape",
    ),
    Case(
        "aten.native_group_norm.default",
        lambda x, w, b: F.group_norm(x, 2, w, b),
        lambda n: (torch.randn(2, 4, n, n + 1), torch.randn(4), torch.randn(4)),
        "group_norm",
    ),
    Case(
        "aten._native_batch_norm_legit_no_training.default",
        lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False),
        lambda n: (torch.randn(n, 3, n + 1), torch.randn(3), torch.rand(3) + 0.5, torch.randn(3), torch.randn(3)),
        "batch_norm_eval",
    ),
]

# Shape arithmetic itself (SymInt and SymFloat nodes between ATen ops, ints passed as
# arguments): ``op`` names the node that must run on OpenVINO; not part of DYNAMIC_OPS.
SYMBOLIC_CASES: list[Case] = [
    Case("floordiv", lambda x: x[: x.shape[0] // 2 + 1] * 2, lambda n: (torch.randn(n, 3),), "sym_floordiv"),
    Case("truediv", lambda x: x * (x.shape[0] / x.shape[1]), lambda n: (torch.randn(n, n + 1),), "sym_truediv"),
    Case(
        "floor",
        lambda x: x * math.floor(x.shape[0] / 3) + math.ceil(x.shape[1] / 4),
        lambda n: (torch.randn(n, n + 1),),
        "sym_floor_ceil",
    ),
    Case(
        "sym_max",
        lambda x: x * max(x.shape[0], x.shape[1]) - min(x.shape[0], x.shape[1]),
        lambda n: (torch.randn(n, n + 1),),
        "sym_max_min",
    ),
    Case(
        "prims.convert_element_type.default", lambda x: x * x.shape[0] ** 0.5, lambda n: (torch.randn(n, 2),), "sym_pow"
    ),
    Case("aten.mul.Tensor", lambda x, k: x * k + k, lambda n: (torch.randn(n), n + 3), "int_argument"),
    Case(
        "sym_sum",
        lambda x, k: F.layer_norm(x[:, k:], x[:, k:].shape[-1:]),
        lambda n: (torch.randn(2, n + 3), n // 4 + 2),
        "sym_sum_slice_start",
    ),
    Case(
        "aten.slice.Tensor",
        lambda x, k: x[::k] * 2,
        lambda n: (torch.randn(n, 2), n // 4 + 2),
        "int_argument_slice_step",
    ),
    Case("aten.view.default", lambda x, k: x.view(k, -1) * 2, lambda n: (torch.randn(n * 4), n), "int_argument_view"),
]

# The ATen overloads shown to run on OpenVINO with symbolic sizes (known-broken cases excluded).
DYNAMIC_OPS: list[str] = sorted({c.op for c in CASES if c.xfail is None})


def _params() -> list:
    return [
        pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else [])
        for c in CASES + SYMBOLIC_CASES
    ]


def _sweep(case: Case, dynamic: bool) -> tuple[fxvino.Report, int]:
    """Run ``case`` at every size against eager; return the report and the Dynamo graph count."""
    compiled = torch.compile(case.fn, backend="fxvino", dynamic=dynamic)
    graphs_before = counters["stats"]["unique_graphs"]
    with fxvino.collect_reports() as report, torch.no_grad():
        for n in SIZES:
            torch.manual_seed(n)
            args = case.make(n)
            expected = case.fn(*args)
            where = f"{case.id} at {[tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args]}"
            torch.testing.assert_close(compiled(*args), expected, msg=lambda m, where=where: f"{where}: {m}")
    return report, counters["stats"]["unique_graphs"] - graphs_before


@pytest.mark.parametrize("case", _params())
def test_op_runs_dynamic_with_one_compile(case: Case) -> None:
    report, dynamo_graphs = _sweep(case, dynamic=True)
    assert_all_on_openvino(report, partitions=1)  # one OpenVINO compile for all sizes
    shown = case.lowered_as or case.op
    assert shown in report.ov_ops, f"{shown} not lowered; OpenVINO ran {dict(report.ov_ops)}"
    assert len(report.graphs) == 1, str(report)
    assert dynamo_graphs == 1, f"Dynamo compiled {dynamo_graphs} graphs for sizes {SIZES}"


def test_compile_counts_detect_static_recompiles() -> None:
    """The counters above can fail: with ``dynamic=False`` every size is a new graph and compile."""
    case = next(c for c in CASES if c.id == "softmax")
    report, dynamo_graphs = _sweep(case, dynamic=False)
    assert dynamo_graphs == len(SIZES)
    assert report.num_ov_partitions == len(report.graphs) == len(SIZES), str(report)


def test_dynamic_ops_constant_names_real_overloads() -> None:
    """docs/ops.md is generated from DYNAMIC_OPS: every entry must name an ATen overload."""
    assert DYNAMIC_OPS and len(DYNAMIC_OPS) == len(set(DYNAMIC_OPS))
    for name in DYNAMIC_OPS:
        ns, packet, overload = name.split(".")
        assert ns == "aten" and isinstance(getattr(getattr(aten, packet), overload), torch._ops.OpOverload), name
