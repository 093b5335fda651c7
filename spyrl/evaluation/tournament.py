"""Tournaments: mixed tables of agents, per-agent metrics and a role-fair rating, all with intervals.

**Seating.** Every game seats every agent. Who is the spy is *scheduled*, not left to the seat
draw: in each block of ``m`` games (``m`` agents) every agent is the spy exactly once (block order
shuffled), at a uniformly drawn seat. The ``n − m`` extra seats go round-robin (shuffled blocks)
so every agent holds the same number of seats, ±1. With ``num_games`` a multiple of ``m`` each
agent is the spy exactly ``num_games / m`` times.

**Rating.** A game's rewards are dominated by the role a seat held: the zero-sum performing
reward moves the spy by up to ``n − 1`` while each civilian moves by a fraction of it. So an agent
is compared with the field *within a role*: ``Δ_civilian`` is its mean reward per civilian seat
minus the mean reward of all civilian seats of the tournament, ``Δ_spy`` the same for the spy
seat, and

    rating = ((n − 1)/n) · Δ_civilian + (1/n) · Δ_spy

is its expected reward above the field per seat, with each role weighted by how often a seat
holds it, whatever its own seating was. 0 is the field's average; it does not depend on agent
names or on the order agents were listed in. An agent that never held one of the roles has no
rating (NaN, unranked): play at least as many games as there are agents.

**Intervals.** Every metric (rating, its two parts, detection accuracy, spy-caught rate, N/A,
violation and forfeit rates, rewards per role and stage) gets a bootstrap 95% interval over games
(:func:`spy_env.heldout.resample_counts`: whole games are resampled, so an agent's seats of one
game stay together). ``p_best`` is the share of resamples in which an agent has the highest
rating among the ranked agents.

**Rule baselines.** Each agent's first-round civilian votes are also scored as each rule baseline of
:mod:`agents.rules` would have cast them, on the performances those votes saw
(``rule_<name>_accuracy``, with intervals): its detection accuracy is read against the strongest of
them on the very same votes (the table's last column).

**Flags.** An agent whose forfeit rate (failed calls: a dead server, a crash) exceeds
``max_forfeit_rate`` is flagged and not ranked: its rewards would measure its backend, not its play.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.rules import RULES, played_votes, spy_share
from spy_env.buffer import EpisodeBuffer
from spy_env.config import GameConfig
from spy_env.heldout import percentile_interval, resample_counts
from spy_env.io import save_figure, write_text
from spy_env.policy import Policy
from spy_env.runner import Runner
from spy_env.stage import Stage

__all__ = [
    "RATIOS",
    "Seating",
    "TournamentResult",
    "agent_metrics",
    "role_fair_ratings",
    "run_tournament",
    "seat_schedule",
]

# metric -> (numerator, denominator): per-game sums, so resampling games resamples both together.
RATIOS: dict[str, tuple[str, str]] = {
    "detection_accuracy": ("hits", "civilian_votes"),
    "spy_caught_rate": ("spy_caught", "spy_games"),
    "na_rate": ("abstentions", "votes"),
    "violation_rate": ("violations", "actions"),
    "forfeit_rate": ("forfeits", "actions"),
    "reward/civilian": ("civilian_reward", "civilian_seats"),
    "reward/spy": ("spy_reward", "spy_games"),
    "reward/civilian_perform": ("civilian_perform", "civilian_seats"),
    "reward/civilian_vote": ("civilian_vote", "civilian_seats"),
    "reward/spy_perform": ("spy_perform", "spy_games"),
    "reward/spy_vote": ("spy_vote", "spy_games"),
    **{f"rule_{rule}_accuracy": (f"rule_hits_{rule}", "first_civilian_votes") for rule in RULES},
}
COUNTS = ("actions", "games_as_spy", "civilian_votes", "seats")
_SUMS = sorted({key for pair in RATIOS.values() for key in pair} | {"seats"})


@dataclass(frozen=True)
class Seating:
    """One game's table: the agent name at each seat, and the spy's seat."""

    seats: tuple[str, ...]
    spy_seat: int

    @property
    def spy(self) -> str:
        return self.seats[self.spy_seat]


def _blocks(m: int, rng: np.random.Generator):
    """0..m−1 forever, in a freshly shuffled order every m draws."""
    while True:
        yield from (int(i) for i in rng.permutation(m))


def seat_schedule(names: Sequence[str], n_players: int, num_games: int, seed: int) -> list[Seating]:
    """For each game, the agent at each seat and the spy seat, balanced (see the module docstring)."""
    if not names:
        raise ValueError("a tournament needs at least one agent")
    if len(names) > n_players:
        raise ValueError(f"{len(names)} agents do not fit at a {n_players}-player table")
    m = len(names)
    rng = np.random.default_rng(seed)
    spies, extras = _blocks(m, rng), _blocks(m, rng)
    schedule = []
    for _ in range(num_games):
        spy = next(spies)
        civilians = [i for i in range(m) if i != spy] + [next(extras) for _ in range(n_players - m)]
        civilians = [civilians[i] for i in rng.permutation(len(civilians))]
        spy_seat = int(rng.integers(n_players))
        seats = [*civilians[:spy_seat], spy, *civilians[spy_seat:]]
        schedule.append(Seating(tuple(names[i] for i in seats), spy_seat))
    return schedule


def _game_sums(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> tuple[dict[str, np.ndarray], int]:
    """Per-game, per-agent sums ``{key: (games, agents)}`` of everything :data:`RATIOS` divides."""
    games = sorted({(row["run_id"], row["game_id"]) for row in rows})
    g_index = {key: g for g, key in enumerate(games)}
    a_index = {name: a for a, name in enumerate(names)}
    sums = {key: np.zeros((len(games), len(names))) for key in _SUMS}
    seat_reward: dict[tuple[int, int], float] = {}
    n_players = 0
    for row in rows:
        g, a = g_index[(row["run_id"], row["game_id"])], a_index[row["agent_name"]]
        role, stage = row["role"], row["stage"]
        n_players = max(n_players, row["seat"] + 1)
        sums["actions"][g, a] += 1
        sums["violations"][g, a] += bool(row["violations"])
        sums["forfeits"][g, a] += bool(row["error"])
        sums[f"{role}_{stage}"][g, a] += row["reward"]
        sums[f"{role}_reward"][g, a] += row["reward"]
        if stage == Stage.VOTE:
            sums["votes"][g, a] += 1
            sums["abstentions"][g, a] += row["vote"] < 0
            if role == "civilian":
                sums["civilian_votes"][g, a] += 1
                sums["hits"][g, a] += row["vote"] == row["spy_seat"]
        if (g, row["seat"]) not in seat_reward and row["round"] == 0 and stage == Stage.PERFORM:
            seat_reward[(g, row["seat"])] = 0.0
            sums["seats"][g, a] += 1
            sums["spy_games" if role == "spy" else "civilian_seats"][g, a] += 1
            sums["spy_caught"][g, a] += role == "spy" and bool(row["spy_caught"])
    _add_rule_sums(sums, rows, g_index, a_index)
    return sums, n_players


def _add_rule_sums(sums: dict[str, np.ndarray], rows: Sequence[Mapping[str, Any]], g_index, a_index) -> None:
    """Per game and agent, each rule's share on the spy over the agent's first-round civilian votes
    (``rule_hits_<rule>``, as :func:`agents.rules.spy_share`), and how many votes (``first_civilian_votes``)."""
    for row, shown, others in played_votes(rows):
        g, a = g_index[(row["run_id"], row["game_id"])], a_index[row["agent_name"]]
        sums["first_civilian_votes"][g, a] += 1
        for name, rule in RULES.items():
            sums[f"rule_hits_{name}"][g, a] += spy_share(rule, shown, others, row["spy_seat"])


def _ratio(sums: Mapping[str, np.ndarray], key: str, weights: np.ndarray | None = None) -> np.ndarray:
    """Per agent (or per resample × agent with ``weights``: resample × games)."""
    num, den = RATIOS[key]
    top = sums[num].sum(0) if weights is None else weights @ sums[num]
    bottom = sums[den].sum(0) if weights is None else weights @ sums[den]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1), np.nan)


def _field_ratio(sums: Mapping[str, np.ndarray], num: str, den: str, weights: np.ndarray | None = None) -> np.ndarray:
    top = sums[num].sum(1) if weights is None else weights @ sums[num].sum(1)
    bottom = sums[den].sum(1) if weights is None else weights @ sums[den].sum(1)
    return np.asarray(top.sum() / bottom.sum() if weights is None else top / bottom)


def _ratings_from(sums: Mapping[str, np.ndarray], n_players: int, weights: np.ndarray | None = None):
    """``(rating, Δ_civilian, Δ_spy)`` per agent (per resample × agent with ``weights``)."""
    d_civ = (
        _ratio(sums, "reward/civilian", weights)
        - _field_ratio(sums, "civilian_reward", "civilian_seats", weights)[..., None]
    )
    d_spy = _ratio(sums, "reward/spy", weights) - _field_ratio(sums, "spy_reward", "spy_games", weights)[..., None]
    rating = (n_players - 1) / n_players * d_civ + d_spy / n_players
    return rating, d_civ, d_spy


def agent_metrics(
    rows: Sequence[Mapping[str, Any]], *, resamples: int = 2000, seed: int = 0
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, dict[str, float]]]]:
    """Per-agent point metrics and their bootstrap intervals over games (``{agent: {metric: …}}``)."""
    names = sorted({row["agent_name"] for row in rows})
    sums, _ = _game_sums(rows, names)
    counts = resample_counts(len(next(iter(sums.values()))), resamples=resamples, seed=seed)
    metrics: dict[str, dict[str, float]] = {name: {} for name in names}
    intervals: dict[str, dict[str, dict[str, float]]] = {name: {} for name in names}
    for key in RATIOS:
        point, replicates = _ratio(sums, key), _ratio(sums, key, counts)
        for a, name in enumerate(names):
            n = int(sums[RATIOS[key][1]][:, a].sum())
            metrics[name][key] = float(point[a])
            intervals[name][key] = percentile_interval(point[a], replicates[:, a], n).to_dict()
    for a, name in enumerate(names):
        metrics[name].update(
            actions=int(sums["actions"][:, a].sum()),
            games_as_spy=int(sums["spy_games"][:, a].sum()),
            civilian_votes=int(sums["civilian_votes"][:, a].sum()),
            seats=int(sums["seats"][:, a].sum()),
        )
    return metrics, intervals


def role_fair_ratings(
    rows: Sequence[Mapping[str, Any]],
    *,
    max_forfeit_rate: float = 0.1,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Role-fair rating per agent with its interval, rank and ``p_best`` (see the module docstring).

    Flagged agents (forfeit rate above ``max_forfeit_rate``) get ``rank`` None and ``p_best`` 0.
    """
    names = sorted({row["agent_name"] for row in rows})
    sums, n_players = _game_sums(rows, names)
    counts = resample_counts(sums["actions"].shape[0], resamples=resamples, seed=seed)
    rating, d_civ, d_spy = _ratings_from(sums, n_players)
    reps, reps_civ, reps_spy = _ratings_from(sums, n_players, counts)
    forfeit = _ratio(sums, "forfeit_rate")
    flagged = np.asarray([bool(f > max_forfeit_rate) for f in forfeit])
    ranked = [a for a in range(len(names)) if not flagged[a] and not math.isnan(rating[a])]
    p_best = np.zeros(len(names))
    if ranked:
        sub = np.where(np.isnan(reps[:, ranked]), -np.inf, reps[:, ranked])
        winners = np.asarray(ranked)[sub.argmax(axis=1)]
        p_best = np.bincount(winners, minlength=len(names)) / len(counts)
    order = sorted(ranked, key=lambda a: -rating[a])
    out = {}
    games = sums["actions"].shape[0]
    for a, name in enumerate(names):
        out[name] = {
            **percentile_interval(rating[a], reps[:, a], games).to_dict(),
            "rank": order.index(a) + 1 if a in order else None,
            "p_best": float(p_best[a]),
            "flagged": bool(flagged[a]),
            "reason": f"forfeit rate {forfeit[a]:.2f} > {max_forfeit_rate}" if flagged[a] else "",
            "delta_civilian": percentile_interval(d_civ[a], reps_civ[:, a], games).to_dict(),
            "delta_spy": percentile_interval(d_spy[a], reps_spy[:, a], games).to_dict(),
        }
    return out


@dataclass
class TournamentResult:
    buffer: EpisodeBuffer
    metrics: dict[str, dict[str, float]]
    ratings: dict[str, dict[str, Any]]
    intervals: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def unranked(self) -> dict[str, float]:
        """Flagged agents (forfeit rate above the limit) and their forfeit rates."""
        return {n: self.metrics[n]["forfeit_rate"] for n, r in self.ratings.items() if r["flagged"]}

    def order(self) -> list[str]:
        """Ranked agents best first, then flagged ones."""
        return sorted(self.metrics, key=lambda a: (self.ratings[a]["rank"] is None, self.ratings[a]["rank"] or 0, a))

    def _cell(self, name: str, key: str, fmt: str = ".3f") -> str:
        i = self.intervals.get(name, {}).get(key)
        value = self.metrics[name][key]
        if i is None or math.isnan(value):
            return f"{value:{fmt}}"
        return f"{value:{fmt}} [{i['low']:{fmt}}, {i['high']:{fmt}}]"

    def strongest_rule(self, name: str) -> str:
        """The rule baseline scoring best on ``name``'s own first-round civilian votes (first in
        :data:`agents.rules.RULES` order on a tie); "" when it cast none."""
        scores = {r: self.metrics[name].get(f"rule_{r}_accuracy", math.nan) for r in RULES}
        scores = {r: v for r, v in scores.items() if not math.isnan(v)}
        return max(scores, key=scores.get) if scores else ""

    def table(self) -> str:
        """A Markdown table, best rating first; flagged agents last, unranked. The last column is the
        strongest rule baseline on the agent's own votes, beside its detection accuracy."""
        lines = [
            "| rank | agent | rating [95% CI] | P(best) | detection accuracy | spy caught | N/A rate "
            "| forfeit rate | reward as civilian | reward as spy | games as spy | strongest rule, same votes |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name in self.order():
            r = self.ratings[name]
            rank = "not ranked" if r["flagged"] else str(r["rank"] or "–")
            lines.append(
                f"| {rank} | {name} | {_signed(r)} | {r['p_best']:.2f} | {self._cell(name, 'detection_accuracy')} "
                f"| {self._cell(name, 'spy_caught_rate')} | {self._cell(name, 'na_rate')} "
                f"| {self.metrics[name]['forfeit_rate']:.2f} | {self._cell(name, 'reward/civilian', '+.3f')} "
                f"| {self._cell(name, 'reward/spy', '+.3f')} | {int(self.metrics[name]['games_as_spy'])} "
                f"| {self._rule_cell(name)} |"
            )
        return "\n".join(lines)

    def _rule_cell(self, name: str) -> str:
        rule = self.strongest_rule(name)
        return f"`{rule}` {self._cell(name, f'rule_{rule}_accuracy')}" if rule else "–"

    def save(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        """Write ``games.parquet``, ``summary.json`` and ``chart.png`` (atomically) to ``out_dir``."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"buffer": self.buffer.save(out / "games.parquet")}
        summary = {
            "config": self.config,
            "metrics": self.metrics,
            "intervals": self.intervals,
            "ratings": self.ratings,
            "unranked": self.unranked,
        }
        paths["summary"] = write_text(out / "summary.json", json.dumps(summary, indent=2, default=str))
        paths["chart"] = self._chart(out / "chart.png")
        return paths

    def _chart(self, path: Path) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = self.order()
        panels = [
            ("role-fair rating", [self.ratings[n] for n in names]),
            ("detection accuracy", [self._interval(n, "detection_accuracy") for n in names]),
            ("spy caught rate (as spy)", [self._interval(n, "spy_caught_rate") for n in names]),
        ]
        fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
        for ax, (title, values) in zip(axes, panels, strict=True):
            means = np.nan_to_num([v["mean"] for v in values])
            errors = np.nan_to_num([[v["mean"] - v["low"] for v in values], [v["high"] - v["mean"] for v in values]])
            colors = ["tab:gray" if self.ratings[n]["flagged"] else "tab:blue" for n in names]
            ax.bar(names, means, yerr=np.clip(errors, 0, None), color=colors, capsize=4)
            ax.axhline(0, color="black", linewidth=0.5)
            ax.set_title(title)
            ax.tick_params(axis="x", rotation=20)
        fig.suptitle(f"spyrl tournament ({self.config.get('num_games', '?')} games, bootstrap 95% intervals)")
        fig.tight_layout()
        return save_figure(fig, path)

    def _interval(self, name: str, key: str) -> dict[str, float]:
        value = self.metrics[name][key]
        return self.intervals.get(name, {}).get(key) or {"mean": value, "low": value, "high": value}


def _signed(r: Mapping[str, Any]) -> str:
    return f"{r['mean']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]"


def run_tournament(
    policies: Mapping[str, Policy],
    num_games: int,
    *,
    config: GameConfig | None = None,
    seed: int = 0,
    progress: bool = False,
    max_forfeit_rate: float = 0.1,
) -> TournamentResult:
    """Play ``num_games`` balanced mixed-table games between ``policies`` (name -> policy)."""
    if not isinstance(num_games, int) or num_games < 1:
        raise ValueError(f"a tournament needs at least 1 game, got {num_games!r}")
    config = config or GameConfig()
    names = list(policies)
    schedule = seat_schedule(names, config.rules.n_players, num_games, seed)
    runner = Runner(config)
    buffer = runner.run(
        lambda g: [policies[name] for name in schedule[g].seats],
        num_games,
        seed=seed,
        progress=progress,
        options=lambda g: {"spy_seat": schedule[g].spy_seat},
    )
    for row in buffer:  # name rows by the tournament's keys (two policies may share a name)
        row["agent_name"] = schedule[row["game_id"]].seats[row["seat"]]
    metrics, intervals = agent_metrics(buffer.rows)
    return TournamentResult(
        buffer=buffer,
        metrics=metrics,
        ratings=role_fair_ratings(buffer.rows, max_forfeit_rate=max_forfeit_rate),
        intervals=intervals,
        config={
            "agents": names,
            "num_games": num_games,
            "seed": seed,
            "rating": "role-fair: ((n-1)/n)·Δ_civilian + (1/n)·Δ_spy, reward above the field per seat",
            "max_forfeit_rate": max_forfeit_rate,
            **config.to_dict(),
        },
    )
