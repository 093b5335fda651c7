"""Held-out game evaluation: fixed games, per-game metrics and bootstrap intervals.

One module serves every held-out evaluation (the trainer's ``eval_games``, the SmolLM2
experiment, base-vs-trained comparisons): the *same* games (documents from the held-out split,
seeds, spy seats and degradations all fixed by ``seed``) are played by each policy, every metric is
computed per game, and intervals are bootstrap percentiles over games. Comparing two policies on
the same games uses a *paired* bootstrap of the per-game differences.

Metrics per game:

- ``detection_accuracy``: share of civilian votes cast on the spy (abstentions are misses);
- ``expected_accuracy``: mean over civilian votes of the probability the voter's policy gave the
  spy at its choice step (``vote_probs``; the accuracy its sampled votes have in expectation, with no
  sampling noise); NaN when the backend does not report it;
- ``spy_caught``: plurality voting singled out the spy (0/1);
- ``na_rate``: share of votes that abstained or were invalid; ``valid_vote_rate``: share of votes
  without a violation;
- ``no_answer_rate``: share of performances with no ``\\boxed{}`` answer.

Every evaluation is a look at the held-out games: :func:`evaluate_heldout` appends one line to the
evaluation ledger (:mod:`spy_env.ledger`), its headline metric ``detection_accuracy``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from spy_env.ledger import Look, fingerprint, headline
from spy_env.policy import policy_name
from spy_env.stage import Stage

__all__ = [
    "METRICS",
    "Interval",
    "Look",
    "bootstrap",
    "evaluate_heldout",
    "paired_difference",
    "per_game",
    "percentile_interval",
    "resample_counts",
    "summarize",
]

METRICS = (
    "detection_accuracy",
    "expected_accuracy",
    "spy_caught",
    "na_rate",
    "valid_vote_rate",
    "no_answer_rate",
)


@dataclass(frozen=True)
class Interval:
    """A mean with its bootstrap percentile interval over ``n`` units (games)."""

    mean: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def resample_counts(n: int, *, resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """``(resamples, n)``: how often each of ``n`` units (games) is drawn in each bootstrap resample.

    The one resampling scheme of every interval spyrl reports: a statistic that is a ratio of sums
    over games (a tournament's per-agent rates, role-fair ratings) is ``counts @ numerators`` over
    ``counts @ denominators`` per resample.
    """
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    return np.stack([np.bincount(row, minlength=n) for row in draws]) if n else np.zeros((resamples, 0), int)


def percentile_interval(estimate: float, replicates: np.ndarray, n: int, confidence: float = 0.95) -> Interval:
    """``estimate`` with the percentile interval of its bootstrap ``replicates`` (NaNs dropped)."""
    replicates = np.asarray(replicates, dtype=np.float64)
    replicates = replicates[~np.isnan(replicates)]
    if math.isnan(estimate) or replicates.size == 0:
        return Interval(float(estimate), math.nan, math.nan, int(n))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return Interval(float(estimate), float(low), float(high), int(n))


def bootstrap(values: Sequence[float], *, resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> Interval:
    """Mean of ``values`` (NaNs dropped) with a percentile bootstrap interval.

    >>> bootstrap([1.0, 1.0, 1.0]).to_dict()
    {'mean': 1.0, 'low': 1.0, 'high': 1.0, 'n': 3}
    >>> math.isnan(bootstrap([]).mean)
    True
    """
    x = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    if x.size == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    means = resample_counts(x.size, resamples=resamples, seed=seed) @ x / x.size
    return percentile_interval(float(x.mean()), means, x.size, confidence)


def paired_difference(
    after: Sequence[Mapping[str, float]], before: Sequence[Mapping[str, float]], metric: str, **kwargs: Any
) -> Interval:
    """Bootstrap interval of ``mean(after − before)`` of ``metric`` over the same games (paired)."""
    if len(after) != len(before):
        raise ValueError(f"paired games differ in number: {len(after)} vs {len(before)}")
    diffs = []
    for a, b in zip(after, before, strict=True):
        if (a["document_id"], a["game_seed"]) != (b["document_id"], b["game_seed"]):
            raise ValueError("paired evaluations were not played on the same games")
        diffs.append(a[metric] - b[metric])
    return bootstrap(diffs, **kwargs)


def per_game(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every metric of :data:`METRICS` for each game of a buffer, in game order."""
    games: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in rows:
        games.setdefault((row["run_id"], row["game_id"]), []).append(row)
    out = []
    for (_, game_id), game_rows in sorted(games.items(), key=lambda kv: kv[0][1]):
        votes = [r for r in game_rows if r["stage"] == Stage.VOTE]
        civilian = [r for r in votes if r["role"] == "civilian"]
        performances = [r for r in game_rows if r["stage"] == Stage.PERFORM]
        spy = game_rows[0]["spy_seat"]
        probs = [r["vote_probs"][spy] for r in civilian if len(r["vote_probs"]) > spy >= 0]
        out.append(
            {
                "game_id": game_id,
                "document_id": game_rows[0]["document_id"],
                "game_seed": game_rows[0]["game_seed"],
                "spy_seat": spy,
                "detection_accuracy": _share(r["vote"] == spy for r in civilian),
                "expected_accuracy": float(np.mean(probs)) if civilian and len(probs) == len(civilian) else math.nan,
                "spy_caught": float(bool(game_rows[0]["spy_caught"])),
                "na_rate": _share(r["vote"] < 0 for r in votes),
                "valid_vote_rate": _share(not r["violations"] for r in votes),
                "no_answer_rate": _share("no_answer" in r["violations"] for r in performances),
            }
        )
    return out


def _share(flags: Iterable[bool]) -> float:
    flags = list(flags)
    return sum(map(bool, flags)) / len(flags) if flags else math.nan


def summarize(games: Sequence[Mapping[str, Any]], **kwargs: Any) -> dict[str, Interval]:
    """A bootstrap :class:`Interval` over games for every metric."""
    return {m: bootstrap([g[m] for g in games], **kwargs) for m in METRICS}


def evaluate_heldout(
    policies: Sequence[Any],
    config: Any,
    documents: Sequence[Any],
    num_games: int,
    *,
    seed: int = 12345,
    run_id: str = "heldout",
    spy: Any = None,
    look: Look | None = None,
) -> tuple[Any, list[dict[str, Any]]]:
    """Play the fixed held-out games (``documents``, ``seed``) with one policy per seat (``spy``, when
    given, in every game's spy seat: :meth:`spy_env.runner.Runner.run`).

    Returns the episode buffer and :func:`per_game` metrics. Equal ``documents``, ``num_games``,
    ``seed`` and game config give the same games (documents, spy seats, degradations) whatever the
    policies, so two policies can be compared game by game.

    The evaluation is a look at the set ``run_id`` in the ledger, recorded as ``look`` says (default
    :class:`~spy_env.ledger.Look`: the seats' policy names, the default ledger); its fingerprint is the
    games': the sorted document ids, ``num_games``, ``seed`` and the game config.
    """
    from spy_env.runner import Runner

    if not documents:
        raise ValueError("held-out evaluation needs at least one held-out document")
    look = look or Look()
    name = ",".join(dict.fromkeys(policy_name(p) for p in policies))
    look.check(name)  # before the games: a ledger that cannot be written is refused now
    played = replace(config, corpus=tuple(documents), max_documents=None)
    buffer = Runner(played, run_id=run_id).run(list(policies), num_games, seed=seed, spy=spy)
    games = per_game(buffer)
    setup = {k: v for k, v in played.to_dict().items() if k not in ("corpus", "max_documents")}
    games_sha256 = fingerprint(
        {"documents": sorted(d.id for d in documents), "num_games": num_games, "seed": seed, "config": setup}
    )
    accuracy = bootstrap([g["detection_accuracy"] for g in games])
    look.record(run_id, games_sha256, name, headline("detection_accuracy", **accuracy.to_dict()))
    return buffer, games
