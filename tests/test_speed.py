"""The fast path changes no number: static shapes (padded packed micro-batches), the target index, the ignore-aware
fused cross-entropy, compiled layers without recompiles, and CUDA-graph bookkeeping (checked on CPU with a replay
that re-runs the step); and the speed policy decides as documented."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from steadytune.data.collators import PadCollator
from steadytune.data.encode import IGNORE_INDEX
from steadytune.data.packing import PackedCollator, group_by_token_budget, static_shape_for, targets_of
from steadytune.hardware.attention_kernels import segment_sdpa_kernel
from steadytune.hardware.memory import activation_gib, choose_gradient_checkpointing, state_gib_of
from steadytune.hardware.speed import SpeedUnavailable, plan_speed
from steadytune.model.attention import register_varlen_attention
from steadytune.model.tiny import build_model, build_tokenizer
from steadytune.training import loss as loss_module
from steadytune.training.graphs import GraphedStep, GraphRunner
from steadytune.training.loss import ChunkedLinearCrossEntropy, causal_lm_loss_sum

TOKENIZER = build_tokenizer()


def make_examples(n, seed=0, low=4, high=60):
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        length = rng.randrange(low, high)
        ids = [rng.randrange(20, len(TOKENIZER)) for _ in range(length)]
        prompt = rng.randrange(1, length)
        examples.append({"input_ids": ids, "labels": [IGNORE_INDEX] * prompt + ids[prompt:]})
    return examples


def plan_groups(examples, budget, attention, row_len=64):
    lengths = [len(e["input_ids"]) for e in examples]
    groups = group_by_token_budget(lengths, range(len(examples)), budget)
    shape = static_shape_for(groups, lengths, [targets_of(e) for e in examples], attention, row_len)
    return groups, shape


def loss_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    s, n = causal_lm_loss_sum(model, batch)
    s.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return float(s), n, grads


# --- static shapes ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("attention", ["varlen", "sdpa"])
def test_every_static_micro_batch_has_one_shape_and_the_loss_of_its_examples_alone(attention):
    examples = make_examples(40, seed=1)
    groups, shape = plan_groups(examples, budget=160, attention=attention)
    collate = PackedCollator(TOKENIZER.pad_token_id, row_len=64, attention=attention, static=shape)
    batches = [collate([examples[i] for i in g]) for g in groups]
    assert all(b["static"] for b in batches)
    for key in ("input_ids", "position_ids", "target_index", "target_ids") + (("cu_seq_lens_q",) if attention == "varlen" else ()):
        assert len({tuple(b[key].shape) for b in batches}) == 1, key
    assert 0.5 < shape.fill <= 1.0 and "padding" in shape.describe()

    impl = register_varlen_attention(segment_sdpa_kernel) if attention == "varlen" else "sdpa"
    model = build_model("gemma3", TOKENIZER, attn_implementation=impl)  # a sliding window of 16: both layer types
    reference = build_model("gemma3", TOKENIZER)
    for g, batch in list(zip(groups, batches))[:3]:
        got, n, grads = loss_and_grads(model, batch)
        want, want_n, want_grads = 0.0, 0, None
        for i in g:
            s, k, gr = loss_and_grads(reference, PadCollator(TOKENIZER.pad_token_id)([examples[i]]))
            want, want_n = want + s, want_n + k
            want_grads = gr if want_grads is None else {key: want_grads[key] + gr[key] for key in gr}
        assert n == want_n == sum(targets_of(examples[i]) for i in g) + 0 * batch["n_targets"]
        assert got == pytest.approx(want, rel=1e-5)
        for key in want_grads:
            torch.testing.assert_close(grads[key], want_grads[key], atol=1e-5, rtol=1e-4)


def test_varlen_static_row_cuts_padding_into_pieces_and_ends_in_empty_sequences():
    examples = make_examples(12, seed=2, low=5, high=30)
    groups, shape = plan_groups(examples, budget=100, attention="varlen")
    collate = PackedCollator(TOKENIZER.pad_token_id, row_len=64, attention="varlen", static=shape)
    for g in groups:
        batch = collate([examples[i] for i in g])
        cu = batch["cu_seq_lens_q"].tolist()
        pieces = [b - a for a, b in zip(cu, cu[1:])]
        assert len(cu) == shape.sequences + 1 and cu[-1] == shape.tokens == batch["input_ids"].shape[1]
        assert pieces[:len(g)] == [len(examples[i]["input_ids"]) for i in g]
        assert all(0 <= p <= shape.max_len for p in pieces) and batch["max_length_q"] == shape.max_len
        # every sequence (examples and padding pieces) restarts its positions
        for a, b in zip(cu, cu[1:]):
            assert batch["position_ids"][0, a:b].tolist() == list(range(b - a))
        assert (batch["labels"][0, cu[len(g)]:] == IGNORE_INDEX).all()


def test_a_micro_batch_that_does_not_fit_comes_out_unpadded():
    examples = make_examples(10, seed=3)
    _, shape = plan_groups(examples[:5], budget=80, attention="varlen")
    collate = PackedCollator(TOKENIZER.pad_token_id, row_len=64, attention="varlen", static=shape)
    big = collate(examples)  # far more tokens than the planned shape
    assert big["static"] is False and big["input_ids"].shape[1] == sum(len(e["input_ids"]) for e in examples)


# --- the loss --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("softcap", [None, 5.0])
@pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused"])
def test_chunked_cross_entropy_ignores_padding_rows_and_keeps_weights(softcap, fused, compiled_graphs):
    """fused: each chunk's softmax arithmetic through torch.compile (loss.chunk_loss_and_grad), traced by Dynamo
    and run as traced: one graph for every chunk size."""
    torch.manual_seed(0)
    hidden = torch.randn(23, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 50, (23,))
    targets[[2, 7, 20, 21, 22]] = IGNORE_INDEX
    row_weights = torch.rand(23, dtype=torch.float64) + 0.5
    loss_module._compiled_chunk = None  # compiled afresh with the counting backend
    got = ChunkedLinearCrossEntropy.apply(hidden, weight, targets, row_weights, softcap, 4, fused)
    loss_module._compiled_chunk = None
    assert len(compiled_graphs) == (1 if fused else 0)  # chunks of 4 rows and a last one of 3: one graph
    got_grads = torch.autograd.grad(got, (hidden, weight))
    logits = hidden @ weight.T
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    per_token = F.cross_entropy(logits, targets, reduction="none", ignore_index=IGNORE_INDEX)
    want = (per_token * row_weights).sum()
    want_grads = torch.autograd.grad(want, (hidden, weight))
    assert float(got) == pytest.approx(float(want), rel=1e-10)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)
    assert float(got_grads[0][[2, 7, 20]].abs().max()) == 0.0  # ignored rows get no gradient


def test_fused_chunk_compiled_by_inductor_equals_the_eager_loss():
    """The real compiler (C++ on this CPU; Triton on a GPU) on the fused chunk arithmetic, bf16 logits as on a GPU."""
    torch.manual_seed(0)
    hidden = torch.randn(37, 32, requires_grad=True)
    weight = torch.randn(300, 32) / 4
    targets = torch.randint(0, 300, (37,))
    targets[[0, 36]] = IGNORE_INDEX
    torch._dynamo.reset()
    loss_module._compiled_chunk = None
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = ChunkedLinearCrossEntropy.apply(hidden, weight, targets, None, None, 16, True)
            got_grad, = torch.autograd.grad(got, hidden)
            want = ChunkedLinearCrossEntropy.apply(hidden, weight, targets, None, None, 16, False)
            want_grad, = torch.autograd.grad(want, hidden)
    finally:
        loss_module._compiled_chunk = None
        torch._dynamo.reset()
    assert float(got) == pytest.approx(float(want), rel=1e-5)
    torch.testing.assert_close(got_grad, want_grad, rtol=2e-2, atol=1e-3)  # bf16 gradients, summed in another order


# --- compiled layers: one compilation per layer type, not one per step ------------------------------------------

def test_train_with_compiled_layers_compiles_once_per_layer_type_and_keeps_the_loss(tmp_path, compiled_graphs):
    from test_train_packing import decisions, overrides, tiny_models as _unused, train  # noqa: F401

    from steadytune.model.tiny import save_tiny_model

    compiled = compiled_graphs
    model = save_tiny_model(tmp_path / "gemma3", "gemma3")  # sliding and full layers: two layer types
    args = dict(max_tokens_per_batch=480, cutoff_len=512, max_steps=4)  # one row a micro-batch: little padding
    fast = train(overrides(model, tmp_path / "compiled", packing="true", torch_compile="true", **args))
    chosen = decisions(tmp_path / "compiled")
    assert chosen["torch_compile"]["value"] is True and "one static shape" in chosen["torch_compile"]["reason"]
    assert chosen["static_shapes"]["value"] is True
    assert 1 <= len(compiled) <= 2 * 2, compiled  # at most one graph per layer type (and a graph break), ever
    plain = train(overrides(model, tmp_path / "padded", packing="false", **args))
    assert fast.losses == pytest.approx(plain.losses, rel=1e-4)


def test_tuned_compiled_layers_give_the_eager_values():
    """kernel_tuning compiles the layers with Inductor's coordinate-descent tuning as an option of that compilation
    (on a CPU there are no Triton kernels to tune: the option is accepted and the values are the eager ones)."""
    from steadytune.model.kernels import compile_layers, uncompile_layers
    from steadytune.model.tiny import build_model

    torch._dynamo.reset()
    model = build_model("qwen2", seed=0)
    ids = torch.randint(0, 500, (2, 13))
    with torch.no_grad():
        eager = model(input_ids=ids).logits
        compiled, why = compile_layers(model, static_shapes=True, tune=True)
        assert compiled and why.endswith("kernels tuned (coordinate descent)")
        torch.testing.assert_close(model(input_ids=ids).logits, eager, rtol=1e-4, atol=1e-5)
    uncompile_layers(model)
    torch._dynamo.reset()


def test_train_records_recompute_pointwise_with_compiled_layers(tmp_path, compiled_graphs):
    from test_train_packing import decisions, overrides, train

    from steadytune.model.tiny import save_tiny_model

    model = save_tiny_model(tmp_path / "qwen2", "qwen2")
    args = dict(max_tokens_per_batch=480, cutoff_len=512, max_steps=2, packing="true", torch_compile="true")
    lean = train(overrides(model, tmp_path / "lean", recompute_pointwise="true", **args))
    chosen = decisions(tmp_path / "lean")
    assert chosen["recompute_pointwise"]["value"] is True
    assert "recomputed in backward" in chosen["torch_compile"]["reason"]
    assert compiled_graphs  # the layers went through the wrapped backend
    plain = train(overrides(model, tmp_path / "plain", **args))
    assert decisions(tmp_path / "plain")["recompute_pointwise"]["value"] is False
    assert lean.losses == pytest.approx(plain.losses, rel=1e-5)


def test_train_groups_lora_layers_that_share_an_input_and_keeps_the_loss(tmp_path, compiled_graphs):
    from test_train_packing import decisions, overrides, train

    from steadytune.errors import UserError
    from steadytune.model.tiny import save_tiny_model

    model = save_tiny_model(tmp_path / "qwen2", "qwen2")
    args = dict(max_tokens_per_batch=480, cutoff_len=512, max_steps=3, packing="true", torch_compile="true")
    grouped = train(overrides(model, tmp_path / "grouped", shared_input_projections="true", **args))
    chosen = decisions(tmp_path / "grouped")["shared_input_projections"]
    assert chosen["value"] is True and "4 groups of LoRA layers" in chosen["reason"]
    plain = train(overrides(model, tmp_path / "plain", **args))
    assert decisions(tmp_path / "plain")["shared_input_projections"]["value"] is False   # CPU: not by default
    assert grouped.losses == pytest.approx(plain.losses, rel=1e-5)
    with pytest.raises(UserError, match="shared_input_projections: true, but lora_dropout 0.1"):
        train(overrides(model, tmp_path / "dropout", shared_input_projections="true", lora_dropout=0.1, **args))


def _kept_for_backward(model, ids) -> tuple[torch.Tensor, int]:
    """-> (the loss, bytes the forward keeps for backward beyond the weights), counted as autograd saves them."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict = {}

    def pack(tensor):
        where = tensor.untyped_storage().data_ptr()
        if where not in weights:
            kept[where] = max(kept.get(where, 0), tensor.untyped_storage().nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(input_ids=ids, labels=ids).loss
    return loss, sum(kept.values())


def test_recompute_pointwise_keeps_less_for_backward_and_gives_the_same_gradients():
    """recompute_pointwise lets the compiled layers' partition recompute elementwise results in backward instead of
    keeping them (the real Inductor on the CPU): fewer bytes kept, the same loss and gradients as without it."""
    from steadytune.model.kernels import compile_layers, uncompile_layers
    from steadytune.model.tiny import build_model

    ids = torch.randint(0, 500, (1, 64), generator=torch.Generator().manual_seed(0))
    results = {}
    for lean in (False, True):
        torch._dynamo.reset()
        model = build_model("qwen2", seed=0)
        compiled, why = compile_layers(model, static_shapes=True, recompute_pointwise=lean)
        assert compiled and ("recomputed in backward" in why) == lean
        model(input_ids=ids, labels=ids).loss.backward()  # compiles (the partition is decided here)
        model.zero_grad()
        loss, kept = _kept_for_backward(model, ids)
        loss.backward()
        results[lean] = (loss.item(), kept, [p.grad.clone() for p in model.parameters() if p.grad is not None])
        uncompile_layers(model)
    torch._dynamo.reset()
    (loss, kept, grads), (lean_loss, lean_kept, lean_grads) = results[False], results[True]
    assert lean_kept < 0.9 * kept, (lean_kept, kept)
    assert lean_loss == pytest.approx(loss, rel=1e-6)
    for got, want in zip(lean_grads, grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_recompute_pointwise_lowers_the_activation_estimate_that_turns_checkpointing_on():
    from types import SimpleNamespace

    from steadytune.hardware.memory import activation_gib, choose_gradient_checkpointing

    config = SimpleNamespace(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                             num_attention_heads=28, num_key_value_heads=4, vocab_size=152064)
    full, lean = activation_gib(config, 16384, compiled=True), activation_gib(config, 16384, True, True)
    assert 0.5 * full < lean < 0.6 * full
    assert activation_gib(config, 16384, compiled=False, recompute_pointwise=True) > full  # eager: nothing changes
    # a budget between the two estimates: checkpointing on without it, off with it
    budget = (5 + (full + lean) / 2) / 0.85
    on, why = choose_gradient_checkpointing(config, 16384, budget, compiled=True, state_gib=5)
    assert on and "recompute_pointwise: true would keep" in why  # the start-up print names the cheaper way out
    assert not choose_gradient_checkpointing(config, 16384, budget, compiled=True, state_gib=5,
                                             recompute_pointwise=True)[0]


def test_checkpointing_for_memory_names_the_smaller_micro_batch_that_would_fit_without_it():
    from types import SimpleNamespace

    from steadytune.hardware.memory import SPLIT_FLOOR_TOKENS, activation_gib, choose_gradient_checkpointing

    config = SimpleNamespace(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                             num_attention_heads=28, num_key_value_heads=4, vocab_size=152064)
    # A QLoRA 7B run (5.2 GiB of weights) on a 24 GiB card at 16,384-token micro-batches, elementwise results already
    # recomputed: checkpointing goes on, and the print says 4 micro-batches of 4,096 tokens would fit without it.
    on, why = choose_gradient_checkpointing(config, 16384, 24.0, compiled=True, state_gib=5.2,
                                            recompute_pointwise=True)
    assert on and "micro-batches of 4,096 tokens (4x gradient_accumulation_steps" in why
    assert activation_gib(config, 4096, True, True) <= 0.85 * 24.0 - 5.2 < activation_gib(config, 8192, True, True)
    # No hint where even the smallest micro-batch worth running does not fit, or where the micro-batch is that small
    tiny_room = 5.2 + activation_gib(config, SPLIT_FLOOR_TOKENS, True, True) * 0.5
    assert "micro-batches of" not in choose_gradient_checkpointing(config, 16384, tiny_room / 0.85, compiled=True,
                                                                   state_gib=5.2, recompute_pointwise=True)[1]
    assert "micro-batches of" not in choose_gradient_checkpointing(config, SPLIT_FLOOR_TOKENS, 6.0, compiled=True,
                                                                   state_gib=5.2, recompute_pointwise=True)[1]


# --- CUDA-graph bookkeeping, on CPU -----------------------------------------------------------------------------

class RerunStep(GraphedStep):
    """A "graph" whose replay runs the step again on the same static buffers: what a replay computes."""

    def _record(self):
        step = self

        class Replay:
            def replay(self):
                step.static_loss = step._forward_backward()

        return Replay()


def train_windows(model, runner, windows, params, optimizer, graphed: bool, sum_over_ranks=lambda x: x,
                  sync_gradients=lambda params: None) -> list[float]:
    """One optimizer step per window of micro-batches, each micro-batch replayed by `runner` where `graphed` and it
    takes it, else run eagerly; -> the per-token loss of each step. On several processes (test_distributed),
    `sum_over_ranks` sums a count or loss over the ranks and `sync_gradients` sums the gradients after the window."""
    losses = []
    for window in windows:
        tokens = sum_over_ranks(sum(b["n_targets"] for b in window))
        total = torch.zeros(())
        for b in window:
            if graphed and runner.takes(b):
                total += runner(b, 1.0 / tokens)
            else:
                s, _ = causal_lm_loss_sum(model, b)
                (s / tokens).backward()
                total += s.detach()
        sync_gradients(params)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # a graph's gradient buffers are dropped here, re-attached next
        losses.append(float(sum_over_ranks(total)) / tokens)
    return losses


def test_graphed_steps_accumulate_and_update_exactly_like_eager_steps():
    from peft import LoraConfig, get_peft_model

    examples = make_examples(48, seed=5)
    groups, shape = plan_groups(examples, budget=150, attention="varlen")
    collate = PackedCollator(TOKENIZER.pad_token_id, row_len=64, attention="varlen", static=shape)
    batches = [collate([examples[i] for i in g]) for g in groups]
    # The first micro-batch comes without a static shape: it runs eagerly, and the graph is recorded on the second,
    # in the middle of an accumulation window whose gradients must survive the recording.
    batches[0] = PackedCollator(TOKENIZER.pad_token_id, row_len=64, attention="varlen")([examples[i] for i in groups[0]])
    impl = register_varlen_attention(segment_sdpa_kernel)

    def run(graphed: bool):
        model = get_peft_model(build_model("qwen2", TOKENIZER, attn_implementation=impl),
                               LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False))
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-2)
        events = []
        runner = GraphRunner(lambda b: causal_lm_loss_sum(model, b), params, torch.device("cpu"), None,
                             report=events.append, step_class=RerunStep)
        windows = (batches[0:2], batches[2:4], batches[4:6])  # 2 micro-batches per optimizer step
        return train_windows(model, runner, windows, params, optimizer, graphed), events, runner

    eager, _, _ = run(False)
    graphed, events, runner = run(True)
    assert events and events[0]["captured"] is True and events[0]["loss_relative_difference"] < 1e-6
    assert runner.eager_batches == 1
    assert graphed == pytest.approx(eager, rel=1e-6)
    assert graphed[-1] != graphed[0]  # the updates happened


def test_a_step_that_cannot_be_recorded_falls_back_to_eager_and_says_why():
    class Broken(GraphedStep):
        def _record(self):
            raise RuntimeError("operation not permitted when stream is capturing")

    examples = make_examples(8, seed=6)
    _, shape = plan_groups(examples, budget=1000, attention="varlen")
    batch = PackedCollator(TOKENIZER.pad_token_id, row_len=64, attention="varlen", static=shape)(examples)
    model = build_model("qwen2", TOKENIZER, attn_implementation=register_varlen_attention(segment_sdpa_kernel))
    events = []
    runner = GraphRunner(lambda b: causal_lm_loss_sum(model, b), list(model.parameters()), torch.device("cpu"), None,
                         report=events.append, step_class=Broken)
    assert runner.takes(batch) is False and not runner.active
    assert events == [{"event": "cuda_graphs", "captured": False,
                       "reason": "RuntimeError: operation not permitted when stream is capturing; every micro-batch "
                                 "runs eagerly"}]
    assert all(p.grad is None for p in model.parameters())


# --- the policy ------------------------------------------------------------------------------------------------

def test_speed_policy_by_backend_and_run(monkeypatch):
    from steadytune.hardware import speed
    monkeypatch.setattr(speed, "triton_installed", lambda: True)  # as on a CUDA machine
    monkeypatch.setattr(speed, "liger_installed", lambda: True)
    long_cuda = plan_speed("cuda", "varlen", micro_batches=2000)
    assert (long_cuda.static_shapes, long_cuda.compile, long_cuda.cuda_graphs, long_cuda.liger) == (True, True, True, False)
    assert "fuse" in long_cuda.reasons["use_liger_kernel"]
    short_cuda = plan_speed("cuda", "varlen", micro_batches=247)  # the GPU-sized demo
    assert (short_cuda.static_shapes, short_cuda.compile, short_cuda.cuda_graphs) == (True, False, True)
    assert short_cuda.liger  # installed, layers not compiled
    assert "247 micro-batches" in short_cuda.reasons["torch_compile"]
    cpu = plan_speed("cpu", "sdpa", micro_batches=2000)
    assert not (cpu.static_shapes or cpu.compile or cpu.cuda_graphs or cpu.liger)
    rocm = plan_speed("rocm", "varlen", micro_batches=2000)
    assert not (rocm.compile or rocm.cuda_graphs) and "not been" in rocm.reasons["torch_compile"]
    ddp = plan_speed("cuda", "varlen", micro_batches=2000, world_size=2)
    assert not ddp.cuda_graphs and "2 processes" in ddp.reasons["cuda_graphs"]
    # LoRA under DDP sums its gradients after the backward: nothing collective inside the micro-batch
    flat = plan_speed("cuda", "varlen", micro_batches=2000, world_size=2, gradient_hooks=False)
    assert flat.cuda_graphs and "2 processes whose gradients are summed" in flat.reasons["cuda_graphs"]
    unpacked = plan_speed("cuda", None, micro_batches=2000)
    assert not (unpacked.static_shapes or unpacked.compile or unpacked.cuda_graphs)
    no_empty = plan_speed("cuda", "varlen", micro_batches=2000, static_ok=(False, "kernel X: NaN"))
    assert not no_empty.cuda_graphs and "kernel X" in no_empty.reasons["cuda_graphs"]
    wasteful = plan_speed("cuda", "varlen", micro_batches=2000, static_fill=0.5)
    assert not (wasteful.static_shapes or wasteful.cuda_graphs) and "waste 50%" in wasteful.reasons["cuda_graphs"]
    asked = plan_speed("cuda", "varlen", micro_batches=10, compile_asked=True, graphs_asked=False)
    assert asked.compile and not asked.cuda_graphs and asked.reasons["cuda_graphs"] == "cuda_graphs: false"
    with pytest.raises(SpeedUnavailable, match="cuda_graphs: true, but cpu has no CUDA graphs"):
        plan_speed("cpu", "sdpa", 10, graphs_asked=True)
    # tuning the compiled kernels: only where something is compiled, by default only on runs long enough to repay it
    assert not long_cuda.kernel_tuning and "too few" in long_cuda.reasons["kernel_tuning"]
    very_long = plan_speed("cuda", "varlen", micro_batches=speed.KERNEL_TUNING_MIN_MICRO_BATCHES)
    assert very_long.compile and very_long.kernel_tuning and "pays" in very_long.reasons["kernel_tuning"]
    assert not plan_speed("cuda", "varlen", 10 ** 6, tuning_asked=False).kernel_tuning
    assert plan_speed("cuda", "varlen", 10, compile_asked=True, tuning_asked=True).kernel_tuning
    assert "not timed" in plan_speed("rocm", "varlen", 10 ** 6, compile_asked=True).reasons["kernel_tuning"]
    assert cpu.reasons["kernel_tuning"] == "off: nothing compiled to tune"
    with pytest.raises(SpeedUnavailable, match="kernel_tuning: true, but the layers are not compiled"):
        plan_speed("cpu", "sdpa", 10, tuning_asked=True)
    # keeping less for backward: on by default where layers are compiled on CUDA (timed there), asked for elsewhere
    assert long_cuda.recompute_pointwise and "0.99x the speed" in long_cuda.reasons["recompute_pointwise"]
    short_cuda = plan_speed("cuda", "varlen", micro_batches=10)
    assert not short_cuda.recompute_pointwise and short_cuda.reasons["recompute_pointwise"] == "off: nothing compiled"
    on_rocm = plan_speed("rocm", "varlen", 10 ** 6, compile_asked=True)
    assert not on_rocm.recompute_pointwise and "not timed" in on_rocm.reasons["recompute_pointwise"]
    lean = plan_speed("cuda", "varlen", 10, compile_asked=True, recompute_asked=True)
    assert lean.recompute_pointwise and "about half" in lean.reasons["recompute_pointwise"]
    assert plan_speed("cuda", "varlen", 10, recompute_asked=False).reasons["recompute_pointwise"] == (
        "recompute_pointwise: false")
    assert cpu.reasons["recompute_pointwise"] == "off: nothing compiled"
    with pytest.raises(SpeedUnavailable, match="recompute_pointwise: true, but the layers are not compiled"):
        plan_speed("cpu", "sdpa", 10, recompute_asked=True)
    # LoRA layers that share an input, as a group: on by default where the layers are compiled on CUDA (timed there)
    assert long_cuda.shared_input and "1.02-1.04x" in long_cuda.reasons["shared_input_projections"]
    assert not short_cuda.shared_input and "compiled layers only" in short_cuda.reasons["shared_input_projections"]
    assert not on_rocm.shared_input and "not timed" in on_rocm.reasons["shared_input_projections"]
    assert plan_speed("cpu", "sdpa", 10, shared_asked=True).shared_input   # it runs eagerly too, where asked for
    assert not plan_speed("cuda", "varlen", 10 ** 6, shared_asked=False).shared_input
    monkeypatch.setattr(speed, "triton_installed", lambda: False)
    assert "needs triton" in plan_speed("cuda", "varlen", 2000).reasons["torch_compile"]
    with pytest.raises(SpeedUnavailable, match="fault"):
        plan_speed("cuda", "varlen", 10, graphs_asked=True, blockers={"faults": "fault_injection corrupts the loss"})


def test_checkpointing_policy_for_the_issue_shapes_on_an_h200():
    from steadytune.doctor.plan import _shape_config
    h200 = 139.7
    seven_b = _shape_config("qwen2.5-7b")
    assert 7.0e9 < state_gib_of(seven_b, 1.0) * 2**30 < 8.0e9
    # 7B at 16k-token micro-batches, compiled: fits without recomputation (the 45% MFU target needs that)
    assert choose_gradient_checkpointing(seven_b, 16384, h200, compiled=True)[0] is False
    assert choose_gradient_checkpointing(seven_b, 65536, h200, compiled=True)[0] is True
    # 0.5B compiled: recomputation is cheap and saves most of the memory
    use, why = choose_gradient_checkpointing(_shape_config("qwen2.5-0.5b"), 16384, h200, compiled=True)
    assert use and "small model" in why
    assert choose_gradient_checkpointing(_shape_config("qwen2.5-0.5b"), 16384, h200, compiled=False)[0] is False
    assert choose_gradient_checkpointing(_shape_config("qwen2.5-1.5b"), 16384, h200, compiled=True)[0] is False
    assert activation_gib(seven_b, 16384, compiled=True) < activation_gib(seven_b, 16384, compiled=False)


@pytest.mark.slow
@pytest.mark.skipif(not (__import__("shutil").which("g++") or __import__("shutil").which("c++")),
                    reason="Inductor's CPU backend needs a C++ compiler")
def test_inductor_compiled_layers_keep_the_packed_loss_on_cpu(tmp_path):
    """The real compiler (Inductor, C++ on CPU) on static packed shapes: the same per-step loss as the padded run.
    (~100 s of compiling on a busy 2-core machine.)"""
    from test_train_packing import overrides, train

    from steadytune.model.tiny import save_tiny_model

    torch._dynamo.reset()
    model = save_tiny_model(tmp_path / "qwen2", "qwen2")
    args = dict(max_tokens_per_batch=480, cutoff_len=512, max_steps=3)
    compiled = train(overrides(model, tmp_path / "compiled", packing="true", torch_compile="true", **args))
    padded = train(overrides(model, tmp_path / "padded", packing="false", **args))
    assert compiled.losses == pytest.approx(padded.losses, rel=1e-5)
    torch._dynamo.reset()


def test_train_fuses_the_lora_swiglu_over_the_fp8_base_and_keeps_the_loss(tmp_path, compiled_graphs):
    from test_train_packing import decisions, overrides, train

    from steadytune.errors import UserError
    from steadytune.model.tiny import save_tiny_model

    model = save_tiny_model(tmp_path / "qwen2", "qwen2")
    args = dict(max_tokens_per_batch=480, cutoff_len=512, max_steps=3, packing="true", torch_compile="true",
                fp8_base="true")
    fused = train(overrides(model, tmp_path / "fused", fused_swiglu="true", **args))
    chosen = decisions(tmp_path / "fused")["fused_swiglu"]
    assert chosen["value"] is True and "2 MLPs" in chosen["reason"]
    plain = train(overrides(model, tmp_path / "plain", **args))
    assert decisions(tmp_path / "plain")["fused_swiglu"]["value"] is False   # CPU: not by default
    assert fused.losses == pytest.approx(plain.losses, rel=2e-3)   # fp32 sums inside, one rounding apart
    with pytest.raises(UserError, match="fused_swiglu: true, but needs LoRA on gate_proj"):
        train(overrides(model, tmp_path / "bf16", fused_swiglu="true", **{**args, "fp8_base": "false"}))
    with pytest.raises(UserError, match="fused_swiglu: true, but lora_dropout 0.1"):
        train(overrides(model, tmp_path / "dropout", fused_swiglu="true", lora_dropout=0.1, **args))
