"""Issue 42: fine-tuning steps fully on OpenVINO for mixture-of-experts models (transformers'
``grouped_mm_fallback`` custom op, forward and backward) and Longformer's masked LM.

Each step is compared with eager PyTorch from the same weights: the loss and every parameter's
gradient (not only the weights after an AdamW step, whose first update is nearly ``lr * sign(grad)``
and would hide a wrong gradient's size).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import train_models as models
from train_loop import assert_same_training, assert_training_on_openvino, train_both

import fxvino

TRAINING = {"aot_autograd": True}
BACKWARD_OP = "transformers.grouped_mm_fallback_backward.default"


def one_step(model: torch.nn.Module, batch: torch.Tensor, loss_fn: Callable) -> fxvino.Report:
    """Forward and backward of ``model`` compiled and of an eager twin: equal losses and gradients."""
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxvino", options=TRAINING)
    with fxvino.collect_reports() as report:
        loss = loss_fn(compiled, batch)
        loss.backward()
    expected = loss_fn(twin, batch)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    for (name, ours), ref in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert (ours.grad is None) == (ref.grad is None), name
        if ref.grad is not None:
            torch.testing.assert_close(ours.grad, ref.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    return report


MOE = {
    "gpt-oss": models.gpt_oss,
    "mixtral": models.mixtral,
    # The model suite's other MoE decoders: a shared expert; grouped top-k routing after a dense layer.
    "qwen2-moe": lambda: models.suite_decoder("qwen2-moe"),
    "deepseek-v3": lambda: models.suite_decoder("deepseek-v3"),
}


@pytest.mark.parametrize("name", MOE)
def test_moe_training_step_matches_eager_on_openvino(name):
    model = MOE[name]()
    report = one_step(model, models.causal_lm_batches()[0], models.causal_lm_loss)
    assert_training_on_openvino(report)
    # Each grouped product of the forward (up/gate and down, per MoE layer) has its gradient op in
    # the backward, and both ran on OpenVINO.
    products = report.ov_ops["transformers.grouped_mm_fallback.default"]
    assert products >= 2 and report.ov_ops[BACKWARD_OP] == products, str(report)
    experts = [p.grad for n, p in model.named_parameters() if "experts" in n and "shared" not in n]
    # The expert weights really were trained by the step (every one of them reached by some token).
    assert experts and all(g.abs().amax(dim=tuple(range(1, g.dim()))).min() > 0 for g in experts)


@pytest.mark.numerics  # bf16 rounding: an AVX2-only CPU computes the graphs in f32
@pytest.mark.parametrize("name", ["gpt-oss", "mixtral"])
def test_bf16_moe_training_step_on_openvino(name):
    """With bf16 weights transformers calls PyTorch's own ``_grouped_mm`` instead of its fallback op,
    in the forward and (as the gradients' products) in the backward. bf16 arithmetic rounds where
    each implementation rounds, so both runs are judged against a float32 step from the same
    weights: each gradient's largest error (relative to its largest value) within 4x eager bf16's,
    or 3%, whichever is larger (measured on an AMX Xeon: at most 2.5x, 2.3%, attention's
    projections; a CPU without bf16 kernels computes in f32, closer still). An expert whose
    gradient went wrong would be off by its whole size."""
    reference = MOE[name]()
    model = copy.deepcopy(reference).to(torch.bfloat16)
    twin = copy.deepcopy(model)
    batch = models.causal_lm_batches()[0]
    compiled = torch.compile(model, backend="fxvino", options=TRAINING)
    with fxvino.collect_reports() as report:
        loss = models.causal_lm_loss(compiled, batch)
        loss.backward()
    assert_training_on_openvino(report)
    assert report.ov_ops["aten._grouped_mm.default"] >= 3 * 2 * model.config.num_hidden_layers, str(report)
    models.causal_lm_loss(twin, batch).backward()
    expected = models.causal_lm_loss(reference, batch)
    expected.backward()
    assert abs(loss.item() - expected.item()) <= 2e-2 * expected.item()
    for (pname, ours), eager, ref in zip(
        model.named_parameters(), twin.parameters(), reference.parameters(), strict=True
    ):
        scale = ref.grad.abs().max()
        error, eager_error = ((g.grad.float() - ref.grad).abs().max() / scale for g in (ours, eager))
        assert error <= max(4 * eager_error, 3e-2), f"{pname}: {error:.4f} vs eager bf16 {eager_error:.4f}"


def test_moe_steps_of_new_lengths_train_on_openvino():
    """A second sequence length recompiles with the token count dynamic; the expert gradients must
    stay right and on OpenVINO there too (the products' row count is then a run-time size)."""
    model = models.gpt_oss()
    batches = models.causal_lm_batches(1, 48) + models.causal_lm_batches(1, 40) + models.causal_lm_batches(1, 56)
    eager, ours = train_both(model, batches, models.causal_lm_loss)
    assert_training_on_openvino(ours.report)
    # A static pair, then one dynamic pair that also serves the third length.
    assert [g.kind for g in ours.report.graphs] == ["forward", "backward"] * 2, str(ours.report)
    assert ours.report.ov_ops[BACKWARD_OP] == 2 * 2 * model.config.num_hidden_layers, str(ours.report)
    assert_same_training(eager, ours)


@pytest.mark.parametrize("experts", [False, True], ids=["attention", "attention+experts"])
def test_moe_lora_finetune_matches_eager_on_openvino(experts):
    """A short LoRA fine-tune (peft) of the gpt-oss-like model: adapters on the attention's
    projections, and with ``experts`` also on the expert weights (peft's ``target_parameters``,
    how peft adapts transformers' MoE layers, whose experts are parameters, not ``nn.Linear``s).
    Without expert adapters the frozen experts' weight gradient is not needed at all, and the
    whole run compiles one forward and one backward.

    With them, peft registers a parametrization of the experts on every call (a new class each
    time), so Dynamo compiles the experts' frames again on every step and, past its
    ``recompile_limit`` (8 compiled versions of a frame), runs them eagerly, with any backend. Such a run is
    on OpenVINO only for its first steps: two here (a third passes the limit), and Dynamo is told
    to fail rather than fall back silently to eager frames, which no fxvino report would show."""
    from peft import LoraConfig, get_peft_model

    expert_params = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"] if experts else None
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], target_parameters=expert_params)
    model = get_peft_model(models.gpt_oss(), config)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert any("experts" in n for n in trainable) == experts
    before = {n: p.clone() for n, p in model.named_parameters()}
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        eager, ours = train_both(model, models.causal_lm_batches(2 if experts else 6), models.causal_lm_loss)
    report = ours.report
    if experts:  # peft's parameter wrappers break the graph around the experts; some backwards compute nothing
        assert {"forward", "backward"} <= {g.kind for g in report.graphs}, str(report)
        assert not report.fallbacks and not report.torch_ops, str(report)
        assert all(g.ov_partitions for g in report.graphs if g.num_nodes), str(report)
    else:
        assert_training_on_openvino(report)
        assert len(report.graphs) == 2, str(report)
    assert report.ov_ops[BACKWARD_OP] >= 2 * model.config.num_hidden_layers, str(report)
    assert_same_training(eager, ours)
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]) != (n in trainable), n


def test_longformer_training_step_matches_eager_on_openvino():
    """Longformer's masked LM trains fully on OpenVINO. The one ``aten::add_`` PyTorch runs in its
    backward is the autograd engine summing the tied word embedding's two gradients: the embedding
    lookup and the LM head's decoder sit in different graphs (a graph break at ``.item()`` of "any
    global attention?" lies between them), so each graph's backward returns its own gradient and
    the engine adds them before accumulating ``.grad``, as it adds eager's two. No graph sees both."""
    model = models.longformer_mlm()
    batch = models.longformer_batches()[0]
    report = one_step(model, batch, models.mlm_loss)
    assert_training_on_openvino(report)
    assert len({g.name.split("/")[0] for g in report.graphs}) == 4, str(report)
    assert report.ov_ops["aten.as_strided.default"] > 0, str(report)

    tied = model.longformer.embeddings.word_embeddings.weight
    assert model.lm_head.decoder.weight is tied
    model.zero_grad(set_to_none=True)
    compiled = torch.compile(model, backend="fxvino", options=TRAINING)
    loss = models.mlm_loss(compiled, batch)
    # Gradient edges from two compiled backwards into one tensor: the engine's sums.
    assert _summed_by_the_engine(loss) == [tied]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        loss.backward()
    adds = [e for e in prof.events() if e.name == "aten::add_" and not _under_aten_op(e)]
    found = [(e.input_shapes, e.cpu_parent.name) for e in adds]
    assert [e.input_shapes[:2] for e in adds] == [[list(tied.shape)] * 2], found
    assert "CompiledFunctionBackward" in adds[0].cpu_parent.name


def _summed_by_the_engine(loss: torch.Tensor) -> list[torch.Tensor]:
    """Leaf tensors that receive gradients from more than one compiled graph's backward."""
    seen, todo, sources = set(), [loss.grad_fn], {}
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        for next_fn, _ in fn.next_functions:
            if next_fn is not None:
                sources.setdefault(next_fn, []).append(fn.name())
                todo.append(next_fn)
    return [
        fn.variable
        for fn, names in sources.items()
        if hasattr(fn, "variable") and sum(n == "CompiledFunctionBackward" for n in names) > 1
    ]


def _under_aten_op(event) -> bool:
    """Whether a profiled op ran inside another ATen op (its own implementation's calls)."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False
