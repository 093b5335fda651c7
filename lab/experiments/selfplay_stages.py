"""Self-play on the real game: does SmolLM2-135M improve as the spy when it performs and votes itself?

Every row trains the same base model with :class:`trainers.SpyRLTrainer` (the ``smollm2-selfplay``
preset moved to the default game: 5 players, ``mask_spans``, 600-character documents; the model writes
every performance, up to ``max_completion_tokens`` tokens with a forced ``\\boxed{}`` answer) on the same
training games for the same number of iterations:

- ``selfplay``: the model performs and votes in every seat; the stage controller alternates every
  ``k_min`` iterations, starting with the performing stage (RAE advantages for the performances, the
  ``expected`` vote gradient for the votes). The paper's adaptive controller would never leave the
  detection stage here: it waits for an EMA detection accuracy of 0.9, and SmolLM2 votes at chance;
- ``detect-only``: the same games and iterations, the detection stage only (equal compute);
- ``perform-reference``: the performing stage alone against fixed heuristic detectors (``voter=heuristic``),
  the minimal reference: does the performing stage move the spy when the votes it learns from can
  tell a spy from a civilian?
- ``spy-reference``: the spy alone, in spy-v1's scene on training documents: heuristic civilians perform and
  vote (``civilians=heuristic``), the model holds the spy's seat and its performances train with RAE. Its
  reward is the one spy-v1 itself would give on those documents: the reference for what the performing
  stage can do with a reward that agrees with spy-v1 (self-play's own votes do not: ``--probe``).
- ``spy-soft``: ``spy-reference`` with a graded reward: the civilians draw their votes from a softmax over
  the heuristic's consistency scores (``civilians=heuristic-soft``) and the spy is rewarded by the expected
  votes it receives (``perform_reward=expected``), which moves with every number or term of its text that a
  civilian's copy holds, where spy-v1's all-or-nothing votes catch a weak spy in nearly every game.
- ``spy-clean``: ``spy-soft`` with a pasted copy (a ``verbatim_copy`` violation) charged ``penalty_copy=-5``, the
  width of the spy's performing reward with five players, where the game's −0.5 let ``spy-soft`` learn to paste
  its copy, which spy-v1's detectors read as a civilian's text.

Evaluation, the base model once and every row's final model, each paired with the base on the same games:

- **as the spy**: the first ``--spy-games`` games of the spy-v1 leaderboard set (full documents; greedy
  performance): survival against its fixed heuristic detectors (and ``clean_survival_rate``: a rule-breaking
  text counted as caught), and the share of votes a fixed panel of the *base* model's votes (greedy,
  constrained, one forward pass each) puts on the spy, as the expected share (its probability on the spy)
  and the greedy share;
- **as a civilian**: detection (expected and greedy accuracy of constrained votes) on ``--detect-games``
  held-out games of the training game with heuristic performers, as in ``vote_gradients.py``, and on the
  first ``--leaderboard-games`` games of the detect-v1 leaderboard set (its leaderboard row, paired too).

Training metrics per iteration (stage, rewards and advantages per role, RAE baselines, the controller's
EMAs, every rule baseline's accuracy on the iteration's own games, seconds) are kept for the diagnosis.
Writes ``selfplay_stages.json`` and ``selfplay_stages.png`` to ``--out`` (atomically).

``--training-only`` trains the rows and evaluates nothing: it keeps every iteration's episode buffer
and writes ``selfplay_training.json``, each row's sampled detection accuracy on its training games
beside every rule baseline scored on the very performances its voters saw (``agents/rules.py``), per
iteration and over the run with 95% intervals. The training games do not depend on the evaluations,
so a row's training matches the same command's full run on the same CPU (the per-iteration
accuracies say whether it did).

    python lab/experiments/selfplay_stages.py --out lab/results/selfplay
    python lab/experiments/selfplay_stages.py --quick --out /tmp/quick      # a few minutes: what CI runs
    python lab/experiments/selfplay_stages.py --training-only --out /tmp/rules   # the rules on the training games

``--probe N`` plays N iterations' training games with the starting model and trains nothing: how often its
votes and each rule find the spy among its own performances, and, for every spy text, the votes its own
voters, heuristic detectors in the same game and spy-v1's detectors in spy-v1's scene of the same copy put
on it, with each signal's within-setup correlation with spy-v1's (``lab/experiments/spy_signal.py``), and whether its
votes find a spy whose text names a number more often than one whose text names none (``spy_numbers``, as
``lab/experiments/spy_numbers.py`` reads a kept run).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import logging
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import command_of, experiment_parser, user_error
from spy_numbers import games_of, numbers
from spy_signal import alignment, spy_signals
from training_rules import rule_table

from agents.rules import RULES, played_shares, played_votes, spy_share
from spy_env.buffer import EpisodeBuffer
from spy_env.extras import require
from spy_env.heldout import bootstrap, evaluate_heldout, paired_difference, summarize
from spy_env.io import read_json, refuse_existing_outputs, save_figure, write_text
from spy_env.stage import Stage
from spyrl.evaluation.leaderboard import run_leaderboard
from trainers import SpyRLConfig, SpyRLTrainer
from trainers.checkpoint import CheckpointError, resolve_checkpoint
from trainers.extras import PLOTS
from trainers.policies import learner_policy, seat_policy

SPY_SOFT = {
    "stage_schedule": "perform",
    "civilians": "heuristic-soft",
    "perform_reward": "expected",
    "perform_group_norm": False,
}
ROWS: dict[str, dict[str, Any]] = {
    "selfplay": {"stage_schedule": "alternate"},
    "detect-only": {"stage_schedule": "detect"},
    "perform-reference": {"stage_schedule": "perform", "voter": "heuristic"},
    "spy-reference": {"stage_schedule": "perform", "civilians": "heuristic"},
    "spy-soft": SPY_SOFT,
    # a paste of the copy (a verbatim_copy violation) charged the width of the spy's r^P range with five
    # players (−3.75 caught by all four civilians to +1.25 voted by none): no paste can pay
    "spy-clean": {**SPY_SOFT, "game": {"penalty_copy": -5.0}},
}
GAME = {"n_players": 5, "degrade": "mask_spans", "max_document_chars": 600}
BASE = {
    "performer": "self",
    "max_completion_tokens": 128,
    "k_min": 2,
    "start_stage": "perform",
    # the library's defaults, not the preset's pins for its detection experiments: RAE seeded with each
    # role's first batch mean (no cold start), penalties on the offender's own advantage
    "rae_init": "first_batch",
    "penalty_advantage": "own",
    "keep_buffers": False,
    "progress": False,
    "checkpoint_every": 1000,
}
SPY = ("survival_rate", "clean_survival_rate", "votes_against_share")
PANEL = ("expected_votes_against_share", "votes_against_share")
DETECT = ("expected_accuracy", "detection_accuracy")
PARTS = (("spy", SPY), ("panel", PANEL), ("detect", DETECT), ("detect_v1", DETECT))


def row_config(name: str, args: argparse.Namespace, *, start: bool = True) -> SpyRLConfig:
    """One row's configuration; with ``start`` its model is ``--init-model`` where one is given (the base
    model otherwise: the one every evaluation is paired with and whose votes are the fixed panel)."""
    overrides = {**BASE, **ROWS[name], "output_dir": str(Path(args.runs) / name), "iterations": args.iterations}
    overrides["game"] = {**GAME, **ROWS[name].get("game", {})}
    if args.quick:  # the pipeline's structure, not its numbers: three seats, short replies
        overrides.update(documents_per_iteration=1, max_completion_tokens=32, k_min=1)
        overrides["game"]["n_players"] = 3
    config = SpyRLConfig.preset("smollm2-selfplay", **overrides).with_overrides(args.set)
    if start and args.init_model:
        config = config.with_overrides([f"model.name_or_path={args.init_model}"])
    return config


class Replay:
    """A policy that replays recorded replies in order (the same performances scored by a second panel)."""

    name = "replay"

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)

    def act(self, observations: list[Any]) -> list[str]:
        out, self.texts = self.texts[: len(observations)], self.texts[len(observations) :]
        return out


def evaluate(trainer: SpyRLTrainer, panel: Any, args: argparse.Namespace) -> dict[str, list[dict]]:
    """Per-game results of the trainer's current model: as the spy (heuristic detectors, then the base
    model's panel on the same performances) and as a civilian voter (heuristic performers)."""
    trainer.model.eval()
    greedy = learner_policy(
        trainer.config.decoding, trainer.config.rollout, trainer.unwrapped, trainer.tokenizer, greedy=True
    )
    spy = run_leaderboard("spy", greedy, limit=args.spy_games)["results"]["spy-v1"]["items"]
    replay = Replay([item["completion"] for item in spy])
    panel_items = run_leaderboard("spy", replay, limit=args.spy_games, detector=panel)["results"]["spy-v1"]["items"]
    config = trainer.config.with_overrides(["performer=heuristic", "voter=self", "civilians=self"])
    seats = [seat_policy(config.rollout, config.run.seed, greedy)] * trainer.config.game.rules.n_players
    detect = evaluate_heldout(seats, trainer.config.game, trainer.eval_documents, args.detect_games, seed=args.seed)
    detect_v1 = run_leaderboard("detect", greedy, limit=args.leaderboard_games)["results"]["detect-v1"]["items"]
    return {"spy": spy, "panel": panel_items, "detect": detect[1], "detect_v1": detect_v1}


def summary(result: dict[str, list[dict]], base: dict[str, list[dict]] | None = None) -> dict[str, Any]:
    """Means with intervals, and trained − base paired on the same games when ``base`` is given."""
    out: dict[str, Any] = {}
    for part, metrics in PARTS:
        games = result[part]
        shown = summarize(games) if part == "detect" else {}
        out[part] = {}
        for m in metrics:
            interval = shown.get(m) or _mean(games, m)
            out[part][m] = interval.to_dict()
            if base is not None:
                out[part][m]["difference"] = paired_difference(games, base[part], m).to_dict()
    return out


def _mean(games: list[dict], metric: str) -> Any:
    return bootstrap([g[metric] for g in games])


def probe(args: argparse.Namespace) -> dict[str, Any]:
    """The starting model (the base, or ``--init-model``) in every seat on ``--probe`` iterations' training games
    (no update): how often its sampled votes and each rule's find the spy among its own performances, first round."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as runs:  # nothing is trained, so nothing of the run is kept
        config = row_config("selfplay", args)
        config = dataclasses.replace(config, run=dataclasses.replace(config.run, output_dir=runs))
        trainer = SpyRLTrainer(config)
        for iteration in range(args.probe):
            trainer.iteration = iteration
            rows += list(trainer.rollouts())
    votes = [r for r in rows if r["stage"] == Stage.VOTE and r["round"] == 0 and r["role"] == "civilian"]
    expected = [r["vote_probs"][r["spy_seat"]] if len(r["vote_probs"]) else math.nan for r in votes]
    out = {
        "model": config.model.name_or_path,
        "games": len({r["game_id"] for r in rows}),
        "civilian_votes": len(votes),
        "chance": 1 / (config.game.rules.n_players - 1),
        "model_sampled": bootstrap([float(r["vote"] == r["spy_seat"]) for r in votes]).to_dict(),
        "model_expected": bootstrap(expected).to_dict(),
        "rules": {name: bootstrap(played_shares(rows, rule)).to_dict() for name, rule in RULES.items()},
        # a game's civilians read the same texts: its views are not independent, so the games are resampled
        "by_game": {
            "model_expected": by_game(zip(votes, expected, strict=True)).to_dict(),
            **{name: by_game(views(rows, rule)).to_dict() for name, rule in RULES.items()},
        },
    }
    tokens = [len(r["completion_token_ids"]) for r in rows if r["stage"] == Stage.PERFORM]
    out["mean_performance_tokens"] = sum(tokens) / len(tokens)
    signals = spy_signals(rows, config.game)  # the spy's texts under its own votes and spy-v1's detectors
    out["spy_signal"] = {**alignment(signals), "texts_scored": signals}
    out["spy_numbers"] = numbers(games_of(rows, "the probe"))  # do its votes find a spy that names numbers more?
    return out


def views(rows: list[dict], rule: Any) -> list[tuple[dict, float]]:
    """Each first-round civilian vote with ``rule``'s share of the spy among the texts its voter saw."""
    return [(vote, spy_share(rule, shown, others, vote["spy_seat"])) for vote, shown, others in played_votes(rows)]


def by_game(pairs: Any) -> Any:
    """The mean of ``(vote, value)`` pairs' values with an interval that resamples games, not votes: the unit
    of a probe, whose civilians in one game read the same performances (each game weighs as one).

    >>> votes = [{"run_id": "a", "game_id": g} for g in (0, 0, 0, 1)]
    >>> interval = by_game(zip(votes, [1.0, 1.0, 1.0, 0.0]))
    >>> interval.n, interval.mean
    (2, 0.5)
    """
    games: dict[tuple, list[float]] = {}
    for vote, value in pairs:
        if not math.isnan(value):
            games.setdefault((vote.get("run_id"), vote["game_id"]), []).append(value)
    return bootstrap([sum(v) / len(v) for v in games.values()])


def train(name: str, trainer: SpyRLTrainer) -> list[dict[str, Any]]:
    """Every training iteration of one row: its scalar metrics, with the minutes since the first."""
    start = time.perf_counter()
    history = []
    while trainer.iteration < trainer.config.run.iterations:  # from the checkpoint's iteration on a resumed run
        metrics = trainer.train_iteration()
        history.append({k: v for k, v in metrics.items() if isinstance(v, (int, float, str))})
        history[-1]["minutes"] = (time.perf_counter() - start) / 60
        logging.info(
            "[%s] iteration %d (%s): acc %.3f, spy perform reward %.3f, grad norm %.2f",
            name, trainer.iteration, metrics["stage"], metrics["env/detection_accuracy"],
            metrics.get("env/reward/spy_perform", float("nan")), metrics.get("losses/grad_norm", float("nan")),
        )  # fmt: skip
    return history


def run_row(name: str, args: argparse.Namespace, base: dict[str, Any] | None) -> tuple[dict, dict]:
    """Train one row; evaluate the base model first (once for all rows, on the same games)."""
    config = row_config(name, args)
    start = time.perf_counter()
    trainer = SpyRLTrainer(row_config(name, args, start=False))
    panel_model = copy.deepcopy(trainer.unwrapped).eval()  # the base model's votes: a fixed panel
    panel = learner_policy(config.decoding, config.rollout, panel_model, trainer.tokenizer, greedy=True)
    if base is None:
        base = {"games": evaluate(trainer, panel, args), "minutes": (time.perf_counter() - start) / 60}
        logging.info("base: %s", _line(summary(base["games"])))
    if args.resume:  # the row's run continued exactly where its last checkpoint left it
        del trainer
        trainer = SpyRLTrainer.from_checkpoint(config, "latest")
    elif args.init_model:  # training starts from the saved model; every gain stays paired with the base model
        del trainer
        trainer = SpyRLTrainer(config)
    resumed_from = trainer.iteration
    start = time.perf_counter()
    history = train(name, trainer)
    train_minutes = (time.perf_counter() - start) / 60
    final = evaluate(trainer, panel, args)
    row = {
        "row": name,
        "overrides": ROWS[name],
        "init_model": args.init_model,
        "resumed_from": resumed_from,
        "config": config.to_dict(),
        "heldout_documents": [d.id for d in trainer.eval_documents],
        "train_minutes": train_minutes,
        "minutes": (time.perf_counter() - start) / 60,
        "controller": trainer.controller.state_dict(),
        "rae": trainer.rae.state_dict(),
        "trained": summary(final, base["games"]),
        "per_game": final,
        "training": history,
    }
    logging.info("[%s] trained: %s", name, _line(row["trained"]))
    return row, base


def training_row(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Train one row, evaluating nothing, and score its voters and every rule on its training games."""
    config = row_config(name, args)
    config = dataclasses.replace(config, run=dataclasses.replace(config.run, keep_buffers=True))
    trainer = SpyRLTrainer(config)
    history = train(name, trainer)
    folder = Path(config.run.output_dir) / "buffers"
    played = [EpisodeBuffer.load(folder / f"iter_{i:05d}.parquet").rows for i in range(len(history))]
    hits = [float(vote["vote"] == vote["spy_seat"]) for rows in played for vote, _, _ in played_votes(rows)]
    return {
        "row": name,
        "overrides": ROWS[name],
        "init_model": args.init_model,
        "config": config.to_dict(),
        "train_minutes": history[-1]["minutes"],
        "detection_accuracy": [h["env/detection_accuracy"] for h in history],
        "model_sampled": bootstrap(hits).to_dict(),
        "rules": rule_table(played),
        "training": history,
    }


def _training_line(row: dict[str, Any]) -> str:
    strongest = row["rules"]["strongest"]
    model, rule = row["model_sampled"], row["rules"]["overall"][strongest]
    return (
        f"{row['row']}: sampled accuracy {model['mean']:.3f} [{model['low']:.3f}, {model['high']:.3f}] on its training "
        f"games; strongest rule {strongest} {rule['mean']:.3f} [{rule['low']:.3f}, {rule['high']:.3f}] "
        f"({rule['n']} civilian votes)"
    )


def _line(result: dict[str, Any]) -> str:
    parts = []
    for part, metric in (
        ("spy", "survival_rate"),
        ("panel", "expected_votes_against_share"),
        ("detect", "expected_accuracy"),
        ("detect_v1", "expected_accuracy"),
    ):
        entry = result[part][metric]
        d = entry.get("difference")
        gain = f" ({d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}])" if d else ""
        parts.append(f"{part} {metric} {entry['mean']:.3f}{gain}")
    return "; ".join(parts)


def plot(results: dict[str, Any], path: Path) -> None:
    """Training curves against wall-clock minutes, and each evaluation's gain over the base model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.2))
    for row in results["rows"]:
        minutes = [h["minutes"] for h in row["training"]]
        spy = [h.get("env/reward/spy_perform", float("nan")) for h in row["training"]]
        acc = [h.get("env/detection_accuracy", float("nan")) for h in row["training"]]
        axes[0].plot(minutes, spy, marker="o", label=row["row"])
        axes[1].plot(minutes, acc, marker="o", label=row["row"])
    axes[0].set_title("training games: the spy's performing reward")
    axes[1].set_title("training games: detection accuracy (sampled votes)")
    axes[1].axhline(0.25, color="grey", linestyle=":", linewidth=1, label="chance (5 players)")
    for ax in axes[:2]:
        ax.set_xlabel("wall-clock minutes of training")
        ax.grid(alpha=0.3)
        ax.legend()
    shown = [
        ("spy", "survival_rate"),
        ("panel", "expected_votes_against_share"),
        ("detect", "expected_accuracy"),
        ("detect_v1", "expected_accuracy"),
    ]
    width = 0.8 / max(len(results["rows"]), 1)
    for k, row in enumerate(results["rows"]):
        diffs = [row["trained"][part][metric]["difference"] for part, metric in shown]
        xs = [i + k * width for i in range(len(shown))]
        axes[2].bar(xs, [d["mean"] for d in diffs], width, label=row["row"],
                    yerr=[[d["mean"] - d["low"] for d in diffs], [d["high"] - d["mean"] for d in diffs]])  # fmt: skip
    axes[2].axhline(0, color="black", linewidth=0.8)
    axes[2].set_xticks([i + width * (len(results["rows"]) - 1) / 2 for i in range(len(shown))])
    axes[2].set_xticklabels(
        ["spy-v1\nsurvival", "base panel's\nvotes on the spy", "held-out\ndetection", "detect-v1\ndetection"]
    )
    axes[2].set_title("trained − base, paired 95% interval")
    axes[2].legend()
    fig.suptitle("SmolLM2-135M-Instruct, self-play on the default game (5 players, mask_spans) on CPU")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    p = experiment_parser(
        __doc__, "runs/selfplay", "folder for selfplay_stages.json and .png",
        runs="folder of the training runs (default: OUT/runs)", quick=True,
    )  # fmt: skip
    p.add_argument("--rows", default="selfplay,detect-only,perform-reference", help=f"comma-separated: {list(ROWS)}")
    p.add_argument("--iterations", type=int, default=None, help="training iterations of every row (default 12)")
    p.add_argument("--spy-games", type=int, default=None, help="first games of spy-v1 (default 32)")
    p.add_argument("--detect-games", type=int, default=None, help="held-out detection games (default 32)")
    p.add_argument("--leaderboard-games", type=int, default=None, help="first games of detect-v1 (default 48)")
    p.add_argument("--seed", type=int, default=12345, help="seed of the held-out detection games")
    p.add_argument(
        "--init-model", default=None, metavar="DIR",
        help="start every row (and --probe, --training-only) from this saved model (a --save-model folder of "
        "vote_gradients.py) instead of the preset's; every gain stays paired with the preset's base model, "
        "and the base model's votes stay the fixed panel",
    )  # fmt: skip
    p.add_argument(
        "--probe", type=int, default=0, metavar="N",
        help="only play N iterations' training games with the untrained model (no update) and write "
        "selfplay_probe.json: how often its votes and each rule find the spy among its own performances, and "
        "how its own votes on each spy text agree with spy-v1's detectors (lab/experiments/spy_signal.py)",
    )  # fmt: skip
    p.add_argument(
        "--training-only", action="store_true",
        help="train the rows, evaluate nothing, and write selfplay_training.json: each row's detection accuracy "
        "on its training games beside every rule baseline on the same games (the iterations' buffers are kept)",
    )  # fmt: skip
    p.add_argument(
        "--resume", action="store_true",
        help="continue every row's run in --runs from its latest checkpoint (this command's run with fewer "
        "--iterations and the same settings) to --iterations, as a straight run would have gone on; the JSON's "
        "training curves cover the iterations this command trains, and the base model is evaluated again",
    )  # fmt: skip
    return p


def _check_resume(args: argparse.Namespace, rows: list[str]) -> None:
    """``--resume`` needs every row's checkpoint, short of ``--iterations``, before any work."""
    if not args.resume:
        return
    if args.probe or args.training_only:
        raise ValueError("--resume continues a trained row: it goes with neither --probe nor --training-only")
    for name in rows:
        try:
            folder = resolve_checkpoint(Path(args.runs) / name / "checkpoints", "latest")
        except CheckpointError as e:
            raise ValueError(f"--resume: row {name!r}: {e}") from e
        done = read_json(folder / "trainer_state.json", "checkpoint state").get("iteration")
        if not isinstance(done, int) or done >= args.iterations:
            raise ValueError(f"--resume: row {name!r} is at iteration {done} of {folder}, not short of --iterations")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    defaults = {"iterations": 2, "spy_games": 2, "detect_games": 2, "leaderboard_games": 2} if args.quick else {}
    full = {"iterations": 12, "spy_games": 32, "detect_games": 32, "leaderboard_games": 48}
    for name, value in {**full, **defaults}.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    out = Path(args.out)
    args.runs = args.runs or str(out / "runs")
    try:  # before the training, not after
        if args.init_model and not (Path(args.init_model) / "config.json").is_file():
            raise ValueError(f"--init-model {args.init_model!r} is not a saved model folder (no config.json)")
        if not rows or set(rows) - set(ROWS):
            raise ValueError(f"--rows must name rows among {list(ROWS)}, got {args.rows!r}")
        for name in full:
            if getattr(args, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        if args.probe < 0:
            raise ValueError("--probe must be >= 0")
        if args.probe and args.training_only:
            raise ValueError("--probe and --training-only are two different runs: give one")
        for name in rows:
            row_config(name, args)
        _check_resume(args, rows)
        require([PLOTS])
        written = [out / "selfplay_stages.json", out / "selfplay_stages.png"]
        if args.probe or args.training_only:
            written = [out / ("selfplay_probe.json" if args.probe else "selfplay_training.json")]
        refuse_existing_outputs(written, overwrite=args.overwrite)
    except (ImportError, ValueError) as e:
        return user_error(e)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    start = time.perf_counter()
    command = command_of(__file__, argv)
    if args.probe:
        result = {"command": command, **probe(args), "minutes": (time.perf_counter() - start) / 60}
        write_text(out / "selfplay_probe.json", json.dumps(result, indent=1) + "\n")
        print(json.dumps(result, indent=1))
        return 0
    if args.training_only:
        result = {"command": command, "rows": [training_row(name, args) for name in rows]}
        result["minutes"] = (time.perf_counter() - start) / 60
        write_text(out / "selfplay_training.json", json.dumps(result, indent=1, default=float) + "\n")
        print("\n".join(_training_line(row) for row in result["rows"]))
        return 0
    results: dict[str, Any] = {"command": command, "rows": []}
    base = None
    for name in rows:
        row, base = run_row(name, args, base)
        results["rows"].append(row)
    results["base"] = {"minutes": base["minutes"], **summary(base["games"]), "per_game": base["games"]}
    results["minutes"] = (time.perf_counter() - start) / 60
    write_text(out / "selfplay_stages.json", json.dumps(results, indent=1, default=float) + "\n")
    plot(results, out / "selfplay_stages.png")
    print(f"base: {_line(summary(base['games']))}")
    for row in results["rows"]:
        print(f"{row['row']} ({row['train_minutes']:.1f} min of training): {_line(row['trained'])}")
    print(f"wrote {out / 'selfplay_stages.json'} and {out / 'selfplay_stages.png'} in {results['minutes']:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
