"""The paper's reward-alignment check: do votes track quality?

Play games, show each game's performances to a judge agent of the user's choice, ask it to rank
them from best to worst (``<ranking>3, 1, 2</ranking>``), and correlate the judge's rank with the
votes each performance received. If the game's rewards are aligned with quality, worse-ranked
performances draw more votes: a positive Spearman correlation between rank (1 = best) and votes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spy_env.buffer import EpisodeBuffer
from spy_env.io import save_figure
from spy_env.policy import Action
from spy_env.prompts import format_performances
from spy_env.stage import Stage

__all__ = ["AlignmentResult", "judge_prompt", "parse_ranking", "reward_alignment", "spearman"]

_RANKING = re.compile(r"<ranking>(.*?)</ranking>", re.IGNORECASE | re.DOTALL)


def judge_prompt(document: str, performances: Sequence[str]) -> str:
    return (
        "Each player below designed a math problem from the same source text and solved it.\n\n"
        f"Source text:\n<document>\n{document}\n</document>\n\nPerformances:\n"
        f"{format_performances(list(performances), viewer=-1)}\n\n"
        "Rank the performances from best to worst: grounding in the source, correctness and clarity. "
        "End with <ranking>i, j, ...</ranking> listing every player number once, best first."
    )


def parse_ranking(text: str, n: int) -> list[int] | None:
    """Player numbers (1-based) best first → rank position per seat (1 = best), or None.

    >>> parse_ranking("... <ranking>3, 1, 2</ranking>", 3)
    [2, 3, 1]
    >>> parse_ranking("<ranking>1, 1, 2</ranking>", 3) is None
    True
    """
    matches = _RANKING.findall(text)
    if not matches:
        return None
    order = [int(x) for x in re.findall(r"\d+", matches[-1])]
    if sorted(order) != list(range(1, n + 1)):
        return None
    ranks = [0] * n
    for position, player in enumerate(order, start=1):
        ranks[player - 1] = position
    return ranks


def _average_ranks(values: Sequence[float]) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[order[j + 1]] == values[order[i]]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation with average ranks for ties (NaN when a side is constant).

    >>> spearman([1, 2, 3], [10, 20, 30]), spearman([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
    """
    rx, ry = _average_ranks(x), _average_ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


@dataclass
class AlignmentResult:
    games: int
    judged: int
    judge_failures: int
    pooled_spearman: float
    mean_game_spearman: float
    points: list[tuple[int, int]] = field(default_factory=list)  # (judge rank, votes received)

    def summary(self) -> str:
        return (
            f"games {self.games}, judged {self.judged} (judge failures {self.judge_failures}); "
            f"Spearman(judge rank, votes received): pooled {self.pooled_spearman:+.3f}, "
            f"mean per game {self.mean_game_spearman:+.3f} (positive = votes fall on worse performances)"
        )

    def plot(self, path: str | os.PathLike) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rng = np.random.default_rng(0)
        ranks = np.array([p[0] for p in self.points], dtype=float)
        votes = np.array([p[1] for p in self.points], dtype=float)
        fig, ax = plt.subplots(figsize=(5, 3.6))
        ax.scatter(
            ranks + rng.uniform(-0.15, 0.15, len(ranks)), votes + rng.uniform(-0.15, 0.15, len(votes)), s=12, alpha=0.5
        )
        for rank in sorted(set(ranks.tolist())):
            ax.plot(rank, votes[ranks == rank].mean(), "rs")
        ax.set_xlabel("judge rank (1 = best)")
        ax.set_ylabel("votes received")
        ax.set_title(f"reward alignment: Spearman {self.pooled_spearman:+.2f}")
        fig.tight_layout()
        return save_figure(fig, path)


def reward_alignment(buffer: EpisodeBuffer, documents: dict[str, str], judge: Any) -> AlignmentResult:
    """Correlate votes received with the judge's ranking, over every round of every game.

    ``documents`` maps document ids to their text (what the judge sees as the source).
    """
    rounds: dict[tuple, dict[int, dict[str, Any]]] = {}
    for row in buffer:
        key = (row["run_id"], row["game_id"], row["round"])
        seat = rounds.setdefault(key, {}).setdefault(row["seat"], {})
        if row["stage"] == Stage.PERFORM:
            seat["performance"] = row["completion"]
            seat["document_id"] = row["document_id"]
        else:
            seat["votes"] = row["votes_received"]
    keys = [k for k, seats in rounds.items() if all("performance" in s and "votes" in s for s in seats.values())]
    prompts = []
    for key in keys:
        seats = rounds[key]
        order = sorted(seats)
        document = documents.get(seats[order[0]]["document_id"], "")
        prompts.append(
            {"system": "", "prompt": judge_prompt(document, [seats[s]["performance"] for s in order]), "stage": 0}
        )
    actions = judge.act(prompts) if prompts else []
    points, per_game, failures = [], [], 0
    for key, action in zip(keys, actions, strict=True):
        seats = rounds[key]
        order = sorted(seats)
        ranks = parse_ranking(Action.of(action).text, len(order))
        if ranks is None:
            failures += 1
            continue
        votes = [seats[s]["votes"] for s in order]
        points += list(zip(ranks, votes, strict=True))
        rho = spearman(ranks, votes)
        if not np.isnan(rho):
            per_game.append(rho)
    pooled = spearman([p[0] for p in points], [p[1] for p in points]) if points else float("nan")
    return AlignmentResult(
        games=len({k[:2] for k in rounds}),
        judged=len(keys) - failures,
        judge_failures=failures,
        pooled_spearman=pooled,
        mean_game_spearman=float(np.mean(per_game)) if per_game else float("nan"),
        points=points,
    )
