"""``spyrl plot RUN_DIR``: training curves from ``metrics.jsonl`` as one PNG.

The run folder may come from someone else: its ``metrics.jsonl`` is read only when it is a regular file
in it (:func:`spy_env.io.folder_file`; a FIFO, a device or a link is refused before it is opened), a
line at a time, each at most :data:`MAX_METRICS_LINE_BYTES`, and only the values the curves draw are kept.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from spy_env.io import folder_file, parse_json, read_lines, save_figure
from spy_env.stage import Stage
from trainers.metrics import strongest_rule

__all__ = ["plot_run"]

PANELS = [
    ("detection", ["env/detection_accuracy", "env/na_rate", "env/spy_caught_rate", "eval/detection_accuracy"]),
    ("rewards", ["env/reward/civilian_perform", "env/reward/spy_perform", "env/reward/civilian_vote"]),
    ("loss", ["losses/loss"]),
    ("KL · clip · entropy", ["losses/kl", "losses/clip_fraction", "losses/entropy"]),
    ("violations", ["env/violation_rate", "env/forfeit_rate"]),
    ("throughput (tokens/s)", ["perf/rollout_tokens_per_s", "perf/update_tokens_per_s"]),
]
# Bytes of one metrics row (a row of a run is a few kilobytes).
MAX_METRICS_LINE_BYTES = 1 << 20
_DRAWN = frozenset({"iteration", "stage"} | {key for _, keys in PANELS for key in keys})


def plot_run(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> Path:
    """Draw the standard curves of a run; shaded backgrounds mark performing-stage iterations. The detection
    panel also draws the strongest rule baseline on the same games (dashed: ``env/rule_*_accuracy``, and
    ``eval/rule_*`` for the held-out games), the line a voter's accuracy is read against."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in _metrics_rows(run_dir) if isinstance(r.get("iteration"), (int, float))]
    if not rows:
        raise ValueError(f"{run_dir} has no metrics rows (with an iteration) yet")
    out = Path(out) if out else Path(run_dir) / "curves.png"
    steps = [r["iteration"] for r in rows]
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    for ax, (title, keys) in zip(axes.flat, PANELS, strict=True):
        for step, row in zip(steps, rows, strict=True):
            if row.get("stage") == Stage.PERFORM.schedule_name:
                ax.axvspan(step - 0.5, step + 0.5, color="tab:orange", alpha=0.08, lw=0)
        for key in keys:
            points = [(s, r[key]) for s, r in zip(steps, rows, strict=True) if isinstance(r.get(key), (int, float))]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, marker="o", ms=3, label=key.split("/", 1)[-1])
        if title == "detection":
            for prefix, label in (("env/", "strongest rule, same games"), ("eval/", "strongest rule, held-out")):
                strongest = [(s, strongest_rule(r, prefix)) for s, r in zip(steps, rows, strict=True)]
                points = [(s, v) for s, v in strongest if not math.isnan(v)]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, linestyle="--", color="gray", label=label)
        ax.set_title(title)
        ax.set_xlabel("iteration")
        if ax.lines:
            ax.legend(fontsize=7)
    fig.suptitle(f"spyrl run {Path(run_dir).name} (shaded: performing stage)")
    fig.tight_layout()
    return save_figure(fig, out, dpi=90)


def _metrics_rows(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The values the curves draw of each row of ``run_dir/metrics.jsonl``, read a line at a time."""
    path = folder_file(run_dir, "metrics.jsonl")
    if path is None:
        raise ValueError(f"{str(run_dir)!r} has no metrics.jsonl")
    rows = []
    for number, line in read_lines(path, "metrics file", max_line_bytes=MAX_METRICS_LINE_BYTES):
        row = parse_json(line, f"{str(path)!r}: line {number}")
        if not isinstance(row, dict):
            raise ValueError(f"{str(path)!r}: line {number} is not a metrics object")
        rows.append({k: v for k, v in row.items() if k in _DRAWN or k.startswith(("env/rule_", "eval/rule_"))})
    return rows
