"""``spyrl rollout``: N games written to an episode buffer as each ends."""

from __future__ import annotations

import argparse
import json

from spy_env.display import markup_safe
from spy_env.runner import SPY_SEATS
from spyrl.commands.common import add_game_args, add_overwrite, game_config
from spyrl.commands.output import console, errors, report_forfeits
from spyrl.commands.paths import BUFFER_SUFFIXES, check_output
from spyrl.commands.policies import seat_policies


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("rollout", help="play N games and save an episode buffer")
    add_game_args(p)
    p.add_argument("--games", type=int, default=100, help="games to play (at least 1); Ctrl-C keeps the finished ones")
    p.add_argument("--out", required=True, help="output file, .parquet or .jsonl, written as the games end")
    add_overwrite(p)
    p.add_argument("--games-per-document", type=int, default=1, help="consecutive games that share a document")
    p.add_argument("--replay-setup", action="store_true", help="games of a group share spy seat and masks")
    p.add_argument(
        "--spy-seats",
        choices=SPY_SEATS,
        default="random",
        help="random: each game's (group's) spy seat drawn alone; balanced: each round of n_players, counted from "
        "the first, holds each seat once",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def run(args: argparse.Namespace) -> int:
    """Play the games and write each to ``--out`` as it ends: memory holds the games in play, not the run, and
    Ctrl-C (or a crash) leaves the finished games there, whole, and says how many."""
    from contextlib import closing

    from spy_env.buffer import EpisodeBuffer, stream_rows
    from spy_env.metrics import game_metrics
    from spy_env.runner import Runner

    for flag, count in (("--games", args.games), ("--games-per-document", args.games_per_document)):
        if count < 1:
            raise ValueError(f"{flag} must be at least 1, got {count}")
    config = game_config(args)
    path = check_output(args.out, overwrite=args.overwrite, suffixes=BUFFER_SUFFIXES)
    policies = seat_policies(args, config.rules.n_players)
    runner = Runner(
        config, games_per_document=args.games_per_document, replay_setup=args.replay_setup, spy_seats=args.spy_seats
    )
    writer = EpisodeBuffer.writer(path)
    try:
        games = runner.play(policies, args.games, seed=args.seed, progress=not args.quiet)
        with writer, closing(games):  # the progress bar ends before the file is completed
            metrics = game_metrics(writer.write_games(games))
    except BaseException:
        if writer.kept:
            errors.print(
                f"kept the {writer.kept} finished games of {args.games} in {markup_safe(path)}",
                highlight=False,
                soft_wrap=True,
            )
        raise
    console.print(f"{writer.rows} rows from {writer.kept} games written to {markup_safe(path)}")
    console.print(json.dumps({k: round(v, 4) for k, v in metrics.items()}, indent=2))
    return report_forfeits(stream_rows(path, ("agent_name", "error")), args)  # read back, a batch at a time
