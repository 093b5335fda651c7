"""``spyrl replay``: the games of an episode buffer, rendered."""

from __future__ import annotations

import argparse

from spy_env.display import markup_safe, terminal_safe
from spy_env.stage import Stage
from spyrl.commands.output import console, results_table


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("replay", help="render games from an episode buffer")
    p.add_argument("file")
    p.add_argument("--game", type=int, default=None, help="only this game id")
    p.add_argument("--limit", type=int, default=5, help="at most this many games")
    p.add_argument("--full", action="store_true")
    return p


def run(args: argparse.Namespace) -> int:
    from spy_env.buffer import EpisodeBuffer

    buffer = EpisodeBuffer.load(args.file)
    games = buffer.games()
    if not games:
        raise ValueError(f"{args.file} holds no games")
    if args.game is not None:
        games = {k: v for k, v in games.items() if k[1] == args.game}
        if not games:
            raise ValueError(f"no game with id {args.game} in {args.file}")
    for shown, ((run_id, game_id), rows) in enumerate(games.items()):
        if shown >= args.limit:
            console.print(f"... {len(games) - shown} more games (use --limit)")
            break
        n_players = max(r["seat"] for r in rows) + 1
        console.rule(f"game {game_id} (run {markup_safe(run_id)}) · document {markup_safe(rows[0]['document_id'])}")
        for row in rows:
            who = f"Player {row['seat'] + 1}"
            if row["stage"] == Stage.PERFORM:
                text = row["completion"] if args.full else row["completion"][:600]
                console.print(f"[bold]{who}[/bold] performs (round {row['round'] + 1}):")
                console.print(terminal_safe(text), markup=False, highlight=False)
            else:
                target = "N/A" if row["vote"] < 0 else f"Player {row['vote'] + 1}"
                console.print(f"[bold]{who}[/bold] votes {target}")
        spy = rows[0]["spy_seat"]
        verdict = "caught" if rows[0]["spy_caught"] else "survived"
        console.print(f"[bold red]The spy was Player {spy + 1}; it {verdict}.[/bold red]")
        console.print(results_table(rows, n_players))
    return 0
