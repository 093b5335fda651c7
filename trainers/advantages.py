"""The advantage pipeline: an iteration's buffer in, the samples of the stage that trains out.

:class:`AdvantagePipeline` is built once by the trainer with its settings, the RAE baselines and
what several processes add up. :meth:`AdvantagePipeline.samples_of` reads top to bottom, each
module's pieces called in one stretch:

1. **Rows and rewards** (:mod:`trainers.samples`): the stage's ``N`` rows that enter its advantages,
   their rewards ``r`` (N,) and their penalties ``p`` (N,).
2. **Groups** (:mod:`trainers.groups`): each vote's Eq. 5 group; each performance's replay group
   when ``perform_group_norm`` scales by it.
3. **Advantages** (:meth:`AdvantagePipeline.estimate`, on :mod:`trainers.algorithm`'s pieces): a
   ``batch`` group spread over processes takes its global ``(mean, std)`` from every process's summed
   moments, RAE its global role means; then Eq. 5 for votes or RAE for performances, and each
   offender's penalty added to its own advantage alone.
4. **Samples**: the rows that train, each paired with its advantage in a frozen
   :class:`~trainers.samples.Sample`, cut to the fewest any process holds, and their ``samples/*``
   and ``advantages/*`` metrics (:mod:`trainers.metrics`).

The one state that changes is the RAE baselines, which each performing batch updates.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spy_env.config import GameConfig
from spy_env.stage import Stage
from trainers.algorithm import (
    RAEBaselines,
    add_penalties,
    batch_group_stats,
    group_normalized_advantages,
    group_scaled,
    role_means,
    role_reward_sums,
    vote_moments,
)
from trainers.choices import vote_gradient_of
from trainers.groups import advantage_groups, grouping_of
from trainers.metrics import sample_stats
from trainers.samples import Sample, stage_rewards, stage_rows
from trainers.sections import AdvantageConfig

__all__ = ["AdvantagePipeline"]


@dataclass
class AdvantagePipeline:
    """Which rows of a stage train, and their advantages (see the module docstring).

    ``config``: ``SpyRLConfig.advantages``; ``game``: the game, whose weights the rewards take; ``rae``:
    the RAE baselines (the trainer checkpoints them); ``learner_stages``: the stages whose seats the
    learner's own replies fill (a fixed agent's tokens never train); ``max_prompt_tokens``: longer prompts
    are skipped. On several processes ``sum_over_processes`` adds up a list of floats over them and
    ``fewest_over_processes`` gives the smallest of a count; both None on one process.
    """

    config: AdvantageConfig = field(default_factory=AdvantageConfig)
    game: GameConfig = field(default_factory=GameConfig)
    rae: RAEBaselines = field(default_factory=RAEBaselines)
    learner_stages: frozenset[Stage] = frozenset((Stage.PERFORM, Stage.VOTE))
    max_prompt_tokens: int = 12288
    sum_over_processes: Callable[[list[float]], list[float]] | None = None
    fewest_over_processes: Callable[[int], int] | None = None

    def samples_of(self, buffer: Iterable[Mapping[str, Any]], stage: Stage) -> tuple[list[Sample], dict[str, float]]:
        """The rows of ``stage`` that train, each paired with its advantages in a :class:`~trainers.samples.Sample`
        (the buffer's rows are not written), and their metrics."""
        played = buffer if stage in self.learner_stages else []  # a fixed agent's replies are not the learner's
        rows, skipped = stage_rows(played, stage, self.config, max_prompt_tokens=self.max_prompt_tokens)
        rewards, penalties = stage_rewards(rows, stage, self.config, self.game, buffer)
        grouping = self.config.detect_advantage_groups if stage is Stage.VOTE else "prompt"
        scaled = stage is Stage.VOTE or self.config.perform_group_norm
        groups = advantage_groups(rows, grouping) if scaled else None
        whole_batch = grouping_of(grouping).whole_batch
        advantages, weights = self.estimate(rows, rewards, groups, stage, whole_batch=whole_batch)
        advantages = add_penalties(advantages, penalties)  # the offender's alone (0 with penalty_advantage=shared)
        samples = [
            Sample(row, float(advantage), None if w is None else tuple(float(x) for x in w))
            for row, advantage, w in zip(rows, advantages, weights, strict=True)
            if row["trainable"]  # an untrained spy vote only joined its group
        ]
        if self.fewest_over_processes is not None:  # every process must run the same number of backward passes
            samples = samples[: self.fewest_over_processes(len(samples))]
        return samples, sample_stats(samples, skipped)

    def estimate(
        self,
        rows: Sequence[Mapping[str, Any]],
        rewards: Sequence[float],
        groups: Sequence[Hashable] | None,
        stage: Stage,
        *,
        whole_batch: bool = False,
    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """The advantages (N,) of ``stage``'s ``rows`` before penalties, from their ``rewards`` (N,) and
        ``groups`` (N,), and per row its choices' weights (C,), None where the sampled choice trains.

        Votes: Eq. 5 within each group (``whole_batch``: one group over every process, its ``(mean, std)``
        from their summed :func:`~trainers.algorithm.vote_moments`); with ``vote_gradient`` expected the
        choices' ``Â_k`` (supervised: 1 on the spy) and the normalised expected reward. Performances: RAE,
        ``r − b_role`` on every process's role means (the baselines updated), scaled by the replay group's
        std with ``perform_group_norm`` (``groups`` None without it).

        >>> rows = [{"game_id": 0, "round": 0, "role": "civilian"}] * 2
        >>> advantages, weights = AdvantagePipeline().estimate(rows, [1.0, 0.0], [0, 0], Stage.VOTE)
        >>> advantages.round(3).tolist(), weights
        ([1.0, -1.0], [None, None])
        """
        c, eps, weight = self.config, self.config.advantage_eps, self.game.rewards.weight_detect
        reduce = self.sum_over_processes
        if stage is Stage.VOTE:
            stats = None
            if reduce is not None and whole_batch:  # a group spread over the processes: their summed moments
                stats = batch_group_stats(reduce(vote_moments(rows, rewards, c.vote_gradient, weight)))
            gradient = vote_gradient_of(c.vote_gradient)
            if gradient.weights is not None:  # e.g. expected: reasoning tokens get the vote's expected reward
                weights, advantages = gradient.weights(rows, groups, weight, eps, stats)
                return advantages, weights
            return group_normalized_advantages(rewards, groups, eps=eps, stats=stats), [None] * len(rows)
        roles = [r["role"] for r in rows]
        if c.rae:  # global role means keep every process's baselines in sync
            means = role_means(reduce(role_reward_sums(rewards, roles))) if reduce is not None else None
            advantages = self.rae.advantages(rewards, roles, role_means=means)
        else:
            advantages = np.asarray(rewards, dtype=np.float64)
        if groups is not None and c.rae:  # the baseline centres, the group scales (re-centring would cancel b_role)
            advantages = group_scaled(advantages, rewards, groups, eps=eps)
        elif groups is not None:
            advantages = group_normalized_advantages(rewards, groups, eps=eps)
        return advantages, [None] * len(rows)
