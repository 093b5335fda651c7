"""What the commands print: the consoles, untrusted text made safe to show, the results table of a
game, forfeit warnings, and the libraries' chatter kept out of it (``--verbose`` lets it through).

Names, ids, paths and model output are untrusted: they are printed through :func:`echo`, :func:`cell`
or ``markup_safe`` so that neither terminal escapes nor rich markup in them take effect.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from spy_env.display import markup_safe, terminal_safe
from spy_env.stage import Stage

__all__ = [
    "LIBRARIES",
    "cell",
    "console",
    "echo",
    "errors",
    "quiet_libraries",
    "report_forfeits",
    "result_rows",
    "results_table",
]

# Wide enough for the results table when the output is not a terminal.
console = Console(width=None if sys.stdout.isatty() else 160)
errors = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def echo(text: object) -> None:
    """Print plain text that may hold untrusted parts (names, ids, paths): escapes stripped."""
    print(terminal_safe(text))


def cell(value: object, style: str = "") -> Text:
    """A table cell from untrusted data: a ``Text``, so rich never reads it as markup."""
    return Text(terminal_safe(value), style=style)


def report_forfeits(rows: Sequence[dict[str, Any]], args: argparse.Namespace) -> int:
    """Say which agents forfeited actions (failed backend calls) and why; 3 when an agent forfeited
    every action (a dead backend), unless ``--allow-forfeits``."""
    from spy_env.metrics import forfeits_by_agent
    from spy_env.runner import safe_reason

    code = 0
    for name, f in forfeits_by_agent(rows).items():
        every = f["forfeits"] == f["actions"]
        errors.print(
            f"[yellow]warning:[/yellow] agent {markup_safe(name)} forfeited {f['forfeits']} of {f['actions']} "
            f"actions ({markup_safe(safe_reason(f['reason']))})",
            highlight=False,
            soft_wrap=True,
        )
        if every and not args.allow_forfeits:
            errors.print(
                f"[red]error:[/red] agent {markup_safe(name)} forfeited every action; pass --allow-forfeits to accept",
                highlight=False,
                soft_wrap=True,
            )
            code = 3
    return code


def result_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per model call of a results file (``eval``, ``leaderboard``), for :func:`report_forfeits`."""
    return [
        {"agent_name": results["model"], "error": error}
        for result in results["results"].values()
        for item in result.get("items", ())
        for error in item.get("errors", [item.get("error", "")])
    ]


def results_table(rows: Sequence[dict[str, Any]], n_players: int) -> Table:
    """Each seat's role, agent, votes and rewards, summed over a game's buffer rows."""
    table = Table(title="Results")
    for col in (
        "player",
        "role",
        "agent",
        "votes recv.",
        "voted",
        "detect",
        "perform",
        "penalty",
        "reward",
        "violations",
    ):
        table.add_column(col, justify="right" if col not in ("role", "agent", "violations") else "left")
    for seat in range(n_players):
        mine = [r for r in rows if r["seat"] == seat]
        if not mine:
            continue
        votes = [r for r in mine if r["stage"] == Stage.VOTE]
        voted = ", ".join("N/A" if r["vote"] < 0 else str(r["vote"] + 1) for r in votes)
        received = sum(r["votes_received"] for r in votes)
        detect = sum(r["reward_detect"] for r in mine)
        perform = sum(r["reward_perform"] for r in mine)
        penalty = sum(r["reward_penalty"] for r in mine)
        reward = sum(r["reward"] for r in mine)
        violations = sorted({v for r in mine for v in r["violations"]})
        role = mine[0]["role"]
        table.add_row(
            *(
                cell(value, style)
                for value, style in (
                    (f"Player {seat + 1}", ""),
                    (role, "red" if role == "spy" else "green"),
                    (mine[0]["agent_name"], ""),
                    (received, ""),
                    (voted, ""),
                    (f"{detect:+.3f}", ""),
                    (f"{perform:+.3f}", ""),
                    (f"{penalty:+.3f}", ""),
                    (f"{reward:+.3f}", ""),
                    (", ".join(map(str, violations)) or "-", ""),
                )
            )
        )
    return table


# Dependencies whose progress bars, deprecation and advisory warnings are not the user's work.
LIBRARIES = ("transformers", "huggingface_hub", "accelerate", "datasets", "torch", "trl", "peft", "vllm")


def quiet_libraries() -> None:
    """Silence the libraries' chatter (a "Loading weights" bar, ``past_key_values``/``torch_dtype``
    deprecations) so the CLI shows the game; ``--verbose`` skips this. The environment variables
    take effect when transformers/huggingface_hub are first imported; if they already are, their
    switches are flipped directly. spyrl's own warnings still show."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # read by vLLM's engine processes too
    libraries = "|".join(LIBRARIES)
    for category in (DeprecationWarning, FutureWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=rf"({libraries})(\.|$)")
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()
