"""Do a run's votes learn the performances they read? Its training votes against every rule, window by window.

A run that keeps its episode buffers (``run.keep_buffers``: ``selfplay_stages.py --training-only`` keeps
them) holds every training game it played: the performances, each civilian's vote and, for forward or
constrained votes, the distribution it was drawn from. This script cuts the run's iterations into
windows of ``--window`` iterations and reports, per window, on the first-round civilian votes:

- ``model_sampled``: how often the vote the run cast named the spy;
- ``model_expected``: the voter's probability on the spy (its expected accuracy; NaN where a vote
  recorded no distribution);
- every rule of ``agents/rules.py`` scored on the very performances those voters saw (the share of the
  rule's tied picks that is the spy): what a voter reading length, numbers or overlap would have found.

Each figure is a mean over the window's iterations, with a bootstrap interval over those iterations: an
iteration is one setup replayed ``games_per_document`` times, so its votes are not independent, and the
unit resampled is the iteration. ``change`` is the last window minus the first, the two windows resampled
independently. ``votes`` counts the trained votes up to each window's end, the x-axis of the curve.

    python lab/experiments/vote_curve.py runs/attempt10/phase_v/detect-only --window 16 --iterations 80 \\
        --out lab/results/selfplay/attempt10/vote_curve.json

``--iterations N`` reads the first N iterations only: what a run that was continued later held at N.

Writes the JSON and, beside it, the curve as PNG (atomically).
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
from harness import command_of, experiment_parser, user_error

from agents.rules import RULES, played_votes, spy_share
from spy_env.buffer import EpisodeBuffer
from spy_env.extras import require
from spy_env.heldout import Interval, bootstrap, percentile_interval, resample_counts
from spy_env.io import refuse_existing_outputs, save_figure, write_text
from trainers.extras import PLOTS

BUFFER = re.compile(r"iter_(\d{5})\.parquet")


def iteration_buffers(run: Path, iterations: int | None = None) -> list[list[dict]]:
    """The rows of each iteration's training games, in order, from ``run/buffers/iter_NNNNN.parquet``; with
    ``iterations``, the first that many only (a run continued later: what it held at that point)."""
    folder = run / "buffers"
    found = sorted((int(m.group(1)), p) for p in folder.glob("iter_*.parquet") if (m := BUFFER.fullmatch(p.name)))
    if iterations is not None:
        if len(found) < iterations:
            raise ValueError(f"--iterations {iterations}: {str(folder)!r} holds {len(found)} iterations' buffers")
        found = found[:iterations]
    if not found:
        raise ValueError(f"{str(folder)!r} holds no iter_NNNNN.parquet buffer: run with run.keep_buffers=true")
    numbers = [n for n, _ in found]
    if numbers != list(range(numbers[0], numbers[0] + len(numbers))):
        raise ValueError(
            f"{str(folder)!r} misses iterations: it holds {numbers[0]}..{numbers[-1]}, {len(numbers)} files"
        )
    return [EpisodeBuffer.load(path).rows for _, path in found]


def iteration_scores(rows: list[dict]) -> dict[str, float]:
    """One iteration's first-round civilian votes: the model's sampled and expected accuracy, every rule's share."""
    views = played_votes(rows)  # each vote with the performances its voter saw: the rules read the same views
    votes = [vote for vote, _, _ in views]
    if not votes:
        return {"votes": 0}
    expected = [_expected(vote) for vote in votes]
    finite = [e for e in expected if not math.isnan(e)]
    out = {
        "votes": len(votes),
        "model_sampled": sum(float(v["vote"] == v["spy_seat"]) for v in votes) / len(votes),
        "model_expected": sum(finite) / len(finite) if finite else math.nan,
    }
    for name, rule in RULES.items():
        out[name] = sum(spy_share(rule, shown, others, vote["spy_seat"]) for vote, shown, others in views) / len(views)
    return out


def _expected(vote: dict) -> float:
    probs = vote.get("vote_probs")
    return float(probs[vote["spy_seat"]]) if probs is not None and len(probs) > vote["spy_seat"] else math.nan


def difference(after: list[float], before: list[float], *, resamples: int = 2000) -> Interval:
    """``mean(after) − mean(before)`` with a bootstrap interval, the two samples resampled independently."""
    a = np.asarray([x for x in after if not math.isnan(x)], dtype=np.float64)
    b = np.asarray([x for x in before if not math.isnan(x)], dtype=np.float64)
    if not a.size or not b.size:
        return Interval(math.nan, math.nan, math.nan, 0)
    replicates = (
        resample_counts(a.size, resamples=resamples, seed=1) @ a / a.size
        - resample_counts(b.size, resamples=resamples, seed=2) @ b / b.size
    )
    return percentile_interval(float(a.mean() - b.mean()), replicates, a.size + b.size)


def curve(played: list[list[dict]], window: int) -> dict[str, Any]:
    """Per window of ``window`` iterations, every score's mean over its iterations with an interval; the change."""
    if window < 1:
        raise ValueError(f"--window must be >= 1, got {window}")
    scores = [iteration_scores(rows) for rows in played]
    keys = ["model_sampled", "model_expected", *RULES]
    windows, votes = [], 0
    for start in range(0, len(scores), window):
        part = [s for s in scores[start : start + window] if s["votes"]]
        votes += sum(s["votes"] for s in scores[start : start + window])
        row: dict[str, Any] = {"iterations": [start + 1, min(start + window, len(scores))], "votes": votes}
        row.update({key: bootstrap([s[key] for s in part]).to_dict() for key in keys})
        windows.append(row)
    first = [s for s in scores[:window] if s["votes"]]
    last = [s for s in scores[(len(scores) - 1) // window * window :] if s["votes"]]  # the last window, maybe short
    change = {key: difference([s[key] for s in last], [s[key] for s in first]).to_dict() for key in keys}
    return {"window": window, "iterations": len(scores), "windows": windows, "change": change}


def plot(result: dict[str, Any], path: Path, chance: float | None) -> None:
    """The model's accuracy and every rule's against the votes trained, with the model's interval as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = [w["votes"] for w in result["windows"]]
    for key, style in (("model_expected", "-o"), ("model_sampled", "-s")):
        ax.plot(x, [w[key]["mean"] for w in result["windows"]], style, label=key.replace("_", ", "), linewidth=2)
        ax.fill_between(
            x, [w[key]["low"] for w in result["windows"]], [w[key]["high"] for w in result["windows"]], alpha=0.15
        )
    for name in RULES:
        ax.plot(x, [w[name]["mean"] for w in result["windows"]], "--", label=f"rule {name}", linewidth=1)
    if chance is not None:
        ax.axhline(chance, color="grey", linestyle=":", label="chance")
    ax.set_xlabel("civilian votes trained (end of window)")
    ax.set_ylabel("share of votes on the spy")
    ax.set_title(f"training votes on the run's own games, windows of {result['window']} iterations")
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.tight_layout()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__, None, "the JSON file to write (the PNG beside it)", overrides=False)
    p.add_argument("run", help="the run's output folder (it holds buffers/iter_NNNNN.parquet)")
    p.add_argument("--window", type=int, default=16, help="iterations per window")
    p.add_argument("--iterations", type=int, default=None, help="read the first N iterations only (default: all)")
    args = p.parse_args(argv)
    out = Path(args.out)
    try:
        if args.window < 1 or (args.iterations is not None and args.iterations < 1):
            raise ValueError(f"--window and --iterations must be >= 1, got {args.window} and {args.iterations}")
        require([PLOTS])
        refuse_existing_outputs([out, out.with_suffix(".png")], overwrite=args.overwrite)
        played = iteration_buffers(Path(args.run), args.iterations)
        result = {"command": command_of(__file__, argv), "run": args.run, **curve(played, args.window)}
    except (ImportError, ValueError) as e:
        return user_error(e)
    players = {len({r["seat"] for r in rows}) for rows in played if rows}
    chance = 1 / (players.pop() - 1) if len(players) == 1 else None
    write_text(out, json.dumps(result, indent=1) + "\n")
    plot(result, out.with_suffix(".png"), chance)
    for w in result["windows"]:
        print(
            f"iterations {w['iterations'][0]}-{w['iterations'][1]} ({w['votes']} votes): expected "
            f"{Interval(**w['model_expected'])}, sampled {Interval(**w['model_sampled'])}; "
            + ", ".join(f"{name} {w[name]['mean']:.3f}" for name in RULES)
        )
    print(f"change, last window - first: expected {Interval(**result['change']['model_expected'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
