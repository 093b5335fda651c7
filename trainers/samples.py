"""Which rows of an iteration's episode buffer train, and their rewards: rows in, numbers out.

Nothing here writes into a row: the advantage pipeline (:mod:`trainers.advantages`) pairs each row
with its advantages in a frozen :class:`Sample`.

Only the current stage trains: performances in the performing stage, votes in the detection stage
(the spy's vote only with ``train_spy_vote``; with ``spy_vote_in_group`` it still joins its game's
Eq. 5 group untrained). A vote's reward is ``r^D`` as the env recorded it; a performance's is the
registered ``perform_reward``'s. Penalties are split off, to be added to the offender's advantage
afterwards (``penalty_advantage="own"``), or left in the reward (``"shared"``). The settings of the
whole pipeline are :class:`AdvantageConfig`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents.registry import Registry
from spy_env.config import GameConfig
from spy_env.stage import Stage
from trainers.sections import AdvantageConfig

__all__ = [
    "PERFORM_REWARDS",
    "SKIP_REASONS",
    "PerformReward",
    "Sample",
    "perform_reward_of",
    "recorded_rewards",
    "register_perform_reward",
    "sampled_perform_rewards",
    "skip_reason",
    "stage_rewards",
    "stage_rows",
]

SKIP_REASONS = ("too_long_prompt", "empty", "forfeit", "no_choice")


@dataclass(frozen=True)
class Sample:
    """One training sample: its episode-buffer ``row`` (read, never written), its ``advantage``, and
    for a vote decoded as a choice the per-seat ``choice_advantages`` (``vote_gradient`` expected or
    supervised; None otherwise)."""

    row: Mapping[str, Any]
    advantage: float
    choice_advantages: tuple[float, ...] | None = None


def skip_reason(row: Mapping[str, Any], max_prompt_tokens: int) -> str | None:
    """Why a row of the training stage cannot train (one of :data:`SKIP_REASONS`), or None.

    >>> row = {"error": None, "prompt_token_ids": [1, 2], "completion_token_ids": [7, 8], "completion_mask": [0, 0]}
    >>> skip_reason(row, 8), skip_reason({**row, "completion_mask": [0, 1]}, 8)
    ('no_choice', None)
    >>> skip_reason({**row, "completion_mask": None}, max_prompt_tokens=1)
    'too_long_prompt'
    """
    if row["error"]:
        return "forfeit"
    if not row["completion_token_ids"]:
        return "empty"
    if row["completion_mask"] and not any(row["completion_mask"]):  # every token was forced
        return "no_choice"
    if len(row["prompt_token_ids"]) > max_prompt_tokens:
        return "too_long_prompt"
    return None


def stage_rows(
    buffer: Iterable[dict], stage: Stage, config: AdvantageConfig, *, max_prompt_tokens: int
) -> tuple[list[dict], dict[str, int]]:
    """The rows of ``stage`` that enter its advantages, and how many were skipped for each reason.

    A row enters when it trains; the spy's untrained vote also enters with ``config.spy_vote_in_group``
    (it joins its game's normalisation group, then is dropped before the update); performances only
    of the roles ``config.perform_roles`` names (left out by the setting, not counted as skipped).

    >>> base = {"error": None, "prompt_token_ids": [1], "completion_token_ids": [7], "completion_mask": None}
    >>> buffer = [{**base, "stage": "vote", "trainable": False, "role": "spy"},
    ...           {**base, "stage": "vote", "trainable": True, "role": "civilian", "error": "timeout"},
    ...           {**base, "stage": "perform", "trainable": True, "role": "civilian"}]
    >>> rows, skipped = stage_rows(buffer, Stage.VOTE, AdvantageConfig(spy_vote_in_group=True), max_prompt_tokens=8)
    >>> [r["role"] for r in rows], skipped["forfeit"]
    (['spy'], 1)
    >>> stage_rows(buffer, Stage.PERFORM, AdvantageConfig(perform_roles="spy"), max_prompt_tokens=8)[0]
    []
    """
    rows, skipped = [], dict.fromkeys(SKIP_REASONS, 0)
    for row in buffer:
        if row["stage"] != stage:
            continue
        if stage is Stage.PERFORM and config.perform_roles not in ("all", row["role"]):
            continue  # a role the performing stage does not train
        if not row["trainable"] and not (stage is Stage.VOTE and config.spy_vote_in_group and row["role"] == "spy"):
            continue
        reason = skip_reason(row, max_prompt_tokens)
        if reason is None:
            rows.append(row)
        else:
            skipped[reason] += 1
    return rows, skipped


def stage_rewards(
    rows: Sequence[Mapping[str, Any]],
    stage: Stage,
    config: AdvantageConfig,
    game: GameConfig,
    buffer: Iterable[Mapping[str, Any]] = (),
) -> tuple[list[float], list[float]]:
    """``(rewards, penalties)`` of each row of ``stage``: a vote's as the env recorded it
    (:func:`recorded_rewards`), a performance's as the registered ``perform_reward`` computes it
    (``buffer``: the iteration's rows, which it may read: ``expected`` reads the votes).

    >>> rows = [{"reward_perform": 1.0, "reward_penalty": -0.5, "reward": 0.5}]
    >>> stage_rewards(rows, Stage.PERFORM, AdvantageConfig(penalty_advantage="own"), GameConfig())
    ([1.0], [-0.5])
    """
    if stage is Stage.PERFORM:
        return perform_reward_of(config.perform_reward).rewards(rows, buffer, config, game)
    return recorded_rewards(rows, stage, config, game)


def recorded_rewards(
    rows: Sequence[Mapping[str, Any]], stage: Stage, config: AdvantageConfig, game: GameConfig
) -> tuple[list[float], list[float]]:
    """``(rewards, penalties)`` of each row as the env recorded them (the rewards' weights are ``game``'s).

    ``penalty_advantage="own"``: the stage's weighted reward component, and the weighted penalty
    to add to the advantage later. ``"shared"``: the total reward (penalties inside), no penalty.

    >>> rows = [{"reward_detect": 1.0, "reward_penalty": -0.5, "reward": 0.5}]
    >>> recorded_rewards(rows, Stage.VOTE, AdvantageConfig(penalty_advantage="own"), GameConfig())
    ([1.0], [-0.5])
    >>> recorded_rewards(rows, Stage.VOTE, AdvantageConfig(penalty_advantage="shared"), GameConfig())
    ([0.5], [0.0])
    """
    if config.penalty_advantage != "own":
        return [r["reward"] for r in rows], [0.0] * len(rows)
    weight, component = (
        (game.rewards.weight_detect, "reward_detect")
        if stage is Stage.VOTE
        else (game.rewards.weight_perform, "reward_perform")
    )
    return [weight * r[component] for r in rows], [game.rewards.weight_penalty * r["reward_penalty"] for r in rows]


# (rows, buffer, config, game) -> (rewards, penalties): one of each per row, as recorded_rewards
PerformRewardFn = Callable[
    [Sequence[Mapping[str, Any]], Iterable[Mapping[str, Any]], AdvantageConfig, GameConfig],
    tuple[list[float], list[float]],
]


@dataclass(frozen=True)
class PerformReward:
    """A ``perform_reward``: the reward the performing stage trains on.

    ``rewards(rows, buffer, config, game)``: ``(rewards, penalties)`` of the performing stage's training
    ``rows`` (one float each; ``buffer``: every row of the iteration, votes included), penalties split off
    as :func:`recorded_rewards` does. ``needs_vote_distributions``: it reads the voters' recorded choice
    distributions, so the votes must be drawn from them (votes with a choice step, recorded by the engine,
    at temperature 1 and top-p 1). ``continuous``: replays of one setup get rewards that differ by a hair,
    so a replay group's std must not divide them (``perform_group_norm``).
    """

    rewards: PerformRewardFn
    needs_vote_distributions: bool = False
    continuous: bool = False


PERFORM_REWARDS: Registry[PerformReward] = Registry("perform_reward")


def register_perform_reward(
    name: str, *, needs_vote_distributions: bool = False, continuous: bool = False
) -> Callable[[PerformRewardFn], PerformRewardFn]:
    """Decorator that makes ``rewards(rows, buffer, config, game)`` the ``perform_reward`` called ``name``."""

    def wrap(rewards: PerformRewardFn) -> PerformRewardFn:
        PERFORM_REWARDS.register(name, PerformReward(rewards, needs_vote_distributions, continuous))
        return rewards

    return wrap


@register_perform_reward("sampled")
def sampled_perform_rewards(
    rows: Sequence[Mapping[str, Any]], buffer: Iterable[Mapping[str, Any]], config: AdvantageConfig, game: GameConfig
) -> tuple[list[float], list[float]]:
    """The paper's performing reward: the env's ``r^P`` from the votes as cast (:func:`recorded_rewards`)."""
    return recorded_rewards(rows, Stage.PERFORM, config, game)


def perform_reward_of(name: str) -> PerformReward:
    """The registered ``perform_reward`` called ``name`` (``expected`` registers in :mod:`trainers.perform_rewards`)."""
    return PERFORM_REWARDS.of(name)
