"""How alike are a run's civilian performances, and how far from them is the spy's? Read from its kept games.

A vote can find the spy by comparing texts only where the civilians' texts resemble each other more than
they resemble the spy's: heuristic performers write one civilian text character for character, a model
sampling at temperature 1 writes four different ones. This script measures that on a run's kept training
games (``run.keep_buffers``), first round, per game:

- ``civilian_likeness``: the mean similarity of the civilians' performances, pair by pair;
- ``spy_likeness``: the mean similarity of the spy's performance to each civilian's;
- ``gap``: the two's difference (0: the spy's text is as far from a civilian's as another civilian's is);
- ``distinct_civilian_texts``: how many different civilian texts the game has (1: they are one text);
- ``least_alike_is_spy``: 1 when the performance least similar to the others, on average, is the spy's
  (ties share the point): the comparison a voter would make, scored as a rule.

Similarity is :class:`difflib.SequenceMatcher`'s ratio over characters (no junk heuristic): 1 for equal
texts, 0 for texts with nothing in common. Intervals resample games. Nothing is generated or trained; the
texts are the run's.

    python lab/experiments/text_likeness.py runs/attempt15/phase_v/detect-only --iterations 1-32 \\
        --iterations 161-192 --out likeness.json
"""

from __future__ import annotations

import difflib
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from harness import command_of, experiment_parser, user_error
from seat_probe import add_iteration_ranges, iteration_range, played_games

from spy_env.heldout import bootstrap
from spy_env.io import refuse_existing_outputs, write_text

METRICS = ("civilian_likeness", "spy_likeness", "gap", "distinct_civilian_texts", "least_alike_is_spy")


def similarity(a: str, b: str) -> float:
    """The share of characters the two texts have in common, in matching order.

    >>> similarity("abcd", "abcd"), similarity("abcd", "abxy"), similarity("ab", "cd")
    (1.0, 0.5, 0.0)
    """
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def game_likeness(texts: dict[int, str], spy: int) -> dict[str, float]:
    """A game's metrics (the module docstring) from its performances by seat and its spy seat.

    >>> m = game_likeness({0: "abcd", 1: "abcd", 2: "abcd", 3: "wxyz"}, spy=3)
    >>> m["civilian_likeness"], m["spy_likeness"], m["gap"], m["distinct_civilian_texts"], m["least_alike_is_spy"]
    (1.0, 0.0, 1.0, 1.0, 1.0)
    """
    seats = sorted(texts)
    pair = {(a, b): similarity(texts[a], texts[b]) for a, b in itertools.combinations(seats, 2)}
    pair.update({(b, a): value for (a, b), value in list(pair.items())})
    civilians = [s for s in seats if s != spy]
    civilian = float(np.mean([pair[a, b] for a, b in itertools.combinations(civilians, 2)]))
    spy_side = float(np.mean([pair[spy, c] for c in civilians]))
    alike = {s: np.mean([pair[s, o] for o in seats if o != s]) for s in seats}
    least = [s for s in seats if alike[s] == min(alike.values())]
    return {
        "civilian_likeness": civilian,
        "spy_likeness": spy_side,
        "gap": civilian - spy_side,
        "distinct_civilian_texts": float(len({texts[c] for c in civilians})),
        "least_alike_is_spy": float(spy in least) / len(least),
    }


def likeness(games: list[dict[str, Any]]) -> dict[str, Any]:
    """Every metric's mean over ``games`` with an interval over games."""
    per_game = [game_likeness(g["texts"], g["spy"]) for g in games]
    return {"games": len(games), **{m: bootstrap([g[m] for g in per_game]).to_dict() for m in METRICS}}


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__, None, "JSON file to write", overrides=False)
    p.add_argument("run", help="a training run folder that kept its buffers (buffers/iter_NNNNN.parquet)")
    add_iteration_ranges(p)
    args = p.parse_args(argv)
    try:
        ranges = [iteration_range(text) for text in args.iterations]
        refuse_existing_outputs([args.out], overwrite=args.overwrite)
        games = {f"{a}-{b}": played_games(Path(args.run), a, b) for a, b in ranges}
    except ValueError as e:
        return user_error(e)
    result: dict[str, Any] = {"command": command_of(__file__, argv), "run": args.run, "ranges": {}}
    for name, played in games.items():
        row = result["ranges"][name] = likeness(played)
        print(f"{name}: " + ", ".join(f"{m} {row[m]['mean']:.3f}" for m in METRICS), flush=True)
    write_text(Path(args.out), json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
