"""``spyrl train``: SpyRL's GRPO from a preset or a YAML config, with ``--set`` overrides."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from spy_env.display import markup_safe
from spy_env.extras import require
from spyrl.commands.common import listed
from spyrl.commands.output import console
from spyrl.commands.paths import check_output
from trainers.presets import PRESETS


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    presets = sorted(PRESETS)
    p = subparsers.add_parser("train", help=f"SpyRL GRPO training (presets: {', '.join(presets)})")
    p.add_argument("--preset", choices=presets, default="cpu-smoke", metavar="NAME", help=listed(presets))
    p.add_argument("--config", default=None, help="a YAML file of SpyRLConfig sections (may name a preset)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a field: SECTION.FIELD=VALUE (loss.epsilon_high=0.28, game.n_players=3) or FIELD=VALUE "
        "for a trainer field (no two sections share a name)",
    )
    p.add_argument("--output-dir", default=None)
    p.add_argument("--resume", default=None, help="'latest' or a checkpoint folder")
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved configuration as YAML, section by section, and exit",
    )
    return p


def run(args: argparse.Namespace) -> int:
    from trainers.config import SpyRLConfig

    config = SpyRLConfig.from_yaml(args.config) if args.config else SpyRLConfig.preset(args.preset)
    if args.output_dir:
        args.set.append(f"run.output_dir={args.output_dir}")
    config = config.with_overrides(args.set)
    if args.print_config:
        print(config.to_yaml(), end="")
        return 0
    from trainers.extras import training_extras

    require(training_extras(config.model, config.run.report_to, plots=True))  # before the work: curves come after
    _check_run_folder(Path(config.run.output_dir), resume=args.resume)
    from trainers.grpo import SpyRLTrainer
    from trainers.plot import plot_run

    console.print(
        f"training {markup_safe(config.model.name_or_path)} for {config.run.iterations} iterations into "
        f"{markup_safe(config.run.output_dir)}"
    )
    trainer = SpyRLTrainer.from_checkpoint(config, args.resume) if args.resume else SpyRLTrainer(config)
    history = trainer.train()
    path = plot_run(config.run.output_dir)
    last = history[-1] if history else {}
    console.print(
        f"done: {trainer.iteration} iterations; last stage {last.get('stage')}, detection accuracy "
        f"{last.get('env/detection_accuracy', float('nan')):.3f}; curves in {markup_safe(path)}"
    )
    return 0


def _check_run_folder(output_dir: Path, *, resume: str | None) -> None:
    """A new run gets a folder of its own: one that holds a run already is refused (its checkpoints
    would be replaced, ``latest`` moved back and metrics.jsonl would mix both runs) unless resumed."""
    if resume or int(os.environ.get("RANK", "0") or 0) != 0:  # under a launcher, rank 0 checks for all
        return
    held = [name for name in ("metrics.jsonl", "checkpoints") if (output_dir / name).exists()]
    if held:
        raise ValueError(
            f"output_dir {output_dir} already holds a run ({', '.join(held)}); pass --resume latest to continue "
            "it, or choose another folder"
        )
    check_output(output_dir / "metrics.jsonl", overwrite=False, flag="output_dir")
