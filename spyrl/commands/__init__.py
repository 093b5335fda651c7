"""The ``spyrl`` command line: play, rollout, replay, view, train, plot, eval, tournament, leaderboard,
ledger, baselines, serve.

A command is one module of this package, ``spyrl/commands/NAME.py``, with ``add_parser(subparsers)``
(its parser, returned) and ``run(args)`` (its exit code); :data:`COMMANDS` names them, so a new command
is that file plus its name there. Options several commands share are :mod:`spyrl.commands.common`'s,
printing is :mod:`spyrl.commands.output`'s, paths :mod:`spyrl.commands.paths`' and the agents a command
loads :mod:`spyrl.commands.policies`'. :func:`main` turns a user's mistake into one ``error:`` line and
exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Protocol, cast

from spy_env.display import markup_safe
from spy_env.plugins import load_plugins
from spyrl.commands.output import errors, quiet_libraries
from spyrl.commands.paths import release_reservations
from spyrl.commands.policies import CLOSED_ENGINES, close_agents

__all__ = ["COMMANDS", "MAX_ERROR_CHARS", "Command", "build_parser", "main", "one_line"]


class Command(Protocol):
    """What a command's module defines."""

    def add_parser(self, subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
        """Add the command's parser to ``subparsers`` and return it."""

    def run(self, args: argparse.Namespace) -> int:
        """Do the command's work; its exit code."""


# The commands, in the order `spyrl --help` lists them: each the module spyrl/commands/NAME.py.
COMMANDS: dict[str, Command] = {
    name: cast(Command, importlib.import_module(f"{__name__}.{name}"))
    for name in (
        "play",
        "rollout",
        "replay",
        "view",
        "train",
        "plot",
        "eval",
        "tournament",
        "leaderboard",
        "ledger",
        "baselines",
        "serve",
    )
}

THREADS_HELP = (
    "torch's CPU threads: auto (the cores free when a model loads; default), all (one per core) or a number; "
    "also SPYRL_THREADS"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spyrl", description="RLSVR / SpyRL: Who Is the Spy? over math documents")
    parser.add_argument("--debug", action="store_true", help="show the traceback of every error")
    parser.add_argument("--verbose", action="store_true", help="also show the libraries' progress bars and warnings")
    parser.add_argument("--threads", default=None, help=THREADS_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub).set_defaults(func=command.run)
    for command in sub.choices.values():  # also after the command; SUPPRESS keeps the top-level value
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
        command.add_argument(
            "--verbose", action="store_true", default=argparse.SUPPRESS, help="show the libraries' chatter"
        )
        command.add_argument("--threads", default=argparse.SUPPRESS, help=THREADS_HELP)
    return parser


def _user_error(e: BaseException) -> bool:
    """Mistakes a user can fix (bad values, paths, files, missing extras), not bugs in spyrl."""
    import yaml

    return isinstance(e, (ValueError, OSError, ImportError, yaml.YAMLError))


# An error line quotes values (a path, a setting): a hostile one must not make it megabytes long.
MAX_ERROR_CHARS = 2000


def one_line(e: BaseException) -> str:
    """An error as one line of at most :data:`MAX_ERROR_CHARS` characters (and the count it had)."""
    line = re.sub(r"\s*\n\s*", " ", str(e).strip()) or type(e).__name__
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS] + f"... ({len(line)} characters)"


def _print_error(e: BaseException) -> None:
    errors.print("[red]error:[/red] " + markup_safe(one_line(e)), highlight=False, soft_wrap=True)


def _interruptible() -> None:
    """SIGINT interrupts, even when the shell started the command in the background (``spyrl serve &``):
    a shell ignores SIGINT in background jobs and Python then never raises KeyboardInterrupt, so
    ``kill -INT`` ended the command with exit code 0 instead of 130. (A terminal's Ctrl-C reaches only
    the foreground job, so this changes nothing for a background job at the terminal.)"""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _set_threads(setting: str | None) -> None:
    """``--threads``, checked, for every model the command loads, here and in the processes it starts."""
    if setting is not None:
        from agents.threads import SETTING_ENV, parse_threads

        parse_threads(setting)
        os.environ[SETTING_ENV] = setting.strip()


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command. A user's mistake prints ``error: ...`` (one line) and returns 2; a bug keeps
    its traceback, and ``--debug`` shows the traceback of every error. Run as the process's own
    command line, after closing an engine it ends the process at once (:func:`_exit_now`)."""
    if argv is None:  # the process's own command line
        _interruptible()
    code = _run(argv)
    if argv is None and CLOSED_ENGINES:
        _exit_now(code)
    return code


def _run(argv: Sequence[str] | None) -> int:
    try:  # installed packages' operators, tasks and backends, before --degrade/--task read their choices
        load_plugins()
    except ImportError as e:
        _print_error(e)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.verbose:
        quiet_libraries()
    try:
        import datasets

        datasets.disable_progress_bars()  # the CLI shows its own progress
    except ImportError:  # pragma: no cover - core dependency
        pass
    args.argv = ["spyrl", *(sys.argv[1:] if argv is None else argv)]  # what a look in the ledger records
    try:
        _set_threads(args.threads)
        return args.func(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        errors.print("[red]interrupted[/red]", highlight=False)
        return 130
    except Exception as e:
        if args.debug or not _user_error(e):
            raise
        _print_error(e)
        return 2
    finally:
        close_agents()
        release_reservations()


def _exit_now(code: int) -> None:
    """End the process with ``code`` at once, its output flushed: no interpreter teardown, where a
    closed engine's native library may abort."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(code)
