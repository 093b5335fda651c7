"""Human-readable transcripts of a game (``render_mode`` "ansi"/"human", ``spyrl play``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from spy_env.display import terminal_safe
from spy_env.parsing import vote_reasoning

if TYPE_CHECKING:
    from spy_env.game import Game

__all__ = ["transcript"]

_PREVIEW_CHARS = 1_200


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more chars]"


def transcript(game: Game, *, full: bool = False) -> Text:
    """The game so far as styled text; roles are revealed only once the game is over.

    ``Text.plain`` gives the uncoloured transcript. Long texts are clipped unless ``full``.
    """
    limit = 10**9 if full else _PREVIEW_CHARS
    out = Text()
    out.append(f"Who Is the Spy? — document {terminal_safe(game.document.id)}", style="bold")
    out.append(f"  ({game.n_players} players, task {game.task.name}, degrade {game.degraded.operator})\n")
    for log in game.log:
        out.append(f"\n── Round {log.round + 1}: performances ──\n", style="bold cyan")
        for seat in sorted(log.performances):
            perf = log.performances[seat]
            out.append(f"Player {seat + 1}", style="bold")
            if perf.violations:
                out.append(f"  [{', '.join(perf.violations)}]", style="yellow")
            out.append("\n" + terminal_safe(_clip(perf.shown, limit)) + "\n")
        if log.votes:
            out.append(f"\n── Round {log.round + 1}: votes ──\n", style="bold cyan")
        for seat in sorted(log.votes):
            vote = log.votes[seat]
            target = "N/A" if vote.target is None else f"Player {vote.target + 1}"
            out.append(f"Player {seat + 1} → {target}", style="bold")
            if vote.violations:
                out.append(f"  [{', '.join(vote.violations)}]", style="yellow")
            reasons = vote_reasoning(vote.text)
            if reasons:
                out.append("  " + terminal_safe(_clip(reasons, limit // 4)), style="italic")
            out.append("\n")
        if log.result is not None and log.result.eliminated is not None:
            out.append(f"Eliminated: Player {log.result.eliminated + 1}\n", style="magenta")
    if game.done:
        caught = any(log.result is not None and log.result.spy_caught for log in game.log)
        out.append("\n── Result ──\n", style="bold cyan")
        out.append(f"The spy was Player {game.spy_seat + 1}. ", style="bold red")
        out.append("Caught by the vote.\n" if caught else "The spy survived.\n", style="bold")
        for seat in range(game.n_players):
            comps = {"detect": 0.0, "perform": 0.0, "penalty": 0.0}
            total = 0.0
            for log in game.log:
                if log.result is not None and log.result.alive[seat]:
                    for key, value in game.components(log.result, seat).items():
                        if key in comps:
                            comps[key] += value
                    total += game.reward(log.result, seat)
            role = "spy" if seat == game.spy_seat else "civilian"
            out.append(
                f"Player {seat + 1} ({role}): reward {total:+.3f} = detect {comps['detect']:+.3f}"
                f" + perform {comps['perform']:+.3f} + penalty {comps['penalty']:+.3f}\n",
                style="red" if seat == game.spy_seat else "green",
            )
    return out
