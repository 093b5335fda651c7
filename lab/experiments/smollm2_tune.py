"""Tuning probe for the SmolLM2 experiment: choose settings without touching the held-out games.

Builds the ``smollm2-selfplay`` trainer (heuristic performers) with ``--set`` overrides, takes the
first ``--val-docs`` *training* documents out of training as a validation split, trains
``--iterations`` iterations on the rest, and reports the validation expected accuracy (the
probability the greedy-decoding policy puts on the spy, civilians only) with the paired bootstrap
interval of trained − base over the same validation games. The held-out documents of
``spy_env.corpus.split_documents`` are never played here, so settings chosen with this script are
not tuned to the evaluation games. ``lab/results/TUNING.md`` logs every run.

    python lab/experiments/smollm2_tune.py --name A --iterations 3 --set train_top_layers=12 \
        --set learning_rate=5e-5 --set games_per_document=2 --set updates_per_iteration=4
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path

from harness import experiment_parser, user_error
from smollm2_selfplay import greedy_policy

from spy_env.heldout import METRICS, evaluate_heldout, paired_difference, summarize
from spy_env.io import read_json, refuse_existing_outputs, write_text
from trainers import SpyRLConfig, SpyRLTrainer
from trainers.policies import seat_policy

KEYS = (
    "iteration",
    "env/detection_accuracy",
    "losses/ratio",
    "losses/clip_fraction",
    "losses/grad_norm",
    "losses/optimizer_steps",
    "time/rollout_seconds",
    "time/update_seconds",
    "samples/count",
)


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__, "runs/tune", "folder of the results (one JSON per --name)")
    p.add_argument("--name", required=True)
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--val-docs", type=int, default=12, help="training documents set aside for validation")
    p.add_argument("--val-games", type=int, default=16)
    p.add_argument("--val-seed", type=int, default=777)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--base-cache", default=None, help="JSON of the base model's validation games (reused)")
    a = p.parse_args(argv)
    try:
        return run(a)
    except ValueError as e:  # a bad --set, an existing result, a cache of other games: one line, exit 2
        return user_error(e)


def read_cache(cache: Path, key: dict) -> list[dict] | None:
    """The base model's validation games saved by an earlier run with the same ``key`` (model,
    validation documents, games and seed), or ``None`` when there is no cache. A cache of other
    games, or one that is not a list of per-game metrics, is a ``ValueError`` naming it."""
    if not cache.exists():
        return None
    saved = read_json(cache, "base cache")
    games = saved.get("games") if isinstance(saved, dict) else None
    if not isinstance(saved, dict) or saved.get("key") != key or not isinstance(games, list):
        raise ValueError(f"base cache {str(cache)!r} holds other games than these (or is not a cache); remove it")
    for game in games:
        ok = isinstance(game, dict) and isinstance(game.get("document_id"), str) and type(game.get("game_seed")) is int
        if not ok or not all(_rate(game.get(m)) for m in METRICS):
            raise ValueError(f"base cache {str(cache)!r} holds a game that is not per-game metrics")
    return games


def _rate(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 <= value <= 1


def run(a: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    out = Path(a.out)
    result = out / f"{a.name}.json"
    refuse_existing_outputs([result], overwrite=a.overwrite)  # before the training, not after
    config = SpyRLConfig.preset(
        "smollm2-selfplay",
        performer="heuristic",
        output_dir=str(out / a.name),
        progress=False,
        iterations=a.iterations,
        keep_buffers=False,
        checkpoint_every=10**6,
    ).with_overrides(a.set)
    start = time.perf_counter()
    trainer = SpyRLTrainer(config)
    validation = trainer.train_documents[: a.val_docs]
    trainer.train_documents = trainer.train_documents[a.val_docs :]

    def evaluate() -> list[dict]:
        trainer.model.eval()
        seat = seat_policy(trainer.config.rollout, trainer.config.run.seed, greedy_policy(trainer))
        seats = [seat] * trainer.config.game.rules.n_players
        return evaluate_heldout(seats, trainer.config.game, validation, a.val_games, seed=a.val_seed)[1]

    cache = Path(a.base_cache) if a.base_cache else None
    key = {"model": config.model, "validation": [d.id for d in validation], "games": a.val_games, "seed": a.val_seed}
    base = read_cache(cache, key) if cache is not None else None
    if base is None:
        base = evaluate()
        if cache is not None:
            write_text(cache, json.dumps({"key": key, "games": base}))
    s = summarize(base)
    print(f"[{a.name}] base validation: expected {s['expected_accuracy']}, greedy {s['detection_accuracy']}")
    log = []
    for _ in range(config.run.iterations):
        metrics = trainer.train_iteration()
        record = {k: metrics.get(k) for k in KEYS}
        if trainer.iteration % a.eval_every == 0 or trainer.iteration == config.run.iterations:
            games = evaluate()
            s = summarize(games)
            record["val_expected"] = s["expected_accuracy"].mean
            record["val_greedy"] = s["detection_accuracy"].mean
            record["val_expected_diff"] = paired_difference(games, base, "expected_accuracy").to_dict()
        record["elapsed_min"] = (time.perf_counter() - start) / 60
        print(f"[{a.name}]", json.dumps(record), flush=True)
        log.append(record)
    write_text(result, json.dumps({"name": a.name, "set": a.set, "log": log}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
