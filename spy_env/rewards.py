"""Reward formulas of SpyRL (docs/GUIDE.md), as pure functions of the votes.

Notation (one round): seats ``0..n-1``, some of them still alive; ``u`` the spy seat;
``v_i`` the seat voter ``i`` voted for (``None`` = abstain/invalid); ``m_s`` votes received by
seat ``s``; ``m_u`` the spy's; ``m̄_c`` the mean over alive civilians; ``n_c`` their number.

- detection:  ``r_i^D = 1[v_i = u]``
- performing: ``r_u^P = -β (m_u - m̄_c)`` for the spy and
  ``r_cj^P = (β / n_c)(m_u - m̄_c) - λ (m_cj - m̄_c)`` for civilian ``j``.

The performing rewards of the alive players sum to zero for every vote pattern.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

__all__ = [
    "detection_rewards",
    "performing_rewards",
    "plurality_elimination",
    "spy_caught",
    "votes_received",
    "weighted_reward",
]


def votes_received(votes: Sequence[int | None], n_players: int) -> list[int]:
    """Count the votes each seat received; abstentions (``None``) count for nobody.

    >>> votes_received([1, 1, None, 0], 4)
    [1, 2, 0, 0]
    """
    counts = [0] * n_players
    for target in votes:
        if target is not None:
            counts[target] += 1
    return counts


def detection_rewards(votes: Sequence[int | None], spy_seat: int) -> list[float]:
    """``r_i^D = 1[v_i = u]``; abstentions and invalid votes score 0.

    >>> detection_rewards([2, 2, None, 0], spy_seat=2)
    [1.0, 1.0, 0.0, 0.0]
    """
    return [1.0 if target == spy_seat else 0.0 for target in votes]


def performing_rewards(
    received: Sequence[int],
    spy_seat: int,
    alive: Sequence[bool],
    beta: float = 1.0,
    lam: float = 1.0,
) -> list[float]:
    """Zero-sum performing rewards over the alive seats (dead seats get 0).

    ``r_u^P = −β (m_u − m̄_c)`` for the spy ``u`` and ``r_cj^P = (β / n_c)(m_u − m̄_c) − λ (m_cj − m̄_c)``
    for civilian ``j``, with ``m`` the votes received (``received``) from all voters ``i ∈ {1..n}``.

    >>> # 5 players, spy = seat 0 got 3 votes, civilian 1 got 1, civilians 2..4 none.
    >>> performing_rewards([3, 1, 0, 0, 0], 0, [True] * 5)
    [-2.75, -0.0625, 0.9375, 0.9375, 0.9375]
    >>> sum(performing_rewards([0, 2, 2, 1, 0], 3, [True] * 5))
    0.0
    """
    civilians = [s for s in range(len(received)) if alive[s] and s != spy_seat]
    if not civilians:
        raise ValueError("performing_rewards needs at least one alive civilian")
    n_c = len(civilians)
    mean_c = sum(received[s] for s in civilians) / n_c
    gap = received[spy_seat] - mean_c  # m_u - m̄_c: how much more suspicion the spy drew
    rewards = [0.0] * len(received)
    rewards[spy_seat] = -beta * gap
    for s in civilians:
        rewards[s] = (beta / n_c) * gap - lam * (received[s] - mean_c)
    return rewards


def plurality_elimination(received: Sequence[int], alive: Sequence[bool]) -> int | None:
    """The alive seat with strictly the most votes, or ``None`` on a tie or no votes.

    >>> plurality_elimination([0, 3, 1], [True] * 3), plurality_elimination([2, 2, 1], [True] * 3)
    (1, None)
    """
    best, best_count, tied = None, 0, False
    for seat, count in enumerate(received):
        if not alive[seat]:
            continue
        if count > best_count:
            best, best_count, tied = seat, count, False
        elif count == best_count and count > 0:
            tied = True
    return None if tied else best


def spy_caught(received: Sequence[int], alive: Sequence[bool], spy_seat: int) -> bool:
    """Whether plurality voting singles out the spy this round.

    >>> spy_caught([3, 1, 0], [True] * 3, 0), spy_caught([2, 2, 0], [True] * 3, 0)
    (True, False)
    """
    return plurality_elimination(received, alive) == spy_seat


def weighted_reward(
    config: Any, *, detect: float | None = None, perform: float | None = None, penalty: float = 0.0
) -> float:
    """The scalar reward ``w_D·detect + w_P·perform + w_pen·penalty`` over the components given,
    with the weights of a :class:`~spy_env.config.GameConfig` (a stage's row gives only its own).

    >>> from spy_env.config import GameConfig
    >>> weighted_reward(GameConfig(weight_perform=0.5), detect=1.0, perform=-1.0, penalty=-0.25)
    0.25
    """
    weights = (config.rewards.weight_detect, config.rewards.weight_perform, config.rewards.weight_penalty)
    terms = [w * x for w, x in zip(weights, (detect, perform, penalty), strict=True) if x is not None]
    return functools.reduce(operator.add, terms)
