"""Which votes are normalised together in Eq. 5: the ``detect_advantage_groups`` registry.

A grouping names each vote row's group: ``game`` (the voters of one game's round, the paper's Eq. 5),
``prompt`` (one seat's vote across the replayed games of a setup) or ``batch`` (every vote of the iteration,
over every process). :func:`register_advantage_grouping` adds one; ``SpyRLConfig`` accepts its name
(``advantages.detect_advantage_groups``) and :mod:`trainers.advantages` normalises each group's rewards.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents.registry import Registry

__all__ = ["ADVANTAGE_GROUPINGS", "AdvantageGrouping", "advantage_groups", "grouping_of", "register_advantage_grouping"]


@dataclass(frozen=True)
class AdvantageGrouping:
    """A ``detect_advantage_groups``: which votes are normalised together (Eq. 5's group).

    ``key(row)``: the group of a vote's row. ``whole_batch``: one group over every process's votes, so
    on several processes the pipeline sums their moments first
    (:meth:`trainers.advantages.AdvantagePipeline.estimate`).
    ``needs_replayed_setups``: the groups are only larger than one vote when games replay one setup
    (``replay_setup`` and ``games_per_document`` ≥ 2).
    """

    key: Callable[[Mapping[str, Any]], Hashable]
    whole_batch: bool = False
    needs_replayed_setups: bool = False


ADVANTAGE_GROUPINGS: Registry[AdvantageGrouping] = Registry("detect_advantage_groups")


def register_advantage_grouping(name: str, grouping: AdvantageGrouping) -> AdvantageGrouping:
    """Make ``grouping`` the ``detect_advantage_groups`` called ``name``."""
    return ADVANTAGE_GROUPINGS.register(name, grouping)


def _game_round(row: Mapping[str, Any]) -> Hashable:
    return (row["game_id"], row["round"])


def _replayed_seat(row: Mapping[str, Any]) -> Hashable:
    return (row["group_id"], row["seat"], row["round"])


def _one_group(row: Mapping[str, Any]) -> Hashable:
    return 0


register_advantage_grouping("game", AdvantageGrouping(_game_round))  # the voters of one game's round (Eq. 5)
register_advantage_grouping("prompt", AdvantageGrouping(_replayed_seat, needs_replayed_setups=True))
register_advantage_grouping("batch", AdvantageGrouping(_one_group, whole_batch=True))


def grouping_of(name: str) -> AdvantageGrouping:
    return ADVANTAGE_GROUPINGS.of(name)


def advantage_groups(rows: Sequence[Mapping[str, Any]], by: str) -> list[Hashable]:
    """Each row's normalisation group under the grouping ``by``: ``"game"``, its game's round (the
    voters of Eq. 5); ``"prompt"``, its seat and round across the replayed games of its group (same
    document, spy and masks); ``"batch"``: one group, every row (on several processes every
    process's rows: the pipeline passes the group's global mean and std,
    :meth:`trainers.advantages.AdvantagePipeline.estimate`).

    >>> rows = [{"game_id": 4, "group_id": 1, "seat": 2, "round": 0}]
    >>> advantage_groups(rows, "game"), advantage_groups(rows, "prompt"), advantage_groups(rows, "batch")
    ([(4, 0)], [(1, 2, 0)], [0])
    """
    key = grouping_of(by).key
    return [key(r) for r in rows]
