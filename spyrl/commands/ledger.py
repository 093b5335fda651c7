"""``spyrl ledger``: how often each evaluation set was scored, from the evaluation ledger."""

from __future__ import annotations

import argparse
import os

from rich.table import Table

from spyrl.commands.output import cell, console, echo


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("ledger", help="looks per set of the evaluation ledger: how often each set was scored")
    p.add_argument("path", nargs="?", default=None, help="a ledger file (default $SPYRL_LEDGER, else the cache's)")
    return p


def run(args: argparse.Namespace) -> int:
    """``spyrl ledger [PATH]``: the looks per set of an evaluation ledger (default: where scorings write)."""
    from spy_env.ledger import LEDGER_ENV, ledger_path, read_ledger, set_looks

    path = ledger_path(args.path, check=False)
    if path is None:
        raise ValueError(f"the ledger is off ({LEDGER_ENV}=off or 'off' given); name a ledger file: spyrl ledger PATH")
    if not os.path.lexists(path):
        echo(f"no looks recorded: {path} does not exist")
        return 0
    table = Table(title=cell(f"looks per set in {path}"))
    for column in ("set", "looks", "models", "first", "last"):
        table.add_column(column, justify="right" if column in ("looks", "models") else "left")
    for row in set_looks(read_ledger(path)):
        table.add_row(*(cell(value) for value in (row.set, row.looks, row.models, row.first, row.last)))
    console.print(table)
    return 0
