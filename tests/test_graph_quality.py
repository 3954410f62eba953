"""Graph quality: what OpenVINO executes for the reference models stays as lean as native's.

Latency follows the plugin's executable graph. These tests pin the properties that made the
difference: weights reach FullyConnected without a per-call Transpose, layer norm becomes MVN,
and no layer recomputes constants on every call.
"""

from __future__ import annotations

import collections

import pytest
import torch

from fxvino.devices import cpu_features
from fxvino.passes.freezing import FOLD_MAX_BYTES, fold_constants
from fxvino.tools import cli, zoo
from fxvino.tools import exec_graph as graph_quality
from harness import assert_all_on_openvino, cpu_computes_bf16


def _runtime(name: str, **kwargs):
    model, inputs = zoo.comparable(name, **kwargs)
    hist, work, report = graph_quality.fxvino_runtime(model, inputs)
    assert_all_on_openvino(report)
    return hist, work, report


def test_gpt2_layers_are_fully_connected_without_per_call_work():
    hist, work, _ = _runtime("gpt2", n_layer=2)
    assert work == []  # before linalg._matmul stored Conv1D weights transposed: 8 Transposes
    assert hist["FullyConnected"] == 4 * 2  # c_attn, c_proj, c_fc, mlp.c_proj per layer
    assert hist["MVN"] == 2 * 2 + 1  # ln_1, ln_2 per layer, ln_f
    assert hist["Transpose"] <= 2 * 2  # no weight transposes: only the attention heads' layout


def test_bert_layers_are_fully_connected_without_per_call_work():
    hist, work, report = _runtime("bert", num_hidden_layers=2)
    assert work == []
    assert hist["FullyConnected"] == 6 * 2  # q, k, v, attention output, intermediate, output
    assert hist["MVN"] == 1 + 2 * 2
    assert sum(g.folded_nodes for g in report.graphs) > 0  # position/token-type ids and the mask


def test_constant_work_finds_ops_on_constants():
    import numpy as np
    import openvino as ov
    import openvino.opset16 as ops

    p = ops.parameter([4], ov.Type.f32)
    c = ops.constant(np.arange(4, dtype=np.float32))
    idx = ops.constant(np.array([[1], [0], [3], [2]], dtype=np.int64))
    gathered = ops.gather_nd(c, idx)  # the CPU plugin keeps GatherND of constants as a layer
    model = ov.Model([ops.add(p, gathered)], [p])
    compiled = ov.Core().compile_model(model, "CPU")
    assert any(w.startswith("GatherND") for w in graph_quality.constant_work(compiled))


def test_fold_constants_evaluates_small_constant_ops_once():
    w = torch.arange(6.0).reshape(2, 3)

    def fn(x):
        mask = torch.arange(3) < 2  # constant: folded
        return x + torch.where(mask, w.t().sum(1), 0.0)  # t() stays a view, sum folds through it

    gm = torch.fx.experimental.proxy_tensor.make_fx(fn, tracing_mode="fake", _allow_non_fake_inputs=True)(
        torch.zeros(3)
    )
    x = torch.randn(3)
    expected = gm(x)
    calls_before = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    folded = fold_constants(gm)
    calls_after = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert folded >= 2
    assert len(calls_after) < calls_before
    assert [n.target for n in calls_after] == [torch.ops.aten.add.Tensor]
    torch.testing.assert_close(gm(x), expected)


def test_fold_constants_leaves_random_large_and_input_ops():
    big = torch.zeros(FOLD_MAX_BYTES // 4 + 1)

    def fn(x, b):
        return x + torch.rand(3).sum() + (b + 1).sum()

    gm = torch.fx.experimental.proxy_tensor.make_fx(fn, tracing_mode="fake")(torch.zeros(3), big)
    # Turn the second input into a constant, as freezing does.
    ph = list(gm.graph.find_nodes(op="placeholder"))[1]
    gm.register_buffer("big", big)
    with gm.graph.inserting_before(ph):
        attr = gm.graph.get_attr("big")
    attr.meta = dict(ph.meta)
    ph.replace_all_uses_with(attr)
    gm.graph.erase_node(ph)
    gm.recompile()
    assert fold_constants(gm) == 0  # rand is random, b + 1 is larger than the fold limit
    targets = collections.Counter(n.target for n in gm.graph.nodes if n.op == "call_function")
    assert targets[torch.ops.aten.rand.default] == 1
    assert targets[torch.ops.aten.add.Tensor] >= 2


def test_fold_constants_folds_an_uninitialised_tensor_to_zeros():
    """As ``empty`` lowers: folded as it came, an int64 buffer held allocator garbage (pointer-sized
    values past int32, which then made its readers run in PyTorch) that changed between compiles."""

    def fn(x):
        return x + torch.empty(64, dtype=torch.int64)[:3]

    gm = torch.fx.experimental.proxy_tensor.make_fx(fn, tracing_mode="fake")(torch.zeros(3, dtype=torch.int64))
    assert fold_constants(gm) >= 1
    buffers = [b for name, b in gm.named_buffers() if name.startswith("_fxvino_folded_")]
    assert buffers and all(torch.count_nonzero(b) == 0 for b in buffers)
    assert torch.equal(gm(torch.arange(3)), torch.arange(3))


@pytest.mark.numerics
def test_autocast_runs_bf16_on_openvino():
    # A narrow BERT layer: eager's bf16 products take minutes under make test-avx2's emulation.
    model, inputs = zoo.comparable(
        "bert", num_hidden_layers=1, hidden_size=256, num_attention_heads=4, intermediate_size=1024, seq=64
    )
    compiled = torch.compile(model, backend="fxvino")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(*inputs)
        from fxvino import collect_reports

        with collect_reports() as report:
            got = compiled(*inputs)
    assert_all_on_openvino(report)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got.float(), expected.float(), atol=0.1, rtol=0.05)
    part = report.graphs[0].ov_partitions[0].compiled
    precisions = {
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in part.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    }
    assert precisions == ({"bf16"} if cpu_computes_bf16() else {"f32"})


@pytest.mark.parametrize("extra", [["--no-native"], []])
def test_graph_command(capsys, extra):
    assert cli.main(["graph", "mlp", *extra]) == 0
    out = capsys.readouterr().out
    assert "FullyConnected" in out and "no layer computes from constants only" in out
    if not extra:
        assert "native" in out


def test_folded_constants_never_alias_outputs():
    """An output computed from constants only is still a fresh tensor on every call."""

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.arange(4.0))

        def forward(self, x):
            return x * 2, self.b + 1

    compiled = torch.compile(M().eval(), backend="fxvino")
    with torch.no_grad():
        _, first = compiled(torch.ones(4))
        first.add_(100)
        _, second = compiled(torch.ones(4))
    torch.testing.assert_close(second, torch.arange(4.0) + 1)


def test_autocast_conv_batchnorm_fuses_on_openvino():
    """Under autocast the convolution is bf16 and batch norm keeps f32 statistics: the lowering
    must still give OpenVINO one type (it used to fail and fall back to Inductor) and let the
    plugin fold the normalisation into the convolution."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)
    ).eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    x = torch.randn(1, 3, 16, 16)
    compiled = torch.compile(model, backend="fxvino")
    from fxvino import collect_reports

    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(x)
        with collect_reports() as report:
            got = compiled(x)
    assert_all_on_openvino(report)
    torch.testing.assert_close(got.float(), expected.float(), atol=0.1, rtol=0.05)
    part = report.graphs[0].ov_partitions[0].compiled
    assert graph_quality.constant_work(part) == []
    assert graph_quality.runtime_ops(part)["Convolution"] == 2


def test_autocast_batchnorm_is_about_as_close_to_float32_as_eager():
    """The statistics are folded into the convolution's f32 weight and bias, rounded once to
    bf16 (passes/batch_norm_folding.py), as Inductor and OpenVINO's own conversion do: rounding
    each statistic to bf16 first put four conv-BN-ReLU blocks 2.3x further from float32 than
    eager's autocast (one scale and shift rounded once: 1.4x; folded: 1.1x)."""
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        bn = torch.nn.BatchNorm2d(256)
        with torch.no_grad():
            bn.running_mean.normal_(0, 0.1), bn.running_var.uniform_(0.5, 2)
            bn.weight.uniform_(0.5, 1.5), bn.bias.normal_(0, 0.1)
        layers += [torch.nn.Conv2d(256, 256, 3, padding=1, bias=False), bn, torch.nn.ReLU()]
    model, x = torch.nn.Sequential(*layers).eval(), torch.randn(1, 256, 14, 14)
    from fxvino import collect_reports

    with torch.no_grad():
        exact = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16), collect_reports() as report:
            eager = model(x).float()
            got = torch.compile(model, backend="fxvino")(x).float()
    assert_all_on_openvino(report)
    scale = exact.abs().mean()
    eager_err, err = ((eager - exact).abs().mean() / scale).item(), ((got - exact).abs().mean() / scale).item()
    assert err < 1.3 * eager_err, (err, eager_err)
    assert "aten._native_batch_norm_legit_no_training.default" not in report.ov_ops, str(report)


def test_graph_command_shows_int8_execution(capsys):
    """``fxvino graph MODEL --int8``: the model quantized with PT2E, layers counted by runtime
    precision for fxvino and for native OpenVINO's conversion of the same graph."""
    pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
    assert cli.main(["graph", "mlp", "--int8"]) == 0
    out = capsys.readouterr().out
    fc = next(line for line in out.splitlines() if line.startswith("FullyConnected u8"))
    assert fc.split()[2:4] == ["3", "3"], out  # all three products in int8, for fxvino and native
    assert "FullyConnected f32" not in out


def _amx() -> bool:
    return "amx_tile" in cpu_features()  # as the plugin sees it, emulated or not


def test_linear_over_a_3d_input_is_one_product_without_reshapes():
    """``nn.Linear`` on [B, S, K] arrives as view -> mm -> view; the product is taken on the 3-D
    tensor, so the two views cancel and FullyConnected reads the input as it is."""
    lin = torch.nn.Linear(64, 32).eval()
    x = torch.randn(2, 5, 64)
    hist, work, report = graph_quality.fxvino_runtime(lin, (x,))
    assert_all_on_openvino(report)
    assert hist["FullyConnected"] == 1
    assert hist["Reshape"] == 0, dict(hist)
    compiled = torch.compile(lin, backend="fxvino")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), lin(x), rtol=1e-5, atol=1e-5)
        y = torch.randn(7, 64)  # a 2-D input keeps its plain product
        torch.testing.assert_close(compiled(y), lin(y), rtol=1e-5, atol=1e-5)


class _GatedMLP(torch.nn.Module):
    """Llama's MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden: int = 256, inner: int = 512) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(hidden, inner, bias=False)
        self.up = torch.nn.Linear(hidden, inner, bias=False)
        self.down = torch.nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


@pytest.mark.parametrize("rows", [3, 64])
def test_bf16_gated_mlp_runs_as_one_llm_kernel_for_few_rows(rows):
    """A bf16 model compiles with the plugin's bf16 inference precision (``plugin_config``). Over a
    few rows (a decode step) its gated MLP becomes one LLMMLP kernel where AMX has it: SiLU is a
    one-input Swish and the products stay 3-D, the shapes the plugin's MLPFusion matches. Over
    many rows (a prompt) the kernel is slower than three FullyConnected layers and holds a second
    copy of the weights, so SiLU takes an explicit beta and the products stay separate. The result
    is eager's to bf16 rounding either way; without AMX the MLP is always three FullyConnected."""
    import openvino as ov

    torch.manual_seed(0)
    mlp = _GatedMLP().eval().to(torch.bfloat16)
    x = torch.randn(1, rows, 256, dtype=torch.bfloat16)
    hist, _, report = graph_quality.fxvino_runtime(mlp, (x,))
    assert_all_on_openvino(report)
    compiled = report.graphs[0].ov_partitions[0].compiled
    # asked for bf16; a CPU without bf16 kernels reports (and computes) f32
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == (ov.Type.bf16 if cpu_computes_bf16() else ov.Type.f32)
    if _amx() and rows <= 32:
        assert hist["LLMMLP"] == 1 and hist["FullyConnected"] == 0, dict(hist)
    else:
        assert hist["LLMMLP"] == 0 and hist["FullyConnected"] == 3, dict(hist)
    with torch.no_grad():
        out, want = torch.compile(mlp, backend="fxvino")(x), mlp(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), want.float(), rtol=0.05, atol=0.05 * want.abs().max().item())


@pytest.mark.numerics
def test_autocast_without_a_gated_mlp_keeps_the_f32_precision():
    """Only a bf16 graph with a gated MLP asks for the bf16 inference precision: under autocast a
    linear/layer-norm model keeps f32, so the layer norm PyTorch computes in f32 stays f32."""
    import openvino as ov

    from fxvino.report import collect_reports

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)).eval()
    compiled_fn = torch.compile(model, backend="fxvino")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), collect_reports() as report:
        compiled_fn(torch.randn(4, 64))
    assert_all_on_openvino(report)
    compiled = report.graphs[0].ov_partitions[0].compiled
    assert compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32


@pytest.mark.parametrize("slow_plain_b", [True, False])
def test_products_over_computed_operands_read_k_contiguous_where_plain_is_slow(monkeypatch, slow_plain_b):
    """Without AVX-512 the CPU plugin's MatMul reads a run-time right operand stored [K, N] at
    about half the speed of one stored [N, K] (a weight gradient ``dy.t() @ x``, the input
    gradient ``dy @ w``). There the backward copies such operands transposed first, behind an
    Unsqueeze so the plugin does not fold the copy back; gradients stay eager's either way."""
    from fxvino import collect_reports
    from fxvino.lowering.ops import linalg

    monkeypatch.setattr(linalg, "_plain_b_is_slow", lambda: slow_plain_b)
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 512)
    twin = torch.nn.Linear(256, 512)
    twin.load_state_dict(lin.state_dict())
    x = torch.randn(512, 256, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    with collect_reports() as report:
        loss = torch.compile(lin, backend="fxvino", options={"aot_autograd": True})(x).square().mean()
        loss.backward()
    twin(x2).square().mean().backward()
    assert_all_on_openvino(report, partitions=None)
    for p, q in [*zip(lin.parameters(), twin.parameters(), strict=True), (x, x2)]:
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    backward = next(g for g in report.graphs if g.kind == "backward").ov_partitions[0].compiled
    kinds = collections.Counter(
        op.get_rt_info()["layerType"].astype(str) for op in backward.get_runtime_model().get_ordered_ops()
    )
    assert (kinds["Transpose"] >= 2) == slow_plain_b, dict(kinds)  # copies of w (for dx) and x (for dw)
