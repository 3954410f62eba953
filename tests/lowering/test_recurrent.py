"""LSTM layers (``aten.mkldnn_rnn_layer``) as OpenVINO's LSTMSequence, against eager PyTorch."""

from __future__ import annotations

import pytest
import torch

from harness import assert_all_on_openvino, cpu_computes_bf16, run_fxvino

LAYER = "aten.mkldnn_rnn_layer.default"


@pytest.fixture(autouse=True)
def capture_rnns():
    """Dynamo runs nn.LSTM eagerly unless ``allow_rnn`` is set: then it decomposes per layer."""
    with torch._dynamo.config.patch(allow_rnn=True):
        yield


class Tagger(torch.nn.Module):
    """An LSTM between other layers: with the LSTM lowered, one OpenVINO partition."""

    def __init__(self, **lstm: object):
        super().__init__()
        self.embed = torch.nn.Linear(6, 8)
        self.lstm = torch.nn.LSTM(8, 12, **lstm)
        directions = 2 if lstm.get("bidirectional") else 1
        self.head = torch.nn.Linear(12 * directions, 5)

    def forward(self, x, state=None):
        y, (h, c) = self.lstm(torch.relu(self.embed(x)), state)
        return self.head(y).softmax(-1), h, c


@pytest.mark.parametrize(
    "lstm, layers",
    [
        ({}, 1),
        ({"num_layers": 3}, 3),
        ({"bidirectional": True}, 2),  # the backward direction runs reversed
        ({"batch_first": True, "num_layers": 2, "bidirectional": True}, 4),
        ({"bias": False}, 1),
    ],
)
def test_lstm_layers_run_on_openvino_as_eager_computes_them(lstm, layers):
    torch.manual_seed(0)
    model = Tagger(**lstm).eval()
    x = torch.randn(3, 7, 6)  # time-major [T, B, I], or [B, T, I] batch first
    out, report = run_fxvino(model, x)
    with torch.no_grad():
        expected = model(x)
    for got, want in zip(out, expected, strict=True):
        torch.testing.assert_close(got, want)
    assert_all_on_openvino(report)
    assert report.ov_ops[LAYER] == layers, str(report)


def test_given_initial_state_and_another_length_of_sequence():
    torch.manual_seed(1)
    model = Tagger(num_layers=2).eval()
    state = (torch.randn(2, 4, 12), torch.randn(2, 4, 12))
    for steps in (9, 2):  # a new length compiles again (or runs dynamic): both lowered
        x = torch.randn(steps, 4, 6)
        out, report = run_fxvino(model, x, state)
        with torch.no_grad():
            expected = model(x, state)
        for got, want in zip(out, expected, strict=True):
            torch.testing.assert_close(got, want)
        assert report.ov_ops[LAYER] == 2, str(report)


def test_symbolic_length_and_batch():
    """dynamic=True: the sequence lengths LSTMSequence needs are computed from the input's shape."""
    torch.manual_seed(4)
    model = Tagger(num_layers=2).eval()
    x = torch.randn(6, 3, 6)
    out, report = run_fxvino(model, x, dynamic=True)
    with torch.no_grad():
        expected = model(x)
    for got, want in zip(out, expected, strict=True):
        torch.testing.assert_close(got, want)
    assert_all_on_openvino(report)
    assert report.ov_ops[LAYER] == 2, str(report)


# Not marked numerics: as QEMU's Haswell (make test-avx2) this inference crashed the emulated
# process after other tests (alone it passed 6 of 6); a real AVX2-only CPU runs it in make test.
def test_bf16_lstm_follows_the_bf16_contract():
    """With bf16 kernels, the layer runs in bf16 as eager's does; without them (AVX2-only), the
    plugin computes it in f32 and rounds the outputs once (Guarantees), so it is compared with
    the same weights and inputs computed in f32."""
    torch.manual_seed(2)
    model = torch.nn.LSTM(6, 12).eval().to(torch.bfloat16)
    x = torch.randn(5, 2, 6, dtype=torch.bfloat16)
    out, report = run_fxvino(model, x)
    with torch.no_grad():
        if cpu_computes_bf16():
            expected = model(x)
        else:
            wide = torch.nn.LSTM(6, 12).eval()
            wide.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
            y, (h, c) = wide(x.float())
            expected = (y.to(torch.bfloat16), (h.to(torch.bfloat16), c.to(torch.bfloat16)))
    got, want = torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(expected)
    assert len(got) == len(want) == 3
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), w.float(), atol=0.02, rtol=0.02)
    assert report.ov_ops[LAYER] == 1, str(report)


def test_a_layer_the_lowering_does_not_cover_runs_in_pytorch():
    """The decomposition only makes inference layers; one written in training mode by hand is
    declined and runs in PyTorch, with the same results."""
    torch.manual_seed(3)
    w_ih, w_hh = torch.randn(16, 3), torch.randn(16, 4)
    b_ih, b_hh = torch.randn(16), torch.randn(16)
    hx, cx = torch.randn(1, 2, 4), torch.randn(1, 2, 4)

    def layer(x):
        args = (x, w_ih, w_hh, b_ih, b_hh, hx, cx, False, [], 2, 4, 1, True, False, False, True)
        return torch.ops.aten.mkldnn_rnn_layer(*args)[:3]

    x = torch.randn(5, 2, 3)
    out, report = run_fxvino(layer, x)
    for got, want in zip(out, layer(x), strict=True):
        torch.testing.assert_close(got, want)
    assert report.torch_ops[LAYER] == 1, str(report)
    assert LAYER not in report.ov_ops


GRU = "fxvino.gru.default"


@pytest.mark.parametrize(
    "gru",
    [
        {},
        {"num_layers": 3},
        {"bidirectional": True},
        {"batch_first": True, "num_layers": 2, "bidirectional": True},
        {"bias": False, "num_layers": 2},
    ],
)
def test_a_gru_runs_whole_on_openvino_as_eager_computes_it(gru):
    """nn.GRU stays one op through AOTAutograd (capture/recurrent.py): one GRUSequence per layer,
    not ~50 ops per time step."""
    torch.manual_seed(5)
    model = torch.nn.GRU(6, 10, **gru).eval()
    directions = 2 if model.bidirectional else 1
    x = torch.randn(4, 9, 6)  # [T, B, I] or [B, T, I]
    h0 = torch.randn(model.num_layers * directions, 4 if model.batch_first else 9, 10)
    out, report = run_fxvino(model, x, h0)
    with torch.no_grad():
        expected = model(x, h0)
    for got, want in zip(out, expected, strict=True):
        torch.testing.assert_close(got, want)
    assert_all_on_openvino(report)
    assert report.ov_ops[GRU] == 1 and sum(report.ov_ops.values()) <= 3, str(report)


def test_a_gru_that_needs_gradients_unrolls_and_trains_as_eager():
    """With gradients the GRU keeps PyTorch's decomposition (the whole op has no backward)."""
    torch.manual_seed(6)
    model = torch.nn.GRU(6, 10)
    x = torch.randn(5, 2, 6)
    compiled = torch.compile(model, backend="fxvino")
    out, _ = compiled(x)
    out.sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected, _ = model(x)
    expected.sum().backward()
    torch.testing.assert_close(out, expected)
    for g, p in zip(got, model.parameters(), strict=True):
        torch.testing.assert_close(g, p.grad)


def test_a_gru_in_training_mode_keeps_its_steps():
    """train() (dropout between layers) stays PyTorch's decomposition, even without gradients."""
    torch.manual_seed(7)
    model = torch.nn.GRU(6, 10, num_layers=2, dropout=0.0).train()
    x = torch.randn(4, 3, 6)
    out, report = run_fxvino(model, x)
    with torch.no_grad():
        expected = model(x)
    for got, want in zip(out, expected, strict=True):
        torch.testing.assert_close(got, want)
    assert GRU not in report.ov_ops and report.ov_ops, str(report)
