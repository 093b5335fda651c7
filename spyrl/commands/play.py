"""``spyrl play``: one game, its transcript and each seat's rewards."""

from __future__ import annotations

import argparse

from spy_env.display import markup_safe
from spyrl.commands.common import add_game_args, add_overwrite, game_config
from spyrl.commands.output import console, report_forfeits, results_table
from spyrl.commands.paths import BUFFER_SUFFIXES, check_output
from spyrl.commands.policies import seat_policies


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("play", help="play one game and print its transcript and rewards")
    add_game_args(p, default_agent="auto")
    p.add_argument("--full", action="store_true", help="do not clip long texts")
    p.add_argument("--out", default=None, help="also save the game's episode buffer (.parquet/.jsonl)")
    add_overwrite(p)
    return p


def run(args: argparse.Namespace) -> int:
    from spy_env.runner import Runner
    from spy_env.transcript import transcript

    config = game_config(args)
    if args.out:
        check_output(args.out, overwrite=args.overwrite, suffixes=BUFFER_SUFFIXES)
    policies = seat_policies(args, config.rules.n_players)
    runner = Runner(config, keep_games=True)
    buffer = runner.run(policies, 1, seed=args.seed, progress=True)
    game = runner.games[0]
    console.print(transcript(game, full=args.full))
    console.print(results_table(buffer.rows, config.rules.n_players))
    if args.out:
        buffer.save(args.out)
        console.print(f"episode buffer written to {markup_safe(args.out)}")
    return report_forfeits(buffer.rows, args)
