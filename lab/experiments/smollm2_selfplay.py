"""Does it learn? SmolLM2-135M-Instruct trained by SpyRL on CPU, base vs trained on held-out games.

For each row (``selfplay``: the model performs and votes in every seat; ``heuristic``: scripted
performers, the model votes), this script:

1. builds a :class:`trainers.SpyRLTrainer` from the ``smollm2-selfplay`` preset (held-out documents,
   chosen by a hash of their ids, are never played in training);
2. evaluates the base model on fixed held-out games (same documents, seeds, spy seats and
   degradations at every evaluation; greedy decoding);
3. trains ``--iterations`` iterations, evaluating on the same games every ``--eval-every``;
4. reports, per evaluation, detection accuracy (greedy votes), expected accuracy (the probability
   the model's vote names the spy), spy-caught, N/A and no-answer rates with 95% bootstrap
   intervals over games, and the paired bootstrap interval of trained − base;
5. also plays ``--default-games`` games of the default setting (5 players, ``mask_spans``, full
   documents) with the base and the trained model.

Writes ``results.json`` and ``heldout_accuracy.png`` to ``--out`` (atomically). ``--quick`` runs a
few-minute version of the same pipeline (what CI runs).

    python lab/experiments/smollm2_selfplay.py --out lab/results
    python lab/experiments/smollm2_selfplay.py --quick --out /tmp/quick
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from harness import command_of, experiment_parser, user_error

from agents.hf import HFPolicy
from spy_env.config import GameConfig
from spy_env.extras import require
from spy_env.heldout import METRICS, evaluate_heldout, paired_difference, summarize
from spy_env.io import refuse_existing_folder, refuse_existing_outputs, save_figure, save_pretrained, write_text
from trainers import SpyRLConfig, SpyRLTrainer
from trainers.extras import PLOTS
from trainers.policies import learner_policy, seat_policy

ROWS = {"selfplay": {"performer": "self"}, "heuristic": {"performer": "heuristic"}}


def greedy_policy(trainer: SpyRLTrainer) -> HFPolicy:
    """The trainer's current model, decoding greedily with the training decoding options."""
    return learner_policy(
        trainer.config.decoding, trainer.config.rollout, trainer.unwrapped, trainer.tokenizer, greedy=True
    )


def evaluate(trainer: SpyRLTrainer, games: int, seed: int, config: GameConfig | None = None) -> list[dict]:
    """Per-game metrics of the trainer's current model on the fixed held-out games."""
    trainer.model.eval()
    config = config or trainer.config.game
    seat = seat_policy(trainer.config.rollout, trainer.config.run.seed, greedy_policy(trainer))
    _, per_game = evaluate_heldout([seat] * config.rules.n_players, config, trainer.eval_documents, games, seed=seed)
    return per_game


def run_row(name: str, args: argparse.Namespace) -> dict[str, Any]:
    overrides = {**ROWS[name], "output_dir": str(Path(args.runs) / name)}
    if args.iterations is not None:
        overrides["iterations"] = args.iterations
    if args.quick:
        overrides.update(documents_per_iteration=2, games_per_document=2, progress=False)
    config = SpyRLConfig.preset("smollm2-selfplay", **overrides).with_overrides(args.set)
    start = time.perf_counter()
    trainer = SpyRLTrainer(config)
    default = GameConfig.from_dict(
        {"n_players": 5, "degrade": "mask_spans", "train_spy_vote": config.game.rules.train_spy_vote}
    )
    logging.info("[%s] base model: %d held-out documents, %d games", name, len(trainer.eval_documents), args.eval_games)
    evaluations = [{"iteration": 0, "games": evaluate(trainer, args.eval_games, args.seed)}]
    base_default = evaluate(trainer, args.default_games, args.seed, default) if args.default_games else []
    history = []
    for _ in range(config.run.iterations):
        metrics = trainer.train_iteration()
        history.append({k: v for k, v in metrics.items() if isinstance(v, (int, float, str))})
        logging.info(
            "[%s] iteration %d: sampled acc %.3f, ratio %.3f, grad norm %.2f",
            name,
            trainer.iteration,
            metrics["env/detection_accuracy"],
            metrics.get("losses/ratio", float("nan")),
            metrics.get("losses/grad_norm", float("nan")),
        )
        if trainer.iteration % args.eval_every == 0 or trainer.iteration == config.run.iterations:
            evaluations.append({"iteration": trainer.iteration, "games": evaluate(trainer, args.eval_games, args.seed)})
            logging.info("[%s] held-out %s", name, _line(summarize(evaluations[-1]["games"])))
    trained_default = evaluate(trainer, args.default_games, args.seed, default) if args.default_games else []
    base, final = evaluations[0]["games"], evaluations[-1]["games"]
    out = {
        "row": name,
        "config": config.to_dict(),
        "heldout_documents": [d.id for d in trainer.eval_documents],
        "minutes": (time.perf_counter() - start) / 60,
        "evaluations": [
            {"iteration": e["iteration"], **{m: i.to_dict() for m, i in summarize(e["games"]).items()}}
            for e in evaluations
        ],
        "difference": {m: paired_difference(final, base, m).to_dict() for m in METRICS},
        "per_game": {"base": base, "trained": final},
        "training": history,
    }
    if args.default_games:
        out["default_setting"] = {
            "base": {m: i.to_dict() for m, i in summarize(base_default).items()},
            "trained": {m: i.to_dict() for m, i in summarize(trained_default).items()},
            "difference": {m: paired_difference(trained_default, base_default, m).to_dict() for m in METRICS},
        }
    if args.save_model:
        save_pretrained(Path(args.save_model) / name, trainer.unwrapped, trainer.tokenizer, overwrite=args.overwrite)
    return out


def _line(summary: dict) -> str:
    return ", ".join(f"{m} {summary[m]}" for m in ("detection_accuracy", "expected_accuracy", "na_rate"))


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, metric, title in (
        (axes[0], "expected_accuracy", "expected accuracy (P(vote = spy))"),
        (axes[1], "detection_accuracy", "detection accuracy (greedy votes)"),
    ):
        for row in results["rows"]:
            xs = [e["iteration"] for e in row["evaluations"]]
            ys = [e[metric]["mean"] for e in row["evaluations"]]
            ax.plot(xs, ys, marker="o", label=row["row"])
            ax.fill_between(
                xs, [e[metric]["low"] for e in row["evaluations"]], [e[metric]["high"] for e in row["evaluations"]],
                alpha=0.2,
            )  # fmt: skip
        ax.axhline(0.5, color="grey", linestyle=":", linewidth=1, label="chance (3 players)")
        ax.set_title(title)
        ax.set_xlabel("training iteration (0 = base model)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out civilians, 95% bootstrap band over games")
    axes[0].legend()
    fig.suptitle("SmolLM2-135M-Instruct, SpyRL on CPU: held-out games, base vs trained")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(
        __doc__, "runs/experiment", "folder for results.json and heldout_accuracy.png",
        runs="folder of the training runs (default: OUT/runs)", quick=True,
    )  # fmt: skip
    p.add_argument("--rows", default="selfplay,heuristic", help=f"comma-separated rows: {sorted(ROWS)}")
    p.add_argument("--iterations", type=int, default=None, help="training iterations (default: the preset's)")
    p.add_argument("--eval-games", type=int, default=None, help="held-out games per evaluation")
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--default-games", type=int, default=None, help="games of the default setting (0: skip)")
    p.add_argument("--seed", type=int, default=12345, help="seed of the held-out games")
    p.add_argument(
        "--save-model", default=None, help="also save each trained model under this folder (--overwrite: a model only)"
    )
    args = p.parse_args(argv)
    defaults = (1, 4, 1, 0) if args.quick else (None, 32, 1, 8)  # iterations None: the preset's
    for name, value in zip(("iterations", "eval_games", "eval_every", "default_games"), defaults, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, value)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = set(rows) - set(ROWS)
    if unknown or not rows:
        return user_error(f"--rows must name rows among {sorted(ROWS)}, got {args.rows!r}")
    out = Path(args.out)
    args.runs = args.runs or str(out / "runs")
    models = [Path(args.save_model) / name for name in rows] if args.save_model else []
    try:  # before hours of training, not after
        require([PLOTS])  # the chart is drawn after the training
        refuse_existing_outputs([out / "results.json", out / "heldout_accuracy.png"], overwrite=args.overwrite)
        for model in models:  # --overwrite replaces a model saved before, never another folder
            refuse_existing_folder(model, overwrite=args.overwrite, what="--save-model folder")
    except (ImportError, ValueError) as e:
        return user_error(e)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    start = time.perf_counter()
    try:
        results = {
            "command": command_of(__file__, argv),
            "rows": [],
        }
        for name in rows:
            results["rows"].append(run_row(name, args))
    except ValueError as e:
        return user_error(e)
    results["minutes"] = (time.perf_counter() - start) / 60
    write_text(out / "results.json", json.dumps(results, indent=1, default=float) + "\n")  # atomic, no link followed
    plot(results, out / "heldout_accuracy.png")
    for row in results["rows"]:
        base, final = row["evaluations"][0], row["evaluations"][-1]
        for metric in ("expected_accuracy", "detection_accuracy"):
            d = row["difference"][metric]
            print(
                f"{row['row']}: {metric} {base[metric]['mean']:.3f} -> {final[metric]['mean']:.3f}, "
                f"trained - base {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] over {d['n']} games"
            )
    print(f"wrote {out / 'results.json'} and {out / 'heldout_accuracy.png'} in {results['minutes']:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
