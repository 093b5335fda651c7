"""Does the trainer teach SmolLM2-135M to catch the spy? Three vote gradients at equal vote budgets.

Every row trains the same base model with :class:`trainers.SpyRLTrainer` (the ``smollm2-selfplay``
preset: 3 players, ``blank`` spy copy, 600-character documents, heuristic performers, constrained
votes played in one forward pass, the last 12 blocks at lr 5e-5, one on-policy update of 8 civilian
votes an iteration) on the same training games (same seeds: same documents, spy seats and
performances), for the same number of iterations, so the same number of trained votes:

- ``expected``: ``vote_gradient=expected``, the exact expectation over the legal seats of the
  sampled estimator (not the paper's estimator: it scores the choices not taken);
- ``sampled``: ``vote_gradient=sampled``, the paper's estimator (one sampled vote, its clipped
  surrogate), rewards normalised over the iteration's votes;
- ``supervised``: ``−log q(spy)``, what the labels alone teach at the same learning rate (a reference);
- ``sampled-game``: ``sampled`` with the paper preset's grouping, Eq. 5 within each game's voters
  (two civilians here: a game whose voters agree gives no gradient).

Held-out evaluation: fixed games on the held-out documents (never trained on: a hash of the
document id), greedy votes, the base model once and each row every ``--eval-every`` iterations;
expected accuracy (the probability the vote names the spy) and greedy detection accuracy with 95%
bootstrap intervals over games, and the paired bootstrap interval of trained − base. The
final model of every row also plays ``--default-games`` games of the default setting (5
players, ``mask_spans``, full documents), paired with the base model; the ``expected`` row's can be
saved (``--save-model``) for ``spyrl leaderboard`` and ``spyrl tournament``. ``--init-model`` continues training
from such a folder while the base evaluation stays the preset's model, so a continued run's gains
are still paired with the untrained model on the same games.

Writes ``vote_gradients.json`` and ``vote_gradients.png`` to ``--out`` (atomically).

    python lab/experiments/vote_gradients.py --out lab/results --save-model /tmp/smollm2-trained
    python lab/experiments/vote_gradients.py --quick --out /tmp/quick      # a few minutes: what CI runs
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

from spy_env.config import GameConfig
from spy_env.extras import require
from spy_env.heldout import METRICS, evaluate_heldout, paired_difference, summarize
from spy_env.io import refuse_existing_folder, refuse_existing_outputs, save_figure, save_pretrained, write_text
from spy_env.prompts import VOTE_OWN_FIRST
from trainers import SpyRLConfig, SpyRLTrainer
from trainers.documents import training_documents
from trainers.extras import PLOTS
from trainers.policies import learner_policy, seat_policy

ROWS: dict[str, dict[str, Any]] = {
    "expected": {"vote_gradient": "expected"},
    "sampled": {"vote_gradient": "sampled"},
    "supervised": {"vote_gradient": "supervised"},
    "sampled-game": {"vote_gradient": "sampled", "detect_advantage_groups": "game"},
}
SHOWN = ("expected_accuracy", "detection_accuracy")
VOTE_PROMPTS = {"default": {}, "own-first": {"vote": VOTE_OWN_FIRST}}  # --vote-prompt: game.prompts


def evaluate(trainer: SpyRLTrainer, games: int, seed: int, config: GameConfig | None = None) -> list[dict]:
    """Per-game metrics of the trainer's current model (greedy votes) on the fixed held-out games."""
    trainer.model.eval()
    config = config or trainer.config.game
    policy = learner_policy(
        trainer.config.decoding, trainer.config.rollout, trainer.unwrapped, trainer.tokenizer, greedy=True
    )
    seats = [seat_policy(trainer.config.rollout, trainer.config.run.seed, policy)] * config.rules.n_players
    documents = trainer.eval_documents
    if config.limits.max_document_chars != trainer.config.game.limits.max_document_chars:
        # the same held-out documents, truncated as this game truncates them (full ones in the default game)
        documents = training_documents(config, trainer.config.run.heldout_fraction, 1)[1]
    return evaluate_heldout(seats, config, documents, games, seed=seed)[1]


def summary(games: list[dict], base: list[dict] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {m: i.to_dict() for m, i in summarize(games).items()}
    if base is not None:
        out["difference"] = {m: paired_difference(games, base, m).to_dict() for m in METRICS}
    return out


def row_config(name: str, args: argparse.Namespace, iterations: int) -> SpyRLConfig:
    overrides = {**ROWS[name], "performer": "heuristic", "output_dir": str(Path(args.runs) / name), "progress": False}
    overrides.update({"keep_buffers": False, "iterations": iterations, "game.prompts": VOTE_PROMPTS[args.vote_prompt]})
    if args.quick:
        overrides.update(documents_per_iteration=1)
    return SpyRLConfig.preset("smollm2-selfplay", **overrides).with_overrides(args.set)


def run_row(
    name: str, iterations: int, args: argparse.Namespace, base: dict[str, Any] | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train one row, evaluating on the held-out games; returns the row and the base evaluation (made once)."""
    config = row_config(name, args, iterations)
    start = time.perf_counter()
    trainer = None
    if base is None:  # the same base model on the same fixed games: evaluated once for every row
        trainer = SpyRLTrainer(config)
        logging.info("base model: %d held-out documents, %d games", len(trainer.eval_documents), args.eval_games)
        base = {"games": evaluate(trainer, args.eval_games, args.seed), "default": []}
        if args.default_games:
            base["default"] = evaluate(trainer, args.default_games, args.seed, default_setting(config.game))
        base["minutes"] = (time.perf_counter() - start) / 60
        start = time.perf_counter()
    if args.init_model or trainer is None:  # training starts from --init-model; gains stay against the base
        del trainer
        trainer = SpyRLTrainer(
            config.with_overrides([f"model.name_or_path={args.init_model}"] if args.init_model else [])
        )
    evaluations = [{"iteration": 0, "votes": 0, **summary(base["games"])}]
    history, votes, final = [], 0, base["games"]
    for _ in range(config.run.iterations):
        metrics = trainer.train_iteration()
        votes += int(metrics.get("samples/count", 0))
        history.append({k: v for k, v in metrics.items() if isinstance(v, (int, float, str))})
        logging.info(
            "[%s] iteration %d, %d votes: sampled acc %.3f, grad norm %.2f",
            name, trainer.iteration, votes, metrics["env/detection_accuracy"], metrics.get("losses/grad_norm", float("nan")),
        )  # fmt: skip
        if trainer.iteration % args.eval_every == 0 or trainer.iteration == config.run.iterations:
            final = evaluate(trainer, args.eval_games, args.seed)
            evaluations.append({"iteration": trainer.iteration, "votes": votes, **summary(final, base["games"])})
            logging.info("[%s] held-out %s", name, _line(evaluations[-1]))
    row: dict[str, Any] = {
        "row": name,
        "overrides": ROWS[name],
        "init_model": args.init_model,
        "config": config.to_dict(),
        "heldout_documents": [d.id for d in trainer.eval_documents],
        "votes_trained": votes,
        "evaluations": evaluations,
        "difference": evaluations[-1].get("difference", {}),
        "per_game": {"trained": final},
        "training": history,
    }
    if args.default_games:
        trained = evaluate(trainer, args.default_games, args.seed, default_setting(config.game))
        row["default_setting"] = {
            "base": summary(base["default"]),
            "trained": summary(trained, base["default"]),
            "per_game": {"trained": trained},
        }
    if name == "expected" and args.save_model:
        save_pretrained(args.save_model, trainer.unwrapped, trainer.tokenizer, overwrite=args.overwrite)
    row["minutes"] = (time.perf_counter() - start) / 60
    return row, base


def default_setting(game: GameConfig) -> GameConfig:
    """The default game (5 players, ``mask_spans``, full documents) on the same corpus as ``game``, its
    prompts as ``game``'s (the layout the model was trained with)."""
    return GameConfig.from_dict(
        {
            "n_players": 5,
            "degrade": "mask_spans",
            "train_spy_vote": game.rules.train_spy_vote,
            "prompts": dict(game.rules.prompts),
        }
    )


def _line(evaluation: dict[str, Any]) -> str:
    parts = []
    for m in SHOWN:
        d = evaluation.get("difference", {}).get(m)
        gain = f" (gain {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}])" if d else ""
        parts.append(f"{m} {evaluation[m]['mean']:.3f}{gain}")
    return ", ".join(parts)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    titles = {
        "expected_accuracy": "expected accuracy: P(vote = spy)",
        "detection_accuracy": "greedy detection accuracy",
    }
    for ax, metric in zip(axes, SHOWN, strict=True):
        for row in results["rows"]:
            xs = [e["votes"] for e in row["evaluations"]]
            ax.plot(xs, [e[metric]["mean"] for e in row["evaluations"]], marker="o", label=row["row"])
            low, high = [e[metric]["low"] for e in row["evaluations"]], [e[metric]["high"] for e in row["evaluations"]]
            ax.fill_between(xs, low, high, alpha=0.15)
        ax.axhline(0.5, color="grey", linestyle=":", linewidth=1, label="chance")
        ax.set_title(titles[metric])
        ax.set_xlabel("civilian votes trained")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("held-out civilians (95% bootstrap band over games)")
    axes[0].legend(fontsize=8)
    fig.suptitle("SmolLM2-135M-Instruct trained by spyrl's GRPO trainer on CPU: held-out games")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def parse_rows(text: str, iterations: int) -> list[tuple[str, int]] | None:
    """``"expected,sampled:10"`` → ``[("expected", iterations), ("sampled", 10)]``; None if malformed.

    >>> parse_rows("expected,sampled-game:10", 20)
    [('expected', 20), ('sampled-game', 10)]
    >>> parse_rows("nope", 20) is None, parse_rows("sampled:0", 20) is None
    (True, True)
    """
    rows = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, _, count = item.partition(":")
        if name not in ROWS or (count and (not count.isdigit() or int(count) < 1)):
            return None
        rows.append((name, int(count) if count else iterations))
    return rows or None


def parser() -> argparse.ArgumentParser:
    p = experiment_parser(
        __doc__, "runs/vote_gradients", "folder for vote_gradients.json and .png",
        runs="folder of the training runs (checkpoints)", runs_default="runs/vote_gradients", quick=True,
    )  # fmt: skip
    p.add_argument(
        "--rows", default=",".join(ROWS), help=f"comma-separated rows among {list(ROWS)}; ROW:N trains N iterations"
    )
    p.add_argument("--iterations", type=int, default=None, help="iterations per row (default: the preset's, 20)")
    p.add_argument("--eval-games", type=int, default=None, help="held-out games per evaluation (default 32)")
    p.add_argument("--eval-every", type=int, default=None, help="iterations between evaluations (default 10)")
    p.add_argument("--default-games", type=int, default=None, help="default-setting games (0: skip; default 6)")
    p.add_argument("--seed", type=int, default=12345, help="seed of the held-out games")
    p.add_argument(
        "--vote-prompt",
        choices=sorted(VOTE_PROMPTS),
        default="default",
        help="vote prompt layout of training and evaluation: the game's (default), or own-first (the voter's own "
        "performance shown first, spy_env.prompts.VOTE_OWN_FIRST)",
    )
    p.add_argument("--save-model", default=None, help="save the expected row's trained model in this folder")
    p.add_argument(
        "--init-model",
        default=None,
        help="train every row from this model (a --save-model folder) instead of the preset's; the base "
        "evaluation stays the preset's model, so every gain is against it",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    defaults = {"iterations": 2, "eval_games": 2, "eval_every": 1, "default_games": 0} if args.quick else {}
    defaults = {"iterations": 20, "eval_games": 32, "eval_every": 10, "default_games": 6, **defaults}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    rows = parse_rows(args.rows, args.iterations)
    if rows is None:
        return user_error(f"--rows must name rows among {list(ROWS)} (ROW or ROW:N), got {args.rows!r}")
    if min(args.iterations, args.eval_games, args.eval_every) < 1 or args.default_games < 0:
        return user_error("--iterations, --eval-games and --eval-every must be >= 1")
    if args.init_model and not (Path(args.init_model) / "config.json").is_file():
        return user_error(f"--init-model {args.init_model!r} is not a saved model folder (no config.json)")
    out = Path(args.out)
    outputs = [out / "vote_gradients.json", out / "vote_gradients.png"]
    try:  # before the training, not after
        require([PLOTS])  # the chart is drawn after the training
        refuse_existing_outputs(outputs, overwrite=args.overwrite)
        if args.save_model:  # --overwrite replaces a saved model only, never another folder
            refuse_existing_folder(args.save_model, overwrite=args.overwrite, what="--save-model")
    except (ImportError, ValueError) as e:
        return user_error(e)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    start = time.perf_counter()
    command = command_of(__file__, argv)
    results: dict[str, Any] = {"command": command, "rows": []}
    base = None
    try:
        for name, iterations in rows:
            row, base = run_row(name, iterations, args, base)
            results["rows"].append(row)
    except ValueError as e:
        return user_error(e)
    results["base"] = {"per_game": base["games"], "default_per_game": base["default"], "minutes": base["minutes"]}
    results["minutes"] = (time.perf_counter() - start) / 60
    write_text(out / "vote_gradients.json", json.dumps(results, indent=1, default=float) + "\n")
    plot(results, out / "vote_gradients.png")
    for row in results["rows"]:
        print(f"{row['row']} ({row['votes_trained']} votes, {row['minutes']:.1f} min): {_line(row['evaluations'][-1])}")
        if "default_setting" in row:
            print(f"{row['row']} on the default setting: {_line(row['default_setting']['trained'])}")
    print(f"wrote {out / 'vote_gradients.json'} and {out / 'vote_gradients.png'} in {results['minutes']:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
