"""Curves of ``lab/experiments/vote_fit.py`` results: the check set's expected accuracy q(spy) against the votes
fitted so far and against the minutes since the run started, one line per result, its 95% interval shaded.

Each result gives its points in order: before any step, every ``--check-every`` steps (its ``curve``) and
at the end of every epoch (partial when ``--max-minutes`` ended it). Runs that shared a machine have
inflated minutes; the votes axis does not depend on it.

    python lab/experiments/vote_fit_plot.py lab/results/vote_fit/gpu/default_*.json --out lab/results/vote_fit/gpu/curves.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness import user_error


def points(result: dict[str, Any]) -> list[tuple[int, float, dict[str, float]]]:
    """(votes fitted, minutes, the check set's expected accuracy) in the order the run measured them."""
    per_epoch = result["votes"]["fit"]
    out = []
    for epoch in result["epochs"]:
        votes = epoch.get("votes_seen", epoch["epoch"] * per_epoch)  # older results: whole epochs only
        out.append((votes or 0, epoch["minutes"], epoch["check"]["expected"]))
    out += [(c["votes"], c["minutes"], c["check"]["expected"]) for c in result.get("curve", [])]
    return sorted({p[0]: p for p in out}.values(), key=lambda p: p[0])  # an epoch's end may repeat a curve point


def label(path: Path, result: dict[str, Any]) -> str:
    update = result["update"]
    layers = f"last {update['top_layers']} blocks" if update.get("top_layers") else "every weight"
    return f"{path.stem}: {result['setting']['name']}, {result['votes']['fit']} votes, lr {update['lr']:g}, {layers}"


def plot(results: list[tuple[Path, dict[str, Any]]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from spy_env.io import save_figure

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for path, result in results:
        curve = points(result)
        for ax, x in zip(axes, ([p[0] for p in curve], [p[1] for p in curve]), strict=True):
            mean = [p[2]["mean"] for p in curve]
            (line,) = ax.plot(x, mean, marker="o", markersize=3, label=label(path, result))
            ax.fill_between(x, [p[2]["low"] for p in curve], [p[2]["high"] for p in curve], alpha=0.15,
                            color=line.get_color())  # fmt: skip
    chance = min(r["chance"] for _, r in results)
    for ax, name in zip(
        axes, ("civilian votes fitted", "minutes since the start (shared machines: inflated)"), strict=True
    ):
        ax.axhline(chance, color="grey", linestyle=":", label=f"chance {chance:.2f}" if ax is axes[0] else None)
        ax.set_xlabel(name)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("check set (other documents): expected accuracy q(spy)")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle("vote_fit.py: the spy's seat fitted from labels, scored on games of other training documents")
    fig.tight_layout()
    return save_figure(fig, out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    p.add_argument("results", nargs="+", help="vote_fit.py results (JSON)")
    p.add_argument("--out", required=True, help="the PNG (written atomically; never overwritten)")
    args = p.parse_args(argv)
    from spy_env.extras import require
    from trainers.extras import PLOTS

    out = Path(args.out)
    if out.exists():
        return user_error(f"{out} exists: results are never overwritten")
    try:
        require([PLOTS])
        results = [(Path(f), json.loads(Path(f).read_text(encoding="utf-8"))) for f in args.results]
        plot(results, out)
    except (ImportError, OSError, ValueError) as e:
        return user_error(e)
    except (KeyError, TypeError) as e:
        return user_error(f"not a vote_fit.py result: missing {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
