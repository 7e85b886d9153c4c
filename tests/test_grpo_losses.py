"""GRPO's loss family (stages/grpo_losses.py): each loss_type and importance_sampling_level against TRL 1.16's own
`_compute_loss` on the same log-probs (value and gradient), and against its paper's formula on cases small enough to
work out by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import math
import types
from collections import defaultdict

import pytest
import torch

from steadytune.config import ConfigError, load_config
from steadytune.stages.grpo_losses import (
    CLIPPED_SURROGATE,
    LOSS_TYPES,
    LossSettings,
    clip_metrics,
    per_token_loss,
    summed_loss,
    units_of,
)


def trl_compute_loss(logps, old, ref, advantages, mask, s: LossSettings):
    """TRL 1.16's GRPOTrainer._compute_loss itself, run on a stand-in trainer whose forward returns `logps`."""
    from trl.trainer.grpo_trainer import GRPOTrainer

    accelerator = types.SimpleNamespace(num_processes=1, reduce=lambda t, reduction="sum": t, gather=lambda t: t,
                                        gather_for_metrics=lambda t: t)
    args = types.SimpleNamespace(use_bias_correction_kl=s.bias_correction_kl, delta=s.delta, steps_per_generation=1,
                                 sapo_temperature_pos=s.sapo_temperature_pos,
                                 sapo_temperature_neg=s.sapo_temperature_neg)
    trainer = types.SimpleNamespace(
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level=s.importance_sampling_level,
        beta=s.beta, args=args, loss_type=s.loss_type, epsilon_low=s.epsilon_low, epsilon_high=s.epsilon_high,
        use_vllm=False, vllm_importance_sampling_correction=False, model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, accelerator=accelerator, max_completion_length=s.max_completion_length,
        _entropy_bonus_enabled=False, aux_loss_enabled=False, _metrics={"train": defaultdict(list)})
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logps, torch.zeros_like(logps), None)
    rows, width = logps.shape
    inputs = {"prompt_ids": torch.zeros(rows, 1, dtype=torch.long), "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
              "completion_ids": torch.zeros(rows, width, dtype=torch.long), "completion_mask": mask,
              "advantages": advantages, "old_per_token_logps": old, "ref_per_token_logps": ref,
              "num_items_in_batch": mask.sum()}
    return GRPOTrainer._compute_loss(trainer, None, inputs), trainer._metrics["train"]


def fixed_tensors(seed: int = 0):
    torch.manual_seed(seed)
    logps = -torch.rand(4, 5) * 2
    old = logps + torch.randn(4, 5) * 0.3   # another policy sampled them: ratios away from 1, so clipping bites
    ref = logps + torch.randn(4, 5) * 0.2
    advantages = torch.randn(4)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]])
    return logps, old, ref, advantages, mask


def ours(logps, old, ref, advantages, mask, s: LossSettings):
    """Our loss on the same values, flattened to the answer tokens as token_logprobs lays them out, divided by the
    step's units as the recipe divides it."""
    keep = mask.bool()
    owner = torch.arange(mask.shape[0])[:, None].expand_as(mask)[keep]
    n = mask.shape[0]
    loss, parts = per_token_loss(logps[keep], old[keep], advantages[owner], ref[keep] if s.beta else None, owner, n, s)
    total = summed_loss(loss, owner, n, s)
    parts["metrics"] = clip_metrics(parts["ratio"], advantages[owner], owner, n, s)
    return total / units_of(s.loss_type, n, int(keep.sum())), parts


CASES = [dict(loss_type=t, importance_sampling_level=level) for t in LOSS_TYPES for level in ("token", "sequence")]


@pytest.mark.parametrize("case", CASES, ids=[f"{c['loss_type']}-{c['importance_sampling_level']}" for c in CASES])
@pytest.mark.parametrize("beta,bias,delta", [(0.0, True, None), (0.04, True, None), (0.04, False, 1.5)])
def test_each_loss_and_its_gradient_equal_trls_own_on_the_same_log_probs(case, beta, bias, delta):
    epsilon_high = 3.0 if case["loss_type"] == "cispo" else 0.28   # cispo: the weight's own cap
    s = LossSettings(epsilon_low=0.2, epsilon_high=epsilon_high, delta=delta, beta=beta, bias_correction_kl=bias,
                     max_completion_length=8, **case)
    logps, old, ref, advantages, mask = fixed_tensors()
    theirs_in = logps.clone().requires_grad_()
    theirs, metrics = trl_compute_loss(theirs_in, old, ref, advantages[:, None], mask, s)
    theirs.backward()
    mine_in = logps.clone().requires_grad_()
    mine, parts = ours(mine_in, old, ref, advantages, mask, s)
    mine.backward()
    assert float(mine.detach()) == pytest.approx(float(theirs.detach()), rel=1e-6, abs=1e-7)
    assert torch.allclose(mine_in.grad, theirs_in.grad, rtol=1e-5, atol=1e-7)
    assert mine_in.grad.abs().sum() > 0
    if beta and case["importance_sampling_level"] == "token":
        assert float(parts["kl"].mean()) == pytest.approx(metrics["kl"][0], rel=1e-5)
    for name, values in parts["metrics"].items():   # TRL's clip metrics, per token or per sequence as TRL takes them
        assert float(values.mean()) == pytest.approx(metrics[name][0], abs=1e-6), name


def test_the_sequence_level_is_one_weight_per_completion_and_changes_the_loss():
    logps, old, ref, advantages, mask = fixed_tensors(3)
    token, _ = ours(logps, old, ref, advantages, mask, LossSettings(loss_type="grpo"))
    sequence, parts = ours(logps, old, ref, advantages, mask, LossSettings(loss_type="grpo",
                                                                          importance_sampling_level="sequence"))
    assert abs(float(token) - float(sequence)) > 1e-3
    keep = mask.bool()
    owner = torch.arange(4)[:, None].expand_as(mask)[keep]
    for j in range(4):
        weights = parts["ratio"][owner == j]
        expected = math.exp(float((logps[j][keep[j]] - old[j][keep[j]]).mean()))
        assert torch.allclose(weights, torch.full_like(weights, expected), rtol=1e-5)


# --- the papers' formulas, by hand ---------------------------------------------------------------------------------

def flat(*sequences):
    """Sequences of (logp, old_logp) pairs -> flat logps (with gradients), old logps, owner."""
    logps = torch.tensor([p for seq in sequences for p, _ in seq], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([o for seq in sequences for _, o in seq], dtype=torch.float64)
    owner = torch.tensor([j for j, seq in enumerate(sequences) for _ in seq])
    return logps, old, owner


def loss_of(logps, old, owner, advantages, s: LossSettings):
    a = torch.tensor(advantages, dtype=torch.float64)[owner]
    loss, _ = per_token_loss(logps, old, a, None, owner, int(owner.max()) + 1, s)
    n = int(owner.max()) + 1
    total = summed_loss(loss, owner, n, s) / units_of(s.loss_type, n, len(owner))
    total.backward()
    return float(total.detach()), logps.grad.tolist()


def test_gspo_by_hand():
    """GSPO (arXiv:2507.18071, eq. 5-7), epsilon 0.2, loss_type grpo. Completion 1: log-ratios 0.1 and 0.3, mean 0.2,
    s = e^0.2 = 1.221403 above 1.2 with A = +1: clipped, min(1.221403, 1.2) = 1.2, no gradient. Completion 2: one
    token, log-ratio -0.1, s = e^-0.1 = 0.904837 inside [0.8, 1.2], A = -1: min(-0.904837, -0.904837): loss +0.904837,
    d/dlogp = -A s / |y| = 0.904837. Mean over the 2 completions: (-1.2 + 0.904837) / 2 = -0.147582; gradients halved."""
    logps, old, owner = flat([(-1.0, -1.1), (-2.0, -2.3)], [(-0.5, -0.4)])
    value, grad = loss_of(logps, old, owner, [1.0, -1.0], LossSettings(loss_type="grpo",
                                                                       importance_sampling_level="sequence"))
    assert value == pytest.approx(-0.147582, abs=1e-6)
    assert grad == pytest.approx([0.0, 0.0, 0.452419], abs=1e-6)


def test_gspo_gradient_reaches_every_token_through_the_mean():
    """Unclipped (s = e^0.05 = 1.051271, A = +1): d(-s A)/dlogp_t = -s / |y| for each of the 2 tokens = -0.525636."""
    logps, old, owner = flat([(-1.0, -1.0), (-2.0, -2.1)])
    value, grad = loss_of(logps, old, owner, [1.0], LossSettings(loss_type="grpo", importance_sampling_level="sequence"))
    assert value == pytest.approx(-1.051271, abs=1e-6)
    assert grad == pytest.approx([-0.525636, -0.525636], abs=1e-6)


def test_cispo_by_hand():
    """CISPO (MiniMax-M1, arXiv:2506.13585, eq. 4): -sg(clip(r, max=eps_max)) A log pi, token mean. One completion of
    two tokens, A = 2, eps_max 1.5: r = e^0.5 = 1.648721 -> 1.5 and r = e^-1 = 0.367879 (kept). Loss per token
    -1.5 * 2 * (-1) = 3 and -0.367879 * 2 * (-2) = 1.471518, mean 2.235759; gradient -r' A / 2 = -1.5, -0.367879:
    the clipped token keeps its gradient (the clipped surrogate would give it none)."""
    logps, old, owner = flat([(-1.0, -1.5), (-2.0, -1.0)])
    value, grad = loss_of(logps, old, owner, [2.0], LossSettings(loss_type="cispo", epsilon_high=1.5))
    assert value == pytest.approx(2.235759, abs=1e-6)
    assert grad == pytest.approx([-1.5, -0.367879], abs=1e-6)
    _, surrogate = loss_of(*flat([(-1.0, -1.5), (-2.0, -1.0)]), [2.0], LossSettings(loss_type="dapo", epsilon_high=0.5))
    assert surrogate[0] == 0.0


def test_sapo_by_hand():
    """SAPO (arXiv:2511.20347): -(4 / tau) sigmoid(tau (r - 1)) A. Completion 1: r = e^0.2 = 1.221403, A = +1, tau 1:
    sigmoid(0.221403) = 0.555126, loss -2.220503. Completion 2: r = e^-0.2 = 0.818731, A = -1, tau 1.05:
    sigmoid(-0.190333) = 0.452560, loss +4 / 1.05 * 0.452560 = 1.724038. Mean -0.248232."""
    logps, old, owner = flat([(-1.0, -1.2)], [(-1.0, -0.8)])
    value, _ = loss_of(logps, old, owner, [1.0, -1.0], LossSettings(loss_type="sapo"))
    assert value == pytest.approx(-0.248232, abs=1e-6)


def test_luspo_is_gspo_scaled_by_length():
    """LUSPO (arXiv:2602.05261): each completion's GSPO loss times its length, mean over completions. The GSPO case
    above: (-1.2 x 2 + 0.904837 x 1) / 2 = -0.747582."""
    logps, old, owner = flat([(-1.0, -1.1), (-2.0, -2.3)], [(-0.5, -0.4)])
    value, _ = loss_of(logps, old, owner, [1.0, -1.0], LossSettings(loss_type="luspo",
                                                                    importance_sampling_level="sequence"))
    assert value == pytest.approx(-0.747582, abs=1e-6)


def test_two_sided_clipping_caps_the_negative_advantage_ratio():
    """delta (INTELLECT-2): r = e^1 = 2.718282 with A = -1 would add 2.718282 to the loss; capped at delta 2."""
    logps, old, owner = flat([(-1.0, -2.0)])
    value, _ = loss_of(logps, old, owner, [-1.0], LossSettings(loss_type="dapo", epsilon_high=0.28))
    assert value == pytest.approx(math.e, abs=1e-6)
    logps, old, owner = flat([(-1.0, -2.0)])
    value, grad = loss_of(logps, old, owner, [-1.0], LossSettings(loss_type="dapo", epsilon_high=0.28, delta=2.0))
    assert value == pytest.approx(2.0) and grad == [0.0]


def test_the_written_out_definitions_of_the_normalisations():
    """DeepSeekMath's per-sequence token mean (grpo), Dr. GRPO's constant normaliser, DAPO's token-level mean, on the
    clipped surrogate with DAPO's clip-higher and the k3 KL (TRL's use_bias_correction_kl)."""
    logps, old, ref, advantages, mask = fixed_tensors(1)
    eps, eps_high, beta, max_len = 0.2, 0.28, 0.1, 8

    def token(i, t):
        ratio = math.exp(logps[i, t] - old[i, t])
        a = float(advantages[i])
        surrogate = -min(ratio * a, min(max(ratio, 1 - eps), 1 + eps_high) * a)
        d = float(ref[i, t] - logps[i, t])
        return surrogate + beta * (math.exp(d) - d - 1) * ratio

    rows = [[token(i, t) for t in range(5) if mask[i, t]] for i in range(4)]
    expected = {"grpo": sum(sum(r) / len(r) for r in rows) / 4,
                "dr_grpo": sum(sum(r) for r in rows) / (4 * max_len),
                "dapo": sum(sum(r) for r in rows) / sum(len(r) for r in rows),
                "luspo": sum(sum(r) for r in rows) / 4}
    for loss_type, value in expected.items():
        s = LossSettings(loss_type=loss_type, epsilon_low=eps, epsilon_high=eps_high, beta=beta,
                         max_completion_length=max_len)
        got, _ = ours(logps, old, ref, advantages, mask, s)
        assert float(got) == pytest.approx(value, rel=1e-5), loss_type
    assert set(expected) <= set(CLIPPED_SURROGATE)


def test_loss_keys_in_the_config():
    cfg = load_config(None, ["stage=grpo", "reward_funcs=format", "loss_type=cispo"])
    assert cfg.method.epsilon_high == 5.0 and "cispo" in cfg.decisions["epsilon_high"]["reason"]
    assert LossSettings.of(cfg.method).epsilon_high == 5.0
    cfg = load_config(None, ["stage=grpo", "reward_funcs=format", "loss_type=dapo", "importance_sampling_level=sequence"])
    assert "loss_type grpo" in cfg.decisions["importance_sampling_level"]["reason"]
    assert LossSettings.of(load_config(None, ["stage=grpo", "reward_funcs=format", "epsilon=0.1"]).method).epsilon_high \
        == 0.1
    with pytest.raises(ConfigError, match="delta: 1.1 caps the importance ratio"):
        load_config(None, ["stage=grpo", "reward_funcs=format", "delta=1.1", "epsilon_high=0.28"])
    with pytest.raises(ConfigError, match="importance_sampling_level"):
        load_config(None, ["stage=grpo", "reward_funcs=format", "importance_sampling_level=word"])


def test_on_policy_the_family_gives_the_same_gradient_and_off_policy_it_does_not():
    """With the sampling weights' log-probs equal to the policy's (a synchronous step: ratio 1), cispo's and sapo's
    gradients are dapo's and grpo's (their normalisations), and GSPO's sequence weight gives grpo's: the family differs
    only on off-policy tokens (asynchronous roll-outs), which is what docs/training.md says to pick by."""
    torch.manual_seed(5)
    logps = -torch.rand(10, dtype=torch.float64) * 2
    owner = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    advantages = torch.randn(4, dtype=torch.float64)[owner]

    def gradient(s: LossSettings, shift: float) -> torch.Tensor:
        x = logps.clone().requires_grad_()
        old = x.detach() - shift * torch.linspace(-1, 1, 10, dtype=torch.float64)
        loss, _ = per_token_loss(x, old, advantages, None, owner, 4, s)
        (summed_loss(loss, owner, 4, s) / units_of(s.loss_type, 4, 10)).backward()
        return x.grad

    pairs = [(LossSettings(loss_type="dapo"), LossSettings(loss_type="cispo", epsilon_high=5.0)),
             (LossSettings(loss_type="grpo"), LossSettings(loss_type="sapo")),
             (LossSettings(loss_type="grpo"), LossSettings(loss_type="grpo", importance_sampling_level="sequence"))]
    for a, b in pairs:
        assert torch.allclose(gradient(a, 0.0), gradient(b, 0.0)), (a.loss_type, b.loss_type)
        assert not torch.allclose(gradient(a, 0.5), gradient(b, 0.5)), (a.loss_type, b.loss_type)
