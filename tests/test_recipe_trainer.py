"""docs/ARCHITECTURE.md's recipe for a loss, done exactly as written: an aggregation defined outside the
package (here), registered with one call, checked against a hand computation and trained with."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from trainers import SpyRLConfig, SpyRLTrainer  # noqa: E402
from trainers.loss import AGGREGATIONS, Aggregation, LossConfig, clipped_policy_loss, register_aggregation  # noqa: E402

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
        SpyRLConfig(loss_type="sum")  # unknown until registered
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
        out = clipped_policy_loss(logps, logps, advantages, mask, LossConfig(level, "sum"))
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
