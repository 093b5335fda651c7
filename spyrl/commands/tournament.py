"""``spyrl tournament``: mixed tables of agents, with per-agent metrics, ratings and a chart."""

from __future__ import annotations

import argparse

from agents.registry import spec_forms
from spy_env.display import markup_safe
from spyrl.commands.common import add_game_args, add_max_forfeit_rate, add_overwrite, game_config
from spyrl.commands.output import console, echo, report_forfeits
from spyrl.commands.paths import TOURNAMENT_FILES, check_output_dir, require_matplotlib
from spyrl.commands.policies import load_agent


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("tournament", help="mixed tables of agents: per-agent metrics, ratings, chart")
    add_game_args(p)
    p.add_argument("--agents", default="heuristic,random", help=f"comma-separated agent specs: {spec_forms()}")
    p.add_argument("--games", type=int, default=60, help="number of games; every agent sits at every game")
    p.add_argument("--out", default="runs/tournament", help="output folder")
    add_overwrite(p)
    add_max_forfeit_rate(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def run(args: argparse.Namespace) -> int:
    from spyrl.evaluation.tournament import run_tournament

    config = game_config(args)
    names = [name.strip() for name in args.agents.split(",") if name.strip()]
    if len(set(names)) != len(names):
        raise ValueError(f"--agents lists an agent twice: {args.agents!r}")
    check_output_dir(args.out, TOURNAMENT_FILES, overwrite=args.overwrite, flag="--out")
    require_matplotlib("tournament's chart.png")
    policies = {name: load_agent(name, args) for name in names}
    result = run_tournament(
        policies,
        args.games,
        config=config,
        seed=args.seed,
        progress=not args.quiet,
        max_forfeit_rate=args.max_forfeit_rate,
    )
    result.config.update(corpus=args.corpus, documents=args.documents)  # the spec and split, not "<N rows>"
    paths = result.save(args.out)
    echo(result.table())
    console.print(f"written to {markup_safe(args.out)}: " + ", ".join(p.name for p in paths.values()))
    return report_forfeits(result.buffer.rows, args)
