"""``spyrl plot``: a run's training curves as a PNG."""

from __future__ import annotations

import argparse

from spy_env.display import markup_safe
from spyrl.commands.common import add_overwrite
from spyrl.commands.output import console
from spyrl.commands.paths import check_input, check_output


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plot", help="draw a run's training curves (PNG)")
    p.add_argument("run_dir")
    p.add_argument("--out", default=None, help="PNG file (default: RUN_DIR/curves.png, replaced)")
    add_overwrite(p)
    return p


def run(args: argparse.Namespace) -> int:
    from trainers.plot import plot_run

    check_input(args.run_dir, "run folder")
    if args.out:
        check_output(args.out, overwrite=args.overwrite, suffixes=(".png",))
    path = plot_run(args.run_dir, args.out)
    console.print(f"wrote {markup_safe(path)}")
    return 0
