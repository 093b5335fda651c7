"""Trainer algorithm pieces: loss vs an independent computation and vs TRL 1.16, advantages,
RAE and the stage controller replaying scripted metric streams."""

from __future__ import annotations

import math
import types
from collections import defaultdict

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spy_env.stage import Stage  # noqa: E402
from trainers.algorithm import RAEBaselines, StageController, group_normalized_advantages  # noqa: E402
from trainers.config import SpyRLConfig  # noqa: E402
from trainers.loss import LossScale, Objective, clipped_policy_loss  # noqa: E402


def fixed_inputs(seed=0, B=4, T=6):
    g = torch.Generator().manual_seed(seed)
    logps = (-torch.rand(B, T, generator=g) * 3).requires_grad_(True)
    old = logps.detach() + torch.randn(B, T, generator=g) * 0.3
    ref = logps.detach() + torch.randn(B, T, generator=g) * 0.2
    adv = torch.tensor([1.5, -0.7, 0.3, -1.2])[:B]
    mask = torch.ones(B, T)
    mask[0, 4:] = 0
    mask[2, 2:] = 0
    return logps, old, ref, adv, mask


def reference_loss(logps, old, ref, adv, mask, level, loss_type, eps_lo, eps_hi, beta, L=None, G=1):
    """The formulas written out per sample and token with plain Python loops. ``action``: one term per
    sequence (its surrogate once, plus β times the sum of its tokens' k3), averaged over sequences."""
    B, T = logps.shape
    total = 0.0 * logps.sum()
    per_seq = []
    n_tokens = mask.sum()
    for i in range(B):
        n_i = mask[i].sum()
        if level == "token":
            w = [torch.exp(logps[i, t] - old[i, t]) for t in range(T)]
        else:
            s = sum((logps[i, t] - old[i, t]) * mask[i, t] for t in range(T))
            s = s / n_i if level == "sequence" else s
            w = [torch.exp(s)] * T
        seq = 0.0 * logps.sum()
        for t in range(T):
            if mask[i, t] == 0:
                continue
            surrogate = torch.min(w[t] * adv[i], torch.clamp(w[t], 1 - eps_lo, 1 + eps_hi) * adv[i])
            d = ref[i, t] - logps[i, t]
            k3 = (torch.exp(d) - d - 1) * w[t]
            seq = seq + beta * k3 + (-surrogate if level != "action" else 0.0)
        if level == "action":  # the decision counts once, whatever its length
            seq = seq - torch.min(w[0] * adv[i], torch.clamp(w[0], 1 - eps_lo, 1 + eps_hi) * adv[i])
        per_seq.append((seq, n_i))
    if level == "action":
        return sum(s for s, _ in per_seq) / B / (1 if loss_type == "dapo" else G)
    if loss_type == "grpo":
        total = sum(s / n for s, n in per_seq) / B / G
    elif loss_type == "bnpo":
        total = sum(s for s, _ in per_seq) / n_tokens / G
    elif loss_type == "dr_grpo":
        total = sum(s for s, _ in per_seq) / (B * L) / G
    elif loss_type == "dapo":
        total = sum(s for s, _ in per_seq) / n_tokens
    return total


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("level", ["token", "sequence", "action"])
def test_loss_and_gradients_match_an_independent_computation(loss_type, level):
    logps, old, ref, adv, mask = fixed_inputs()
    config = Objective(level, loss_type, epsilon_low=0.2, epsilon_high=0.28, beta=0.04, max_completion_length=8)
    out = clipped_policy_loss(logps, old, adv, mask, config, ref_logps=ref, scale=LossScale(accumulation_steps=2))
    (grad,) = torch.autograd.grad(out.loss, logps)
    logps2 = logps.detach().clone().requires_grad_(True)
    expected = reference_loss(logps2, old, ref, adv, mask, level, loss_type, 0.2, 0.28, 0.04, L=8, G=2)
    (grad2,) = torch.autograd.grad(expected, logps2)
    assert out.loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert torch.allclose(grad, grad2, atol=1e-6)
    assert torch.all(grad[mask == 0] == 0)


def trl_loss(logps, old, ref, adv, mask, *, loss_type, level, beta, eps_lo, eps_hi, L):
    """TRL 1.16's own GRPOTrainer._compute_loss on the same tensors (no model involved)."""
    trl = pytest.importorskip("trl")

    class SingleProcess:
        num_processes = 1
        sync_gradients = True

        def gather(self, x):
            return x

        gather_for_metrics = gather

        def reduce(self, x, reduction="sum"):
            return x

    t = object.__new__(trl.GRPOTrainer)
    t._get_per_token_logps_and_entropies = lambda *a, **k: (logps, torch.zeros_like(logps), None)
    t.aux_loss_enabled = False
    t.top_entropy_quantile = 1.0
    t.off_policy_mask_threshold = None
    t.importance_sampling_level = level
    t.beta, t.loss_type, t.epsilon_low, t.epsilon_high = beta, loss_type, eps_lo, eps_hi
    t.args = types.SimpleNamespace(use_bias_correction_kl=True, delta=None, steps_per_generation=1)
    t.use_vllm = False
    t.vllm_importance_sampling_correction = False
    t.model = types.SimpleNamespace(training=True)
    t.current_gradient_accumulation_steps = 1
    t.max_completion_length = L
    t.accelerator = SingleProcess()
    t._entropy_bonus_enabled = False
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    B, T = logps.shape
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "num_items_in_batch": mask.sum(),
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
    }
    return trl.GRPOTrainer._compute_loss(t, None, inputs)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_loss_matches_trl(loss_type, level):
    logps, old, ref, adv, mask = fixed_inputs(seed=3)
    config = Objective(level, loss_type, epsilon_low=0.2, epsilon_high=0.28, beta=0.001, max_completion_length=10)
    ours = clipped_policy_loss(logps, old, adv, mask, config, ref_logps=ref)
    (g_ours,) = torch.autograd.grad(ours.loss, logps)
    theirs = trl_loss(
        logps, old, ref, adv, mask, loss_type=loss_type, level=level, beta=0.001, eps_lo=0.2, eps_hi=0.28, L=10
    )
    (g_theirs,) = torch.autograd.grad(theirs, logps)
    assert ours.loss.item() == pytest.approx(theirs.item(), abs=1e-5)
    assert torch.allclose(g_ours, g_theirs, atol=1e-5)


def test_loss_sign_pushes_probability_toward_positive_advantages():
    logps, _, _, _, mask = fixed_inputs()
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    out = clipped_policy_loss(logps, logps.detach(), adv, mask, Objective(level="action"))
    (grad,) = torch.autograd.grad(out.loss, logps)
    # Gradient descent moves logp along -grad: up for A > 0, down for A < 0.
    assert (-grad[0][mask[0] > 0] > 0).all() and (-grad[1] < 0).all()


def test_group_normalized_advantages():
    adv = group_normalized_advantages([1, 0, 0, 0, 1, 1], [0, 0, 0, 1, 1, 1], eps=0.0)
    std = np.std([1, 0, 0])
    assert adv[:3] == pytest.approx([(1 - 1 / 3) / std, -1 / 3 / std, -1 / 3 / std])
    assert adv[3:] == pytest.approx([-2 / 3 / std, 1 / 3 / std, 1 / 3 / std])
    assert group_normalized_advantages([2, 2], ["a", "a"]).tolist() == [0.0, 0.0]
    assert group_normalized_advantages([1, 3], ["a", "a"], scale=False).tolist() == [-1.0, 1.0]


def test_rae_baselines_follow_the_ema():
    rae = RAEBaselines(alpha=0.9, init="zero")
    stream = [([1.0, 1.0, -2.0], ["civilian", "civilian", "spy"]), ([0.0, 2.0, -4.0], ["civilian", "civilian", "spy"])]
    a1 = rae.advantages(*stream[0])
    assert a1.tolist() == [1.0, 1.0, -2.0]  # init="zero": baselines start at 0
    assert rae.baselines == pytest.approx({"civilian": 0.1, "spy": -0.2})
    a2 = rae.advantages(*stream[1])
    assert a2.tolist() == pytest.approx([-0.1, 1.9, -3.8])
    assert rae.baselines == pytest.approx({"civilian": 0.9 * 0.1 + 0.1 * 1.0, "spy": 0.9 * -0.2 + 0.1 * -4.0})
    restored = RAEBaselines()
    restored.load_state_dict(rae.state_dict())
    assert restored == rae
    seeded = RAEBaselines(alpha=0.9)  # the default: seeded by the first batch, then the same EMA
    assert seeded.advantages(*stream[0]).tolist() == [0.0, 0.0, 0.0]
    assert seeded.baselines == pytest.approx({"civilian": 1.0, "spy": -2.0})
    with pytest.raises(ValueError):
        RAEBaselines(alpha=1.0)


def test_stage_controller_switches_with_hysteresis():
    c = StageController(ema=0.0, k_min=2)  # ema 0: the EMA is the last value, to check thresholds exactly
    stages = [c.update(acc, na) for acc, na in [
        (0.95, 0.05),  # 1 iteration in detect: K_min not reached
        (0.95, 0.05),  # -> perform
        (0.50, 0.10),  # in perform, 1 iteration: stays
        (0.70, 0.10),  # 1 - acc = 0.3 < 0.4, na < 0.5: stays
        (0.61, 0.49),  # still inside the band: stays
        (0.60, 0.10),  # 1 - acc = 0.4 -> detect
        (0.95, 0.20),  # detect, na too high: stays
        (0.95, 0.10),  # acc >= 0.9 and na <= 0.1 -> perform
        (0.95, 0.55),  # perform, 1 iteration: stays (K_min)
        (0.95, 0.55),  # na >= 0.5 -> detect
    ]]  # fmt: skip
    assert [s.schedule_name for s in stages] == [
        "detect",
        "perform",
        "perform",
        "perform",
        "perform",
        "detect",
        "detect",
        "perform",
        "perform",
        "detect",
    ]
    assert c.switches == [2, 6, 8, 10]
    restored = StageController()
    restored.load_state_dict(c.state_dict())
    assert restored.state_dict() == c.state_dict() and restored.stage is c.stage is Stage.VOTE


def test_stage_controller_ema_smooths():
    c = StageController(ema=0.9, k_min=1, start="perform")
    assert c.update(1.0, 0.0) is Stage.PERFORM  # the first value initialises the EMA
    # One bad iteration moves the EMA only to 0.9: no switch. It takes five in a row.
    stages = [c.update(0.0, 0.0) for _ in range(5)]
    assert stages == [Stage.PERFORM] * 4 + [Stage.VOTE]
    assert c.acc_ema == pytest.approx(0.9**5)


def test_fixed_schedules():
    c = StageController(schedule="alternate", k_min=3)
    assert [c.update(0.0, 1.0).schedule_name for _ in range(7)] == [
        "detect",
        "detect",
        "perform",
        "perform",
        "perform",
        "detect",
        "detect",
    ]
    only = StageController(schedule="perform")
    assert {only.update(1.0, 0.0) for _ in range(10)} == {Stage.PERFORM}


def test_k_perform_gives_the_performing_stage_its_own_length():
    # alternate: two performing iterations, one detection iteration, in turn, from the performing stage
    c = StageController(schedule="alternate", k_min=1, k_perform=2, start="perform")
    expected = ["perform", "detect", "perform", "perform", "detect", "perform", "perform"]
    assert [c.update(0.5, 0.0).schedule_name for _ in range(7)] == expected
    assert c.switches == [2, 3, 5, 6]
    # adaptive: k_perform is the performing stage's minimum; detection keeps k_min
    a = StageController(ema=0.0, k_min=1, k_perform=3, start="perform")
    assert [a.update(0.0, 0.0).schedule_name for _ in range(5)] == ["perform", "perform", "detect", "detect", "detect"]
    assert StageController.from_config(SpyRLConfig.from_dict({"k_perform": 4}).stages).k_perform == 4
    with pytest.raises(ValueError, match="k_perform"):
        SpyRLConfig.from_dict({"k_perform": 0})
    with pytest.raises(ValueError):
        StageController(schedule="random")


def test_config_validation_and_presets():
    for preset in ("cpu-smoke", "smollm2-cpu", "qwen3-4b-paper"):
        SpyRLConfig.preset(preset)
    paper = SpyRLConfig.preset("qwen3-4b-paper")
    assert (paper.update.learning_rate, paper.loss.beta, paper.loss.epsilon, paper.run.iterations) == (
        1e-6,
        0.001,
        0.2,
        100,
    )
    assert paper.rollout.documents_per_iteration * paper.rollout.games_per_document == 1024
    with pytest.raises(ValueError, match="loss_type"):
        SpyRLConfig.from_dict(dict(loss_type="ppo"))
    with pytest.raises(ValueError, match="mini_batch_size"):
        SpyRLConfig.from_dict(dict(mini_batch_size=10, micro_batch_size=4))
    with pytest.raises(ValueError, match="n_players"):
        SpyRLConfig.from_dict(dict(game={"n_players": 1}))
    cfg = SpyRLConfig.preset("cpu-smoke").with_overrides(["learning_rate=0.01", "game.rounds=2"])
    assert cfg.update.learning_rate == 0.01 and cfg.game.rules.rounds == 2 and cfg.game.rules.n_players == 3
    with pytest.raises(ValueError, match="unknown"):
        SpyRLConfig.from_dict({"lr": 1})
    assert math.isclose(SpyRLConfig.from_dict(dict(epsilon=0.2, epsilon_high=0.28)).loss.epsilon_upper, 0.28)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_selective_logps_equal_a_full_log_softmax(dtype):
    from trainers.logprobs import selective_logps

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 50, generator=g) * 4).to(dtype).requires_grad_(True)
    targets = torch.randint(0, 50, (3, 5), generator=g)
    logps, entropy, _ = selective_logps(logits, targets, temperature=0.7, with_entropy=True)
    full = torch.log_softmax(logits.float() / 0.7, dim=-1)
    expected = full.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert logps.dtype == torch.float32
    torch.testing.assert_close(logps, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, -(full.exp() * full).sum(-1), atol=1e-4, rtol=1e-4)
    (grad,) = torch.autograd.grad((logps * torch.arange(5.0)).sum(), logits)
    (expected_grad,) = torch.autograd.grad((expected * torch.arange(5.0)).sum(), logits)
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("name", "kind"), [("multi_gpu", "MULTI_GPU"), ("fsdp", "FSDP"), ("zero3", "DEEPSPEED")]
)  # fmt: skip
def test_shipped_accelerate_configs_load(name, kind):
    from pathlib import Path

    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(Path(__file__).parents[1] / "examples" / "accelerate" / f"{name}.yaml"))
    assert config.distributed_type == kind and config.num_processes >= 2 and config.mixed_precision == "bf16"
    if kind == "DEEPSPEED":  # the trainer marks accumulation boundaries and the engine clips
        assert config.deepspeed_config["zero_stage"] == 3
        assert config.deepspeed_config["gradient_accumulation_steps"] == 1
        assert config.deepspeed_config["gradient_clipping"] == SpyRLConfig().update.max_grad_norm


def test_the_reference_is_a_frozen_copy_of_the_initial_weights(tiny_model_dir):
    """``trainable_model`` takes the KL reference before anything trains: the same weights in their own
    storage, frozen, so an update of the trained model leaves it; none without KL or with LoRA (the
    base model with its adapters off is the reference)."""
    from agents.hf import load_pretrained
    from trainers.models import trainable_model
    from trainers.sections import ModelConfig

    model, _ = load_pretrained(str(tiny_model_dir), dtype="float32", device="cpu")
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    trained, reference = trainable_model(model, ModelConfig(train_top_layers=1), beta=0.04)
    assert not reference.training and not any(p.requires_grad for p in reference.parameters())
    assert any(p.requires_grad for p in trained.parameters())
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(1.0)
    for name, value in reference.state_dict().items():
        assert torch.equal(value, initial[name]), name
    assert trainable_model(model, ModelConfig(), beta=0.0)[1] is None
    assert trainable_model(model, ModelConfig(lora_r=2), beta=0.04)[1] is None
