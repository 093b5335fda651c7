"""``advantages.perform_reward``: which performing reward the performing stage trains on.

- ``sampled`` (the paper's): the env's ``r^P`` (``spy_env.rewards.performing_rewards``) from the votes as
  they were cast.
- ``expected``: the same formula with every seat's votes received ``m_s`` replaced by their expectation
  under the voters' recorded choice distributions, ``m̃_s = Σ_i q_i(s)`` (the buffer's ``vote_probs``; the
  mass on N/A counts for nobody, as an abstention does). A voter with no recorded distribution (a scripted
  voter, a free-text vote) counts the vote it cast, a forfeit counts for nobody. ``r^P`` is linear in
  ``m``, so this is ``E[r^P | the round's performances]`` over the votes' draw: the same expectation as
  the sampled reward with less variance (Rao–Blackwell). A spy whose text draws more suspicion than the
  civilians' gets a lower reward even in a game where no sampled vote happened to land on it, and one
  setup replayed G times gives its G performances different rewards whenever the voters' distributions
  differ. Not the paper's estimator; it needs the votes drawn from the recorded ``q`` (constrained or
  think-then-vote votes of the ``hf`` rollout at temperature 1, top-p 1: ``SpyRLConfig`` checks it), and
  ``perform_group_norm`` off: RAE-centred advantages divided by a replay group's std, which rewards that
  differ by a hair make tiny, blow up (``SpyRLConfig`` refuses the pair).

The rewards stay zero-sum over a round's alive seats for every set of distributions. Both are registered
performing rewards (:data:`trainers.samples.PERFORM_REWARDS`): ``sampled`` beside the stage rewards it
reads, ``expected`` here, saying what it needs; the trainer looks the setting up there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spy_env.config import GameConfig
from spy_env.rewards import performing_rewards
from spy_env.stage import Stage
from trainers.samples import register_perform_reward
from trainers.sections import AdvantageConfig

__all__ = ["expected_perform_rewards", "expected_votes_received", "perform_stage_rewards"]


def _round_key(row: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    return (row.get("run_id"), row["game_id"], row["round"])


def expected_votes_received(vote_rows: Iterable[Mapping[str, Any]], n_players: int) -> list[float]:
    """``m̃_s = Σ_i q_i(s)`` over one round's votes: each voter's recorded probability of voting for seat ``s``
    (``vote_probs``: seats 1..n, then N/A), or 1 for the seat it voted for when it recorded none.

    >>> votes = [{"vote_probs": [0.0, 0.5, 0.25, 0.25], "vote": 1, "error": ""},
    ...          {"vote_probs": [], "vote": 2, "error": ""}, {"vote_probs": [], "vote": -1, "error": ""}]
    >>> expected_votes_received(votes, 3)
    [0.0, 0.5, 1.25]
    """
    received = [0.0] * n_players
    for row in vote_rows:
        if row["error"]:  # a forfeit: the env counted no vote
            continue
        probs = list(row.get("vote_probs") or [])
        if probs:
            for seat in range(n_players):
                received[seat] += float(probs[seat])
        elif 0 <= row["vote"] < n_players:
            received[row["vote"]] += 1.0
    return received


def expected_perform_rewards(
    rows: Sequence[Mapping[str, Any]], buffer: Iterable[Mapping[str, Any]], game: GameConfig
) -> list[float]:
    """Each performance row of ``rows``' ``r^P`` with expected votes received (:func:`expected_votes_received`
    over the votes of its round in ``buffer``); the round's alive seats are the ones that performed in it.
    ``game``: the :class:`~spy_env.config.GameConfig` (``rules.n_players``, β = ``rewards.vote_gap_weight``, λ =
    ``rewards.lam``)."""
    votes: dict[tuple[Any, Any, Any], list[Mapping[str, Any]]] = {}
    performers: dict[tuple[Any, Any, Any], set[int]] = {}
    for row in buffer:
        key = _round_key(row)
        if row["stage"] == Stage.VOTE:
            votes.setdefault(key, []).append(row)
        elif row["stage"] == Stage.PERFORM:
            performers.setdefault(key, set()).add(int(row["seat"]))
    by_round: dict[tuple[Any, Any, Any], list[float]] = {}
    out = []
    for row in rows:
        key = _round_key(row)
        if key not in by_round:
            received = expected_votes_received(votes.get(key, []), game.rules.n_players)
            alive = [seat in performers[key] for seat in range(game.rules.n_players)]
            by_round[key] = performing_rewards(
                received, int(row["spy_seat"]), alive, game.rewards.vote_gap_weight, game.rewards.lam
            )
        out.append(by_round[key][int(row["seat"])])
    return out


@register_perform_reward("expected", needs_vote_distributions=True, continuous=True)
def perform_stage_rewards(
    rows: Sequence[Mapping[str, Any]],
    buffer: Iterable[Mapping[str, Any]],
    config: AdvantageConfig,
    game: GameConfig,
) -> tuple[list[float], list[float]]:
    """``trainers.samples.stage_rewards`` of the performing stage with ``perform_reward=expected``: the
    weighted expected ``r^P`` and, with ``penalty_advantage="own"``, the weighted penalties to add after the
    baselines (``"shared"``: inside the reward, as the env's total reward has them).

    >>> base = {"run_id": "r", "game_id": 0, "round": 0, "spy_seat": 0, "error": "", "reward_penalty": 0.0}
    >>> rows = [{**base, "stage": "perform", "seat": s} for s in range(3)]
    >>> votes = [{**base, "stage": "vote", "seat": 1, "vote": 2, "vote_probs": [0.5, 0.0, 0.5, 0.0]},
    ...          {**base, "stage": "vote", "seat": 2, "vote": 1, "vote_probs": [0.5, 0.5, 0.0, 0.0]}]
    >>> perform_stage_rewards(rows, rows + votes, AdvantageConfig(), GameConfig(n_players=3))  # cast: spy +1.0
    ([-0.5, 0.25, 0.25], [0.0, 0.0, 0.0])
    """
    perform = expected_perform_rewards(rows, buffer, game)
    rewards = [game.rewards.weight_perform * p for p in perform]
    penalties = [game.rewards.weight_penalty * r["reward_penalty"] for r in rows]
    if config.penalty_advantage == "own":
        return rewards, penalties
    return [r + p for r, p in zip(rewards, penalties, strict=True)], [0.0] * len(rows)
