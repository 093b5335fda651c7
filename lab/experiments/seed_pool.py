"""A recipe's gain over the base model read across seeds: one leaderboard file per seed, pooled on the same games.

One run's paired interval on a leaderboard set (spy-v1's 100 games, detect-v1's first 48) is about ±0.12 wide,
so a recipe whose true gain is near 0.1 clears 0 in some seeds and not in others. Given the base model's result
file and one result file per seed of the same recipe (each a ``spyrl leaderboard`` file on the same games), this
prints and writes, for every score of the set:

- **per seed**: the paired difference from the base model (as ``spyrl leaderboard --compare`` shows it), and
  how many seeds' intervals lie above 0;
- **pooled over games**: per game, the mean of the seeds' scores minus the base model's, with a bootstrap
  interval over games. The seeds are averaged, not sampled: the interval is the games' noise for these runs;
- **pooled over seeds and games**: a two-level bootstrap (the seeds drawn with replacement, then the games),
  the interval for the recipe as a new seed would run it. With three seeds the seed level has ten distinct
  draws, so this interval is crude, and wider than the other by what the seeds disagree;
- **pooled over seeds and documents**: the same with the documents drawn instead of the games (every game of a
  drawn document comes with it): a set's games share documents, and games on one document are not independent;
- with ``--redraws N``: the share of N re-drawn bootstrap seeds whose two-level interval (seeds and games) has its
  lower bound at or below 0, i.e. how much a verdict "above 0" owes to the draw of the bootstrap itself.

``--references`` (one file per seed, in the seeds' order) replaces the one base model: each seed's gain is then
over its own reference, such as a detection-only run at the same seed and compute.

    python lab/experiments/seed_pool.py --base lab/results/selfplay/attempt18/leaderboard/spy-v1-smollm2.json --seeds lab/results/selfplay/attempt20/leaderboard/spy-v1-attempt20-selfplay.json lab/results/selfplay/attempt21/leaderboard/spy-v1-attempt21-seed{1,2}.json --out pool.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from harness import command_of, experiment_parser, user_error

from spy_env.heldout import Interval, bootstrap, paired_difference, percentile_interval, resample_counts
from spy_env.io import read_json, refuse_existing_outputs, write_text
from spyrl.evaluation.leaderboard import item_score

# the scores read from each set's items: a spy's survival, a voter's detection
SCORES = {
    "spy-v1": ("survival_rate", "clean_survival_rate"),
    "detect-v1": ("detection_accuracy", "expected_accuracy"),
}


def games_of(result: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """A leaderboard result file → its set's name and, per game, the game's key and every score of :data:`SCORES`."""
    results = result.get("results")
    if not isinstance(results, Mapping) or len(results) != 1:
        raise ValueError("not a leaderboard result file of one set: its 'results' must hold exactly one set")
    ((name, body),) = results.items()
    if name not in SCORES:
        raise ValueError(f"set {name!r} has no pooled scores; known: {', '.join(SCORES)}")
    games = []
    for item in body["items"]:
        scores = {score: item_score(item, score) for score in SCORES[name]}
        missing = [score for score, value in scores.items() if value is None]
        if missing:
            raise ValueError(f"a {name} item lacks {', '.join(missing)}")
        games.append({"document_id": item["document_id"], "game_seed": item["game_seed"], **scores})
    return name, games


def pooled(
    bases: Sequence[Sequence[Mapping[str, Any]]],
    seeds: Sequence[Sequence[Mapping[str, Any]]],
    score: str,
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> dict[str, Interval]:
    """The seeds' mean gain over their bases (``bases[i]`` for ``seeds[i]``) on ``score``: its interval over
    games (``games``), its two-level interval over seeds, then games (``seeds_and_games``), and over seeds, then
    documents (``seeds_and_documents``: each drawn document brings all of its games).

    >>> base = [{"document_id": d, "game_seed": 0, "s": 0.0} for d in "abcd"]
    >>> runs = [[{**g, "s": 1.0} for g in base], [{**g, "s": 0.0} for g in base]]
    >>> out = pooled([base, base], runs, "s")
    >>> (out["games"].mean, out["games"].low, out["games"].high)
    (0.5, 0.5, 0.5)
    >>> (out["seeds_and_games"].low, out["seeds_and_games"].high)
    (0.0, 1.0)
    >>> one = [{"document_id": "a", "game_seed": s, "s": 0.0} for s in range(4)]  # four games of one document
    >>> gains = [[{**g, "s": float(i < 2)} for i, g in enumerate(one)]]
    >>> both = pooled([one], gains, "s")
    >>> (both["seeds_and_games"].low < 0.5 < both["seeds_and_games"].high, both["seeds_and_documents"].low)
    (True, 0.5)
    """
    for run, base in zip(seeds, bases, strict=True):
        paired_difference(run, base, score)  # the same games, in the same order: raises where not
    gains = np.asarray(
        [[g[score] - b[score] for g, b in zip(run, base, strict=True)] for run, base in zip(seeds, bases, strict=True)]
    )  # (seeds, games)
    estimate = float(gains.mean())
    per_game = gains.mean(axis=0)
    over_games = resample_counts(per_game.size, resamples=resamples, seed=seed) @ per_game / per_game.size
    seed_counts = resample_counts(len(seeds), resamples=resamples, seed=seed + 1)
    game_counts = resample_counts(per_game.size, resamples=resamples, seed=seed + 2)
    both = (seed_counts @ gains * game_counts).sum(axis=1) / (len(seeds) * per_game.size)
    documents = sorted({g["document_id"] for g in seeds[0]})
    member = np.asarray(
        [[g["document_id"] == d for d in documents] for g in seeds[0]], dtype=np.float64
    )  # (games, docs)
    document_counts = resample_counts(len(documents), resamples=resamples, seed=seed + 3)
    by_document = (seed_counts @ gains @ member * document_counts).sum(axis=1)
    clustered = by_document / (len(seeds) * (document_counts @ member.sum(axis=0)))
    return {
        "games": percentile_interval(estimate, over_games, per_game.size),
        "seeds_and_games": percentile_interval(estimate, both, per_game.size),
        "seeds_and_documents": percentile_interval(estimate, clustered, len(documents)),
    }


def redrawn_lows(
    bases: Sequence[Sequence[Mapping[str, Any]]],
    seeds: Sequence[Sequence[Mapping[str, Any]]],
    score: str,
    redraws: int,
) -> float:
    """The share of ``redraws`` bootstrap seeds (1, 2, ...) whose two-level interval's lower bound is at or below 0."""
    lows = [pooled(bases, seeds, score, seed=1000 * (r + 1))["seeds_and_games"].low for r in range(redraws)]
    return float(np.mean([low <= 0 for low in lows]))


def summary(
    bases: Sequence[Sequence[Mapping[str, Any]]],
    seeds: Sequence[Sequence[Mapping[str, Any]]],
    scores: Sequence[str],
    redraws: int = 0,
) -> dict[str, Any]:
    """Per score: the bases' mean, each seed's paired difference from its base, how many lie above 0, the three
    pooled intervals and, with ``redraws``, the share of re-drawn bootstrap seeds that put the two-level lower
    bound at or below 0."""
    out: dict[str, Any] = {}
    for score in scores:
        each = [paired_difference(run, base, score) for run, base in zip(seeds, bases, strict=True)]
        out[score] = {
            "base": bootstrap(
                [float(np.mean([b[score] for b in game])) for game in zip(*bases, strict=True)]
            ).to_dict(),
            "per_seed": [d.to_dict() for d in each],
            "seeds_above_zero": sum(d.low > 0 for d in each),
            **{name: interval.to_dict() for name, interval in pooled(bases, seeds, score).items()},
        }
        if redraws:
            out[score]["redraws"] = {"n": redraws, "low_at_or_below_zero": redrawn_lows(bases, seeds, score, redraws)}
    return out


def _cell(d: Mapping[str, float]) -> str:
    return f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def _table(scores: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = [
        "| score | base | per seed, paired | seeds above 0 | pooled over games | pooled over seeds and games "
        "| pooled over seeds and documents | redrawn lows <= 0 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for score, s in scores.items():
        each = ", ".join(_cell(d) for d in s["per_seed"])
        redrawn = f"{s['redraws']['low_at_or_below_zero']:.2f} of {s['redraws']['n']}" if "redraws" in s else "—"
        lines.append(
            f"| {score} | {s['base']['mean']:.3f} | {each} | {s['seeds_above_zero']} of {len(s['per_seed'])} | "
            f"{_cell(s['games'])} | {_cell(s['seeds_and_games'])} | {_cell(s['seeds_and_documents'])} | {redrawn} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__, None, "JSON file of the pooled gains", overrides=False)
    against = parser.add_mutually_exclusive_group(required=True)
    against.add_argument("--base", help="the base model's spyrl leaderboard result file")
    against.add_argument("--references", nargs="+", help="one reference result file per seed, in the seeds' order")
    parser.add_argument("--seeds", nargs="+", required=True, help="one result file per seed, on the same games")
    parser.add_argument(
        "--redraws", type=int, default=0, help="re-draw the bootstrap this many times (seeds 1000, 2000, ...)"
    )
    args = parser.parse_args(argv)
    try:
        if args.redraws < 0:
            raise ValueError(f"--redraws must be >= 0, got {args.redraws}")
        if args.references is not None and len(args.references) != len(args.seeds):
            raise ValueError(f"{len(args.references)} references for {len(args.seeds)} seeds: give one per seed")
        bases = args.references or [args.base] * len(args.seeds)
        read = {path: games_of(read_json(path, "leaderboard result file")) for path in {*bases, *args.seeds}}
        sets = {read[path][0] for path in read}
        if len(sets) != 1:
            raise ValueError(f"the files hold different sets: {', '.join(sorted(sets))}")
        refuse_existing_outputs([args.out], overwrite=args.overwrite)
        (name,) = sets
        scores = summary([read[p][1] for p in bases], [read[p][1] for p in args.seeds], SCORES[name], args.redraws)
    except (OSError, ValueError, KeyError, TypeError) as e:
        return user_error(e if not isinstance(e, KeyError) else f"not a leaderboard result file: missing {e}")
    print("\n".join(_table(scores)))
    record = {
        "command": command_of(__file__, argv),
        "set": name,
        "base": args.base,
        "references": args.references,
        "seeds": args.seeds,
    }
    write_text(args.out, json.dumps({**record, "scores": scores}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
