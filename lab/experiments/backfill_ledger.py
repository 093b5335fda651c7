"""The lab's looks from before the evaluation ledger existed, read back from its committed results.

Every committed summary under ``lab/results/`` that records a scoring of a model on an evaluation set becomes one
ledger line (``spy_env.ledger``) marked ``"backfilled"`` with the file it came from, dated by the file's first
commit (``git log --follow``):

- a ``spyrl leaderboard`` result file (``results`` holds ``spy-v1`` / ``detect-v1``): one look at that set;
- a ``selfplay_stages.py`` summary: the base model's and every row's final model's looks at spy-v1 (``spy``),
  the held-out games (``detect``) and detect-v1 (``detect_v1``); the panel replays the same spy texts, so it is
  not another look;
- a ``vote_gradients.py`` / ``smollm2_selfplay.py`` summary: every held-out evaluation of every row, the curve's
  points included (each scored the held-out games again).

Probes of training games (``selfplay_probe.json``, ``vote_curve.json``, ...) and rule baselines (no trained model)
are not looks. The lines are written in time order; the lab's later looks are appended by the scorings themselves.

    python lab/experiments/backfill_ledger.py --out lab/ledger.jsonl
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness import experiment_parser, user_error

from spy_env.io import refuse_existing_outputs, write_text
from spy_env.ledger import LedgerEntry, headline, recipe_hash
from spyrl.evaluation.leaderboard import RELEASED_SHA256

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "lab" / "results"
# selfplay_stages.py's evaluation keys: the set each scores and its headline metric
STAGES = {
    "spy": ("spy-v1", "survival_rate"),
    "detect": ("heldout", "expected_accuracy"),
    "detect_v1": ("detect-v1", "detection_accuracy"),
}
BASE = "smollm2 (base)"


def first_commit(path: Path) -> str | None:
    """When ``path`` entered the repository (ISO 8601), following renames; None when git does not know it."""
    argv = ["git", "log", "--follow", "--diff-filter=A", "--format=%cI", "--", str(path.relative_to(ROOT))]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False).stdout.split()
    return out[-1] if out else None


def looks_of(data: Mapping[str, Any], folder: str) -> Iterator[tuple[str, str, str, Mapping[str, Any], Any]]:
    """``(set, model, metric, interval, training config or None)`` for every look a committed summary records."""
    results = data.get("results")
    if isinstance(results, Mapping) and "model" in data and all(re.fullmatch(r"(spy|detect)-v\d+", k) for k in results):
        for name, body in results.items():
            metric = (data.get("protocol") or {}).get("score") or (
                "survival_rate" if name[:3] == "spy" else "detection_accuracy"
            )
            yield (
                name,
                data["model"],
                metric,
                {**body.get("interval", {}), "mean": body["accuracy"], "n": body["n"]},
                None,
            )
        return
    rows, base = data.get("rows"), data.get("base")
    if isinstance(rows, list) and isinstance(base, Mapping) and STAGES.keys() & base.keys():
        start = next((r["init_model"] for r in rows if r.get("init_model")), None) or BASE
        for key, (name, metric) in STAGES.items():
            if key in base:
                yield name, start, metric, base[key][metric], None
        for row in rows:
            for key, (name, metric) in STAGES.items():
                if key in (row.get("trained") or {}):
                    yield name, f"{folder}:{row['row']}", metric, row["trained"][key][metric], row.get("config")
        return
    if isinstance(rows, list) and rows and all(isinstance(r, Mapping) and "evaluations" in r for r in rows):
        for row in rows:
            for ev in row["evaluations"] if isinstance(row["evaluations"], list) else []:
                first = ev.get("iteration") == 0
                model = BASE if first else f"{folder}:{row['row']}@{ev.get('votes', ev.get('iteration'))}"
                yield (
                    "heldout",
                    model,
                    "expected_accuracy",
                    ev["expected_accuracy"],
                    None if first else row.get("config"),
                )


def entries(*, dated: bool = True) -> list[dict[str, Any]]:
    """Every backfilled look, in time order (``dated=False``: no git, ``time`` null, in file order)."""
    out = []
    for path in sorted(RESULTS.rglob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, Mapping):
            continue
        command = shlex.split(data["command"]) if isinstance(data.get("command"), str) else None
        when = first_commit(path) if dated else None
        for name, model, metric, interval, config in looks_of(data, path.parent.name):
            result = headline(
                metric,
                interval["mean"],
                interval.get("low", float("nan")),
                interval.get("high", float("nan")),
                interval.get("n", 0),
            )
            recipe = recipe_hash(config if config is not None else model)
            entry = LedgerEntry(name, RELEASED_SHA256.get(name, ""), model, recipe, result, command, None, when or "")
            out.append({**entry.to_dict(), "backfilled": str(path.relative_to(ROOT))})
    return sorted(out, key=lambda e: e["time"]) if dated else out


def main(argv: list[str] | None = None) -> int:
    args = experiment_parser(__doc__, None, "the ledger file to write (JSONL)", overrides=False).parse_args(argv)
    try:
        refuse_existing_outputs([args.out], overwrite=args.overwrite)
        looks = entries()
    except (OSError, ValueError, KeyError) as e:
        return user_error(e)
    write_text(args.out, "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in looks))
    counts = Counter(e["set"] for e in looks)
    print(
        f"{len(looks)} looks from {len({e['backfilled'] for e in looks})} files: "
        + ", ".join(f"{name} {n}" for name, n in counts.most_common())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
