"""Tournaments: mixed tables of agents, per-agent game metrics and an OpenSkill rating.

Every game seats all agents (round-robin over the seats, shuffled per game), so each agent
meets the others and, since the spy seat is uniform, plays both roles many times. Per agent:

- ``detection_accuracy``: share of its civilian votes cast on the spy;
- ``spy_caught_rate``: when it was the spy, share of games in which the vote caught it;
- ``na_rate`` / ``violation_rate`` / ``forfeit_rate`` over its actions;
- mean reward per role and stage;
- an OpenSkill (Plackett–Luce) rating from each game's ranking of agents by mean reward.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spy_env.buffer import EpisodeBuffer
from spy_env.config import GameConfig
from spy_env.io import save_figure, write_text
from spy_env.policy import Policy
from spy_env.runner import Runner

__all__ = ["TournamentResult", "agent_metrics", "run_tournament", "seat_schedule"]


def seat_schedule(names: Sequence[str], n_players: int, num_games: int, seed: int) -> list[list[str]]:
    """For each game, the agent name at each seat: every agent seated, seats shuffled."""
    if not names:
        raise ValueError("a tournament needs at least one agent")
    if len(names) > n_players:
        raise ValueError(f"{len(names)} agents do not fit at a {n_players}-player table")
    rng = np.random.default_rng(seed)
    schedule = []
    for _ in range(num_games):
        order = list(rng.permutation(len(names)))
        seats = [names[order[i % len(names)]] for i in range(n_players)]
        schedule.append([seats[i] for i in rng.permutation(n_players)])
    return schedule


def agent_metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per-agent metrics from buffer rows (see the module docstring)."""
    acc: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        m = acc[row["agent_name"]]
        m["actions"] += 1
        m["violations"] += bool(row["violations"])
        m["forfeits"] += bool(row["error"])
        m[f"sum/{row['role']}_{row['stage']}"] += row["reward"]
        m[f"n/{row['role']}_{row['stage']}"] += 1
        if row["stage"] == "vote":
            m["votes"] += 1
            m["abstentions"] += row["vote"] < 0
            if row["role"] == "civilian":
                m["civilian_votes"] += 1
                m["hits"] += row["vote"] == row["spy_seat"]
            else:
                m["spy_games"] += 1
                m["spy_caught"] += bool(row["spy_caught"])
    out = {}
    for name, m in acc.items():
        summary = {
            "actions": m["actions"],
            "games_as_spy": m["spy_games"],
            "civilian_votes": m["civilian_votes"],
            "detection_accuracy": m["hits"] / m["civilian_votes"] if m["civilian_votes"] else float("nan"),
            "spy_caught_rate": m["spy_caught"] / m["spy_games"] if m["spy_games"] else float("nan"),
            "na_rate": m["abstentions"] / m["votes"] if m["votes"] else float("nan"),
            "violation_rate": m["violations"] / m["actions"],
            "forfeit_rate": m["forfeits"] / m["actions"],
        }
        for key in [k for k in m if k.startswith("sum/")]:
            family = key[4:]
            summary[f"reward/{family}"] = m[key] / m[f"n/{family}"]
        out[name] = summary
    return out


def _ratings(buffer: EpisodeBuffer, exclude: frozenset[str] = frozenset()) -> dict[str, dict[str, float]]:
    try:
        from openskill.models import PlackettLuce
    except ImportError as e:
        raise ImportError("tournament ratings need openskill: pip install openskill") from e
    model = PlackettLuce()
    ratings: dict[str, Any] = {}
    for rows in buffer.games().values():
        totals: dict[str, list[float]] = defaultdict(list)
        per_seat: dict[int, float] = defaultdict(float)
        names: dict[int, str] = {}
        for row in rows:
            if row["agent_name"] in exclude:  # unrated: its forfeits say nothing about the others
                continue
            per_seat[row["seat"]] += row["reward"]
            names[row["seat"]] = row["agent_name"]
        for seat, total in per_seat.items():
            totals[names[seat]].append(total)
        if len(totals) < 2:
            continue
        agents = sorted(totals)
        for name in agents:
            ratings.setdefault(name, model.rating(name=name))
        teams = [[ratings[name]] for name in agents]
        scores = [float(np.mean(totals[name])) for name in agents]
        for name, [new] in zip(agents, model.rate(teams, scores=scores), strict=True):
            ratings[name] = new
    return {name: {"mu": r.mu, "sigma": r.sigma, "ordinal": r.ordinal()} for name, r in ratings.items()}


@dataclass
class TournamentResult:
    buffer: EpisodeBuffer
    metrics: dict[str, dict[str, float]]
    ratings: dict[str, dict[str, float]]
    config: dict[str, Any] = field(default_factory=dict)
    unranked: dict[str, float] = field(default_factory=dict)  # agent -> forfeit rate above the limit

    def table(self) -> str:
        """A Markdown table, best rating first; agents that forfeited too often come last, unranked."""
        lines = [
            "| agent | rating (ordinal) | detection accuracy | spy caught | N/A rate | violation rate "
            "| reward as civilian | reward as spy | games as spy |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        order = sorted(self.metrics, key=lambda a: (a in self.unranked, -self.ratings.get(a, {}).get("ordinal", -1e9)))
        for name in order:
            m = self.metrics[name]
            civ = m.get("reward/civilian_perform", 0.0) + m.get("reward/civilian_vote", 0.0)
            spy = m.get("reward/spy_perform", 0.0) + m.get("reward/spy_vote", 0.0)
            rating = self.ratings.get(name, {}).get("ordinal", float("nan"))
            shown = f"not ranked: {m['forfeit_rate']:.0%} forfeited" if name in self.unranked else f"{rating:.2f}"
            lines.append(
                f"| {name} | {shown} | {m['detection_accuracy']:.3f} | {m['spy_caught_rate']:.3f} "
                f"| {m['na_rate']:.3f} | {m['violation_rate']:.3f} | {civ:+.3f} | {spy:+.3f} | {int(m['games_as_spy'])} |"
            )
        return "\n".join(lines)

    def save(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        """Write ``games.parquet``, ``summary.json`` and ``chart.png`` (atomically) to ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"buffer": self.buffer.save(out / "games.parquet")}
        summary = {"config": self.config, "metrics": self.metrics, "ratings": self.ratings, "unranked": self.unranked}
        paths["summary"] = write_text(out / "summary.json", json.dumps(summary, indent=2, default=str))
        paths["chart"] = self._chart(out / "chart.png")
        return paths

    def _chart(self, path: Path) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = sorted(self.metrics)
        panels = [
            ("detection accuracy", [self.metrics[n]["detection_accuracy"] for n in names]),
            ("spy caught rate (as spy)", [self.metrics[n]["spy_caught_rate"] for n in names]),
            ("rating (ordinal)", [self.ratings.get(n, {}).get("ordinal", 0.0) for n in names]),
        ]
        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
        for ax, (title, values) in zip(axes, panels, strict=True):
            ax.bar(names, [0.0 if np.isnan(v) else v for v in values], color="tab:blue")
            ax.set_title(title)
            ax.tick_params(axis="x", rotation=20)
        fig.suptitle(f"spyrl tournament ({self.config.get('num_games', '?')} games)")
        fig.tight_layout()
        return save_figure(fig, path)


def run_tournament(
    policies: Mapping[str, Policy],
    num_games: int,
    *,
    config: GameConfig | None = None,
    seed: int = 0,
    progress: bool = False,
    max_forfeit_rate: float = 0.5,
) -> TournamentResult:
    """Play ``num_games`` mixed-table games between ``policies`` (name -> policy).

    An agent whose share of forfeited actions (failed policy calls) exceeds ``max_forfeit_rate``
    is not rated and is listed as unranked: a dead backend must not rank, let alone first.
    """
    config = config or GameConfig()
    names = list(policies)
    schedule = seat_schedule(names, config.n_players, num_games, seed)
    runner = Runner(config)
    buffer = runner.run(lambda g: [policies[name] for name in schedule[g]], num_games, seed=seed, progress=progress)
    for row in buffer:  # name rows by the tournament's keys (two policies may share a name)
        row["agent_name"] = schedule[row["game_id"]][row["seat"]]
    metrics = agent_metrics(buffer.rows)
    unranked = {n: m["forfeit_rate"] for n, m in metrics.items() if m["forfeit_rate"] > max_forfeit_rate}
    return TournamentResult(
        buffer=buffer,
        metrics=metrics,
        ratings=_ratings(buffer, exclude=frozenset(unranked)),
        config={"agents": names, "num_games": num_games, "seed": seed, **config.to_dict()},
        unranked=unranked,
    )
