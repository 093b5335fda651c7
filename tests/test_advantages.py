"""The advantage pipeline (trainers/advantages.py): what it keeps, and what several processes add up."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from spy_env.stage import Stage
from trainers.advantages import AdvantagePipeline
from trainers.algorithm import RAEBaselines, role_reward_sums
from trainers.config import SpyRLConfig


def performances(rewards: list[float], roles: list[str]) -> list[dict]:
    """Performing-stage rows that train, one per reward (no penalty)."""
    return [
        {"stage": "perform", "role": role, "trainable": True, "error": None, "prompt_token_ids": [1, 2],
         "completion_token_ids": [3, 4], "completion_mask": None, "reward_perform": r, "reward_penalty": 0.0,
         "reward": r, "game_id": i, "group_id": i, "seat": i, "round": 0}
        for i, (r, role) in enumerate(zip(rewards, roles, strict=True))
    ]  # fmt: skip


def test_two_processes_share_the_role_means_and_train_as_many_samples():
    """Each process's RAE baselines move with the role means of every process's performances (summed
    role sums), so both hold the baselines one process holding the whole batch would; and each trains
    no more samples than the process with the fewest."""
    config = SpyRLConfig()
    rewards, roles = [1.0, -2.0, 3.0, 0.5, -1.0], ["civilian", "spy", "civilian", "civilian", "spy"]
    rows = performances(rewards, roles)
    whole = AdvantagePipeline(config.advantages, config.game, RAEBaselines(alpha=0.5))
    one, _ = whole.samples_of(rows, Stage.PERFORM)
    halves = [(rows[:2], rewards[:2], roles[:2]), (rows[2:], rewards[2:], roles[2:])]
    summed = np.sum([role_reward_sums(r, k) for _, r, k in halves], axis=0).tolist()
    baselines, trained = [], []
    for part, _, _ in halves:
        pipeline = AdvantagePipeline(
            config.advantages, config.game, RAEBaselines(alpha=0.5), sum_over_processes=lambda _: summed,
            fewest_over_processes=lambda count: min(count, 2),
        )  # fmt: skip
        samples, metrics = pipeline.samples_of(part, Stage.PERFORM)
        baselines.append(pipeline.rae.baselines)
        trained.append(metrics["samples/count"])
        assert [s.advantage for s in samples] == pytest.approx([s.advantage for s in one if s.row in part][:2])
    assert baselines[0] == baselines[1] == pytest.approx(whole.rae.baselines)
    assert trained == [2, 2]


def test_a_stage_the_learner_does_not_play_trains_nothing():
    """A fixed agent's replies are never the learner's: its stage gives no sample and moves no baseline."""
    config = SpyRLConfig()
    pipeline = AdvantagePipeline(config.advantages, config.game, learner_stages=frozenset({Stage.VOTE}))
    samples, metrics = pipeline.samples_of(performances([1.0, -1.0], ["civilian", "spy"]), Stage.PERFORM)
    assert samples == [] and pipeline.rae.baselines == {}
    assert metrics == {f"samples/skipped_{k}": 0 for k in ("too_long_prompt", "empty", "forfeit", "no_choice")}
