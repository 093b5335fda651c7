"""Game metrics computed from episode-buffer rows (so they work on saved buffers too)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from spy_env.stage import Stage

__all__ = ["forfeits_by_agent", "game_metrics"]


def game_metrics(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Summary of a set of games.

    - ``detection_accuracy``: share of civilian votes cast on the spy (abstentions count as misses);
    - ``spy_caught_rate``: share of games in which plurality voting singled out the spy;
    - ``na_rate``: share of votes that were abstentions or invalid (``civilian_na_rate``: of
      civilian votes only);
    - ``violation_rate``: share of rows (actions) with at least one violation;
    - ``forfeit_rate``: share of rows whose policy call failed;
    - mean rewards per role and stage.
    """
    games: set[tuple[str, int]] = set()
    caught: dict[tuple[str, int], bool] = {}
    civ_votes = civ_hits = civ_abstain = votes = abstain = n_rows = violated = forfeits = 0
    reward_sums: dict[str, float] = defaultdict(float)
    reward_counts: dict[str, int] = defaultdict(int)
    for row in rows:
        key = (row["run_id"], row["game_id"])
        games.add(key)
        caught[key] = bool(row["spy_caught"])
        n_rows += 1
        violated += bool(row["violations"])
        forfeits += bool(row["error"])
        family = f"reward/{row['role']}_{row['stage']}"
        reward_sums[family] += row["reward"]
        reward_counts[family] += 1
        if row["stage"] != Stage.VOTE:
            continue
        votes += 1
        abstain += row["vote"] < 0
        if row["role"] == "civilian":
            civ_votes += 1
            civ_hits += row["vote"] == row["spy_seat"]
            civ_abstain += row["vote"] < 0
    out = {
        "games": float(len(games)),
        "detection_accuracy": civ_hits / civ_votes if civ_votes else 0.0,
        "spy_caught_rate": sum(caught.values()) / len(caught) if caught else 0.0,
        "na_rate": abstain / votes if votes else 0.0,
        "civilian_na_rate": civ_abstain / civ_votes if civ_votes else 0.0,
        "violation_rate": violated / n_rows if n_rows else 0.0,
        "forfeit_rate": forfeits / n_rows if n_rows else 0.0,
    }
    for family in sorted(reward_sums):
        out[family] = reward_sums[family] / reward_counts[family]
    return out


def forfeits_by_agent(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per ``agent_name``: ``actions``, ``forfeits`` (rows whose policy call failed) and the first
    failure's ``reason``, for agents with at least one forfeit.

    >>> rows = [{"agent_name": "a", "error": ""}, {"agent_name": "b", "error": "down"}]
    >>> forfeits_by_agent(rows)
    {'b': {'actions': 1, 'forfeits': 1, 'reason': 'down'}}
    """
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = out.setdefault(row["agent_name"], {"actions": 0, "forfeits": 0, "reason": ""})
        entry["actions"] += 1
        if row["error"]:
            entry["forfeits"] += 1
            entry["reason"] = entry["reason"] or row["error"]
    return {name: entry for name, entry in out.items() if entry["forfeits"]}
