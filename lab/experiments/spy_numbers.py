"""Does a run's own game reward the spy for what spy-v1 rewards? Numbers in the spy's texts, from its kept games.

On spy-v1 a spy's text that names no number is almost always voted out: its fixed detectors compare numbers
and terms with their own copies (``lab/experiments/spy_texts.py``: texts with numbers survive 0.36-0.48 of their
games in every model measured, texts without 0.00-0.13). This script asks the run's training games the same
question, per range of iterations, first round, per game (``run.keep_buffers``):

- ``spy_numbers``: the share of games whose spy's performance names a number (``agents.scripted.numbers_in``);
- ``civilian_numbers``: the same share over the civilians' performances;
- ``votes_with_numbers`` / ``votes_without_numbers``: the votes the spy's performance received (as cast, the
  performance's ``votes_received``), over the games whose spy text names a number / names none;
- ``votes_difference``: with minus without, its interval from the two groups resampled apart. Above 0: the
  run's voters find a spy that names numbers more often, so its performing reward pushes the spy towards the
  texts spy-v1's detectors catch;
- ``expected_with_numbers`` / ``expected_without_numbers`` / ``expected_difference``: the same with the votes'
  expectation (each voter's recorded probability on the spy's seat, summed: the ``perform_reward=expected``
  reward's votes), less noisy than the votes as cast.

``lab/experiments/selfplay_stages.py --probe`` reports the same measures of its games (``games_of``), a screen of
a starting model and vote prompt before any training.

The games with and without numbers are different games (documents, copies, seats), so the difference is a
correlation on the run's games, not an effect measured on one setup. Intervals resample games. Given several runs,
a last row (``all runs``) holds every run's games of each range together.

    python lab/experiments/spy_numbers.py runs/attempt23/seed0/selfplay --iterations 1-32 --iterations 33-64 --out numbers.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from harness import command_of, experiment_parser, user_error
from seat_probe import add_iteration_ranges, iteration_range, kept_rows

from agents.scripted import numbers_in
from spy_env.heldout import Interval, bootstrap, percentile_interval, resample_counts
from spy_env.io import refuse_existing_outputs, write_text
from spy_env.stage import Stage
from trainers.perform_rewards import expected_votes_received


def spy_games(run: Path, first: int, last: int) -> list[dict[str, Any]]:
    """Per first-round game of iterations ``first..last`` of a kept run: :func:`games_of` each iteration's rows."""
    return [
        game for iteration in range(first, last + 1)
        for game in games_of(kept_rows(run, iteration), f"{run}, iteration {iteration}")
    ]  # fmt: skip


def games_of(rows: Iterable[dict[str, Any]], where: str = "the rows") -> list[dict[str, Any]]:
    """Per first-round game of ``rows`` (one iteration's, or a probe's): whether the spy's text and each civilian's
    name a number, the votes the spy's text received as cast (``votes``) and their expectation over the voters'
    recorded choice probabilities (``expected_votes``, the ``perform_reward=expected`` reward's votes)."""
    played: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        if row["round"] == 0:
            played.setdefault((row["run_id"], row["game_id"]), []).append(row)
    games = []
    for members in played.values():
        performances = [r for r in members if r["stage"] == Stage.PERFORM]
        spy = [r for r in performances if r["role"] == "spy"]
        if len(spy) != 1:
            raise ValueError(f"{where}: a game without exactly one spy performance")
        votes = [r for r in members if r["stage"] == Stage.VOTE]
        games.append(
            {
                "spy_numbers": float(bool(numbers_in(spy[0]["completion"] or ""))),
                "civilian_numbers": [float(bool(numbers_in(r["completion"] or ""))) for r in performances if r is not spy[0]],
                "votes": float(spy[0]["votes_received"]),
                "expected_votes": expected_votes_received(votes, len(performances))[int(spy[0]["spy_seat"])],
            }
        )  # fmt: skip
    return games


def difference(with_: Sequence[float], without: Sequence[float], *, resamples: int = 2000) -> Interval:
    """``mean(with_) − mean(without)`` with a percentile interval, the two groups resampled apart.

    >>> d = difference([3.0, 3.0], [1.0, 1.0, 1.0])
    >>> (d.mean, d.low, d.high, d.n)
    (2.0, 2.0, 2.0, 5)
    """
    a, b = np.asarray(with_, dtype=np.float64), np.asarray(without, dtype=np.float64)
    if not a.size or not b.size:
        return Interval(float("nan"), float("nan"), float("nan"), int(a.size + b.size))
    ra = resample_counts(a.size, resamples=resamples, seed=0) @ a / a.size
    rb = resample_counts(b.size, resamples=resamples, seed=1) @ b / b.size
    return percentile_interval(float(a.mean() - b.mean()), ra - rb, a.size + b.size)


def numbers(games: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The module docstring's measures over ``games``."""
    out: dict[str, Any] = {
        "games": len(games),
        "spy_numbers": bootstrap([g["spy_numbers"] for g in games]).to_dict(),
        "civilian_numbers": bootstrap([float(np.mean(g["civilian_numbers"])) for g in games]).to_dict(),
    }
    for measure, prefix in (("votes", "votes"), ("expected_votes", "expected")):
        named = [g[measure] for g in games if g["spy_numbers"]]
        unnamed = [g[measure] for g in games if not g["spy_numbers"]]
        out[f"{prefix}_with_numbers"] = bootstrap(named).to_dict()
        out[f"{prefix}_without_numbers"] = bootstrap(unnamed).to_dict()
        out[f"{prefix}_difference"] = difference(named, unnamed).to_dict()
    return out


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__, None, "JSON file to write", overrides=False)
    p.add_argument("runs", nargs="+", help="training run folders that kept their buffers (buffers/iter_NNNNN.parquet)")
    add_iteration_ranges(p)
    args = p.parse_args(argv)
    try:
        ranges = [iteration_range(text) for text in args.iterations]
        refuse_existing_outputs([args.out], overwrite=args.overwrite)
        played = {run: {f"{a}-{b}": spy_games(Path(run), a, b) for a, b in ranges} for run in args.runs}
    except (OSError, ValueError, KeyError) as e:
        return user_error(e if not isinstance(e, KeyError) else f"not a kept buffer: missing {e}")
    if len(played) > 1:  # every run's games of a range together, as one more row
        played["all runs"] = {
            name: [g for by_range in played.values() for g in by_range[name]] for name in next(iter(played.values()))
        }
    result: dict[str, Any] = {"command": command_of(__file__, argv), "runs": {}}
    for run, by_range in played.items():
        result["runs"][run] = {name: numbers(games) for name, games in by_range.items()}
        for name, row in result["runs"][run].items():
            d, e = row["votes_difference"], row["expected_difference"]
            print(
                f"{run} {name}: spy names a number {row['spy_numbers']['mean']:.2f} "
                f"(civilians {row['civilian_numbers']['mean']:.2f}); votes on the spy with − without numbers "
                f"{d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}], expected {e['mean']:+.2f} "
                f"[{e['low']:+.2f}, {e['high']:+.2f}]",
                flush=True,
            )
    write_text(Path(args.out), json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
