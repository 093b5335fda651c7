"""docs/ARCHITECTURE.md's recipes for the trainer's strategies, done exactly as written: a loss
aggregation, a vote gradient and an advantage grouping, each defined outside the package (here),
registered with one call, checked against a hand computation and trained with."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spy_env.stage import Stage  # noqa: E402
from trainers import SpyRLConfig, SpyRLTrainer  # noqa: E402
from trainers.advantages import AdvantagePipeline  # noqa: E402
from trainers.choices import VOTE_GRADIENTS, Choice, VoteGradient, choice_loss, register_vote_gradient  # noqa: E402
from trainers.groups import (  # noqa: E402
    ADVANTAGE_GROUPINGS,
    AdvantageGrouping,
    advantage_groups,
    register_advantage_grouping,
)
from trainers.loss import AGGREGATIONS, Aggregation, Objective, clipped_policy_loss, register_aggregation  # noqa: E402

# --- the user's file: a loss aggregation --------------------------------------------------------


def token_sum(masked: torch.Tensor, mask: torch.Tensor, length: int) -> torch.Tensor:
    """Every scored token's loss counts once, however many the micro-batch holds."""
    return masked.sum()


def decision_sum(terms: torch.Tensor, decisions: torch.Tensor) -> torch.Tensor:
    return terms.sum()


@pytest.fixture
def registered():
    assert "sum" not in AGGREGATIONS
    with pytest.raises(ValueError, match="loss_type must be one of"):
        SpyRLConfig.from_dict(dict(loss_type="sum"))  # unknown until registered
    register_aggregation("sum", Aggregation(token_sum, decision_sum))
    yield
    del AGGREGATIONS["sum"]


def test_a_registered_aggregation_is_the_loss_at_every_level(registered):
    """With the behaviour log-probs equal to the current ones every ratio is 1, so the clipped surrogate
    is −A per scored token (token, sequence levels) or per decision (action level)."""
    logps = torch.log(torch.tensor([[0.5, 0.25, 0.5], [0.125, 0.5, 0.5]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    advantages = torch.tensor([1.0, -2.0])
    for level, expected in (("token", -(1 * 2 - 2 * 3)), ("sequence", -(1 * 2 - 2 * 3)), ("action", -(1 - 2))):
        out = clipped_policy_loss(logps, logps, advantages, mask, Objective(level, "sum"))
        assert math.isclose(out.loss.item(), expected), level
    with pytest.raises(ValueError, match="needs tokens and actions"):
        register_aggregation("half", Aggregation(token_sum))


def test_the_trainer_trains_with_a_registered_aggregation(registered, tmp_path):
    config = SpyRLConfig.preset(
        "cpu-smoke", output_dir=str(tmp_path), progress=False, keep_buffers=False, loss_type="sum", iterations=2,
        k_min=1, beta=0.0,
    )  # fmt: skip
    trainer = SpyRLTrainer(config)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    metrics = trainer.train()
    assert [m["stage"] for m in metrics] == ["detect", "perform"]  # both levels: votes (action), performances
    assert all(m["losses/optimizer_steps"] >= 1 and math.isfinite(m["losses/loss"]) for m in metrics)
    after = list(trainer.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


# --- the user's file: a vote gradient -------------------------------------------------------------


def contrast_weights(rows, groups, weight_detect, eps, stats):
    """+1 on the spy's choice, −1/(C − 1) on each other choice; no other token trains."""
    weights = []
    for row in rows:
        choice = Choice.of(row)
        if choice is None:
            weights.append(None)
            continue
        spy = np.array([seat == row["spy_seat"] for seat in choice.seats], dtype=float)
        weights.append(spy - (1 - spy) / (len(choice.seats) - 1))
    return weights, np.zeros(len(rows))


def contrast_loss(logq, old_logq, coefficients, epsilon_low, epsilon_high):
    return -(coefficients * logq).sum()


def test_a_registered_vote_gradient_scores_the_choices_and_trains(tmp_path):
    register_vote_gradient("contrast", VoteGradient(contrast_weights, contrast_loss))
    try:
        logq = torch.log(torch.tensor([0.25, 0.75]))
        expected = -(1.0 * math.log(0.25) - 1.0 * math.log(0.75))
        assert math.isclose(
            float(choice_loss(logq, logq, torch.tensor([1.0, -1.0]), "contrast")), expected, rel_tol=1e-6
        )
        with pytest.raises(ValueError, match="vote_gradient must be 'sampled' unless"):
            SpyRLConfig.from_dict(
                dict(vote_gradient="contrast", vote_mode="free")
            )  # it scores choices: a free vote has none
        config = SpyRLConfig.preset(
            "cpu-smoke", output_dir=str(tmp_path), progress=False, keep_buffers=False, vote_gradient="contrast",
            stage_schedule="detect", iterations=1, beta=0.0,
        )  # fmt: skip
        trainer = SpyRLTrainer(config)
        samples, _ = trainer.select_samples(trainer.rollouts(), Stage.VOTE)
        assert samples and all(s.advantage == 0 for s in samples)  # only the choices train
        with_choice = [s for s in samples if s.choice_advantages is not None]
        assert with_choice and all(max(s.choice_advantages) == 1.0 for s in with_choice)
        metrics = trainer.update(samples, Stage.VOTE)
        assert metrics["losses/optimizer_steps"] >= 1 and math.isfinite(metrics["losses/loss"])
    finally:
        del VOTE_GRADIENTS["contrast"]
    with pytest.raises(ValueError, match="both weights and loss"):
        register_vote_gradient("half", VoteGradient(contrast_weights))


# --- the user's file: an advantage grouping -------------------------------------------------------


def by_spy_seat(row):
    """Votes of every game whose spy sits in the same seat are normalised together."""
    return row["spy_seat"]


def test_a_registered_advantage_grouping_normalises_its_groups(tmp_path):
    register_advantage_grouping("spy-seat", AdvantageGrouping(by_spy_seat))
    try:
        rows = [{"spy_seat": s, "role": "civilian"} for s in (0, 0, 1, 1)]
        assert advantage_groups(rows, "spy-seat") == [0, 0, 1, 1]
        config = SpyRLConfig.from_dict(dict(detect_advantage_groups="spy-seat", vote_gradient="sampled"))
        pipeline = AdvantagePipeline(config.advantages, config.game)
        advantages, _ = pipeline.estimate(rows, [1.0, 0.0, 1.0, 1.0], advantage_groups(rows, "spy-seat"), Stage.VOTE)
        assert advantages.round(3).tolist() == [1.0, -1.0, 0.0, 0.0]  # (r − mean) / (std + ε) per group
        trained = SpyRLConfig.preset(
            "cpu-smoke", output_dir=str(tmp_path), progress=False, keep_buffers=False, stage_schedule="detect",
            iterations=1, detect_advantage_groups="spy-seat",
        )  # fmt: skip
        assert SpyRLTrainer(trained).train()[0]["losses/optimizer_steps"] >= 1
    finally:
        del ADVANTAGE_GROUPINGS["spy-seat"]
