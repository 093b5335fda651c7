"""``spyrl view``: one self-contained HTML page of a buffer, a training run or a tournament."""

from __future__ import annotations

import argparse
import sys

from spy_env.display import markup_safe, terminal_safe
from spyrl.commands.common import add_overwrite
from spyrl.commands.output import console
from spyrl.commands.paths import check_output


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("view", help="one self-contained HTML page of a buffer, a training run or a tournament")
    p.add_argument("input", help="an episode buffer (.parquet/.jsonl), a run folder or a tournament result")
    p.add_argument("-o", "--out", default="spyrl-view.html", help="the HTML file to write")
    p.add_argument(
        "--tokenizer", default=None, help="tokenizer.json (or its folder) to show token texts in heat strips"
    )
    p.add_argument("--max-games", type=int, default=None, help="at most this many games of a buffer")
    p.add_argument("--games-per-iteration", type=int, default=6, help="sample games per iteration of a run")
    add_overwrite(p)
    return p


def run(args: argparse.Namespace) -> int:
    from spyrl.viewer import write_page

    check_output(args.out, overwrite=args.overwrite, suffixes=(".html", ".htm"), flag="--out", inputs=[args.input])
    try:
        path = write_page(
            args.input,
            args.out,
            tokenizer=args.tokenizer,
            max_games=args.max_games,
            games_per_iteration=args.games_per_iteration,
        )
    except (FileNotFoundError, ValueError) as e:  # a user mistake: one line, exit 2
        print(f"error: {terminal_safe(str(e))}", file=sys.stderr)
        return 2
    console.print(
        f"wrote {markup_safe(path)} ({path.stat().st_size / 1024:,.0f} KiB); open it in a browser (works offline)"
    )
    return 0
