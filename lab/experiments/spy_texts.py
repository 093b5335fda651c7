"""What the spy's texts on spy-v1 do: survival with and without the game's violations, and how it survives.

Reads ``spyrl leaderboard spy`` result files (one model each, the same games) and, per model:

- ``survival_rate``: the leaderboard's score, the share of games its spy was not voted out;
- ``clean_survival_rate``: the same with a performance that broke a rule of the game (a verbatim copy
  of at least ``copy_min_words`` words of its copy, a missing answer, …; the item's ``violations``)
  counted as caught. spy-v1's detectors read only numbers and terms, so a spy that pastes its copy
  looks like a civilian to them; the game itself penalises the paste (``penalty_copy``);
- ``violation_rate``, ``quotes_source_rate`` (the text reproduces the copy's ``<document>`` wrapper or
  calls itself "the source text") and the survival of texts with and without any number;

each with a 95% bootstrap interval over games, and paired with the first file on the same games.

    python lab/experiments/spy_texts.py lab/results/selfplay/attempt8/leaderboard/spy-v1-{smollm2,attempt8-spy-reference,attempt8-spy-soft}.json --out lab/results/selfplay/attempt8/spy_texts.json
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import command_of, experiment_parser, user_error

from agents.scripted import numbers_in
from spy_env.heldout import bootstrap, paired_difference
from spy_env.io import refuse_existing_outputs, write_text
from spyrl.evaluation.leaderboard import item_score

SET = "spy-v1"
SCORES = ("survival_rate", "clean_survival_rate", "violation_rate", "quotes_source_rate")


def _quotes_source(text: str) -> bool:
    lowered = text.lower()
    return "<document>" in lowered or "source text" in lowered


def per_game(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One leaderboard item per game → its scores (:data:`SCORES`) and whether the text names a number.

    >>> item = {"document_id": "d", "game_seed": 1, "survival_rate": 1.0, "violations": ["verbatim_copy"],
    ...         "completion": "The source text: <document> 3 apples"}
    >>> [per_game([item])[0][k] for k in (*SCORES, "has_numbers")]
    [1.0, 0.0, 1.0, 1.0, True]
    """
    out = []
    for item in items:
        violated = bool(item.get("violations"))
        text = str(item.get("completion") or "")
        out.append(
            {
                "document_id": item["document_id"],
                "game_seed": item["game_seed"],
                "survival_rate": float(item["survival_rate"]),
                "clean_survival_rate": item_score(item, "clean_survival_rate"),
                "violation_rate": float(violated),
                "quotes_source_rate": float(_quotes_source(text)),
                "has_numbers": bool(numbers_in(text)),
            }
        )
    return out


def summary(games: Sequence[Mapping[str, Any]], first: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """Each score's mean [95%] (and, given ``first``, its paired difference), and the survival of the texts
    with and without numbers."""
    out: dict[str, Any] = {}
    for score in SCORES:
        out[score] = bootstrap([g[score] for g in games]).to_dict()
        if first is not None:
            out[score]["difference"] = paired_difference(games, first, score).to_dict()
    for has, name in ((True, "with_numbers"), (False, "without_numbers")):
        survived = [g["survival_rate"] for g in games if g["has_numbers"] is has]
        out[f"survival_{name}"] = bootstrap(survived).to_dict()
    return out


def _row(name: str, s: Mapping[str, Any]) -> str:
    def cell(score: str) -> str:
        v = s[score]
        shown = f"{v['mean']:.3f} [{v['low']:.3f}, {v['high']:.3f}]"
        d = v.get("difference")
        return shown if d is None else f"{shown} ({d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}])"

    numbers = s["survival_with_numbers"], s["survival_without_numbers"]
    split = " / ".join("—" if math.isnan(v["mean"]) else f"{v['mean']:.2f} ({v['n']})" for v in numbers)
    return f"| {name} | " + " | ".join(cell(score) for score in SCORES) + f" | {split} |"


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__, None, "JSON file of the summaries", overrides=False)
    parser.add_argument("results", nargs="+", help="spyrl leaderboard spy result files; the first is the reference")
    args = parser.parse_args(argv)
    try:
        runs = [json.loads(Path(path).read_text(encoding="utf-8")) for path in args.results]
        games = [per_game(run["results"][SET]["items"]) for run in runs]
        refuse_existing_outputs([args.out], overwrite=args.overwrite)
        rows = [
            {"file": Path(path).name, "model": run["model"], **summary(g, games[0] if i else None)}
            for i, (path, run, g) in enumerate(zip(args.results, runs, games, strict=True))
        ]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return user_error(e if not isinstance(e, KeyError) else f"not a spy-v1 result file: missing {e}")
    header = "| result file | " + " | ".join(SCORES) + " | survival: texts with / without numbers (n) |"
    print("\n".join([header, "|" + "---|" * (len(SCORES) + 2), *(_row(r["file"], r) for r in rows)]))
    command = command_of(__file__, argv)
    write_text(args.out, json.dumps({"command": command, "set": SET, "models": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
