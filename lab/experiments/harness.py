"""What every experiment script here shares: its common options, the command it records, and a user's
mistake as one ``error:`` line with exit code 2.

A script imports it as its neighbour (``from harness import ...``): Python puts a script's own folder
first on the import path, so nothing edits ``sys.path``. Tests load a script with its folder on the
path the same way (``tests/helpers.py``'s ``experiment_module``).

Every scoring an experiment makes (leaderboard sets, held-out games, the trainer's periodic evaluation) is a look
at an evaluation set: importing this module points the evaluation ledger at the lab's own, ``lab/ledger.jsonl``,
unless ``SPYRL_LEDGER`` already says where (tests point it at a temporary file).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from spy_env.ledger import LEDGER_ENV

__all__ = ["LAB_LEDGER", "command_of", "experiment_parser", "user_error"]

LAB_LEDGER = Path(__file__).resolve().parents[1] / "ledger.jsonl"
os.environ.setdefault(LEDGER_ENV, str(LAB_LEDGER))


def experiment_parser(
    doc: str | None,
    out: str | None,
    out_help: str,
    *,
    runs: str | None = None,
    runs_default: str | None = None,
    quick: bool = False,
    overrides: bool = True,
    overwrite: bool = True,
) -> argparse.ArgumentParser:
    """A parser described by the first line of ``doc`` with the shared options: ``--out`` (default
    ``out``; None makes it required), ``--runs`` (when ``runs`` is given: the folder of the training
    runs, ``runs`` its help, ``runs_default`` its default), ``--quick``, ``--set KEY=VALUE`` (SpyRLConfig overrides, repeatable) and
    ``--overwrite``."""
    p = argparse.ArgumentParser(description=(doc or "").strip().split("\n")[0])
    p.add_argument("--out", default=out, required=out is None, help=out_help)
    if runs is not None:
        p.add_argument("--runs", default=runs_default, help=runs)
    if quick:
        p.add_argument("--quick", action="store_true", help="a few-minute run of the same pipeline")
    if overrides:
        p.add_argument(
            "--set", action="append", default=[], metavar="KEY=VALUE",
            help="SpyRLConfig override (section.field=value or field=value), repeatable",
        )  # fmt: skip
    if overwrite:
        p.add_argument("--overwrite", action="store_true", help="replace earlier results")
    return p


def command_of(script: str, argv: list[str] | None) -> str:
    """The command that reproduces this run, as recorded in its results (``argv`` None: the process's)."""
    args = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", f"lab/experiments/{Path(script).name}", *args])


def user_error(error: BaseException | str) -> int:
    """Print a user's mistake as one ``error:`` line on stderr; the exit code to return (2)."""
    print(f"error: {error}", file=sys.stderr)
    return 2
