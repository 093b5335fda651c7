"""Rule baselines on the exact training games of a run whose performers are scripted.

A run with ``performer`` set to a scripted agent (``heuristic``, ``heuristic-matched``,
``heuristic-disjoint``) plays training games whose documents, setups and first-round performances
depend only on the config, the seed and the iteration, never on the model being trained: the model
only votes. So those games can be played again without the model (a ``random`` voter in its place,
a tiny model loaded but never called) and every rule baseline of ``agents/rules.py`` scored on them,
iteration by iteration: the baseline that the run's training-game detection accuracy, logged per
iteration, is read against. (Runs from this commit on also log it themselves:
``env/rule_<name>_accuracy``.) Self-play runs cannot be replayed this way: their performances are the
model's.

    python lab/experiments/training_rules.py --preset smollm2-selfplay --iterations 20 \\
        --set performer=heuristic-disjoint --out lab/results/disjoint/training_rules.json
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import replace
from typing import Any

from harness import command_of, experiment_parser, user_error

from agents.rules import RULES, played_shares
from spy_env.heldout import bootstrap
from spy_env.io import refuse_existing_outputs, write_text
from trainers import SpyRLConfig, SpyRLTrainer

SCRIPTED = ("heuristic", "heuristic-matched", "heuristic-disjoint")


def replay_config(preset: str, overrides: list[str], runs: str) -> SpyRLConfig:
    """The run's config with a ``random`` voter and a tiny model (neither shapes the training games)."""
    config = SpyRLConfig.preset(preset).with_overrides(overrides)
    if config.rollout.performer not in SCRIPTED:
        raise ValueError(
            f"rollout.performer must be a scripted agent ({', '.join(SCRIPTED)}) for the games to replay without "
            f"the model, got {config.rollout.performer!r}"
        )
    config = config.with_overrides(["voter=random", "model.name_or_path=tiny", "train_top_layers=0", "lora_r=0"])
    return replace(config, run=replace(config.run, output_dir=runs, progress=False, keep_buffers=False, eval_games=0))


def training_games(trainer: SpyRLTrainer, iterations: int) -> list[list[dict]]:
    """The rows of each iteration's training games, as the run played them (votes aside), played by a
    trainer built from :func:`replay_config`."""
    played = []
    for iteration in range(iterations):
        trainer.iteration = iteration
        played.append(list(trainer.rollouts()))
    return played


def rule_table(played: list[list[dict]]) -> dict[str, Any]:
    """Per iteration each rule's accuracy on its games' first-round civilian votes; over all, with intervals."""
    per_iteration = [
        {name: sum(s) / len(s) if (s := played_shares(rows, rule)) else None for name, rule in RULES.items()}
        for rows in played
    ]
    every = [row for rows in played for row in rows]
    overall = {name: bootstrap(played_shares(every, rule)).to_dict() for name, rule in RULES.items()}
    strongest = max(overall, key=lambda name: overall[name]["mean"])
    return {"per_iteration": per_iteration, "overall": overall, "strongest": strongest}


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__, None, "the JSON file to write")
    p.add_argument("--preset", default="smollm2-selfplay", help="the run's preset")
    p.add_argument("--iterations", type=int, required=True, help="the run's training iterations")
    args = p.parse_args(argv)
    try:
        if args.iterations < 1:
            raise ValueError("--iterations must be >= 1")
        refuse_existing_outputs([args.out], overwrite=args.overwrite)
        with tempfile.TemporaryDirectory() as runs:  # nothing trains, nothing of the run is kept
            config = replay_config(args.preset, args.set, runs)
            table = rule_table(training_games(SpyRLTrainer(config), args.iterations))
    except ValueError as e:
        return user_error(e)
    result = {"command": command_of(__file__, argv), "iterations": args.iterations, **table}
    write_text(args.out, json.dumps(result, indent=1) + "\n")
    best = table["overall"][table["strongest"]]
    print(
        f"strongest rule on the {args.iterations} iterations' training games: {table['strongest']} "
        f"{best['mean']:.3f} [{best['low']:.3f}, {best['high']:.3f}] ({best['n']} civilian votes)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
