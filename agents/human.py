"""``human``: play a seat from the terminal.

Each observation's prompt is printed; the reply is typed over one or more lines and ends with
a line holding a single ``.`` (or end of input). In the detection stage a bare number or
``N/A`` is wrapped into ``<vote>…</vote>`` for convenience.

:func:`manual_control` is PettingZoo's ``manual_control()`` for this environment: one game of the
AEC environment with you at one seat and an agent spec at the others.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from agents.registry import any_argument, register_backend
from spy_env.display import terminal_safe
from spy_env.policy import Observation
from spy_env.stage import Stage

__all__ = ["HumanPolicy", "load_human", "manual_control"]

_BARE_VOTE = re.compile(r"^\s*(\d{1,2}|n/?a)\s*$", re.IGNORECASE)


class HumanPolicy:
    """A person at the keyboard (``input_fn`` and ``print_fn`` are injectable for tests)."""

    def __init__(
        self,
        name: str = "human",
        input_fn: Callable[[str], str] = input,
        print_fn: Callable[[str], None] | None = None,
    ) -> None:
        self.name = name
        self.input_fn = input_fn
        if print_fn is None:
            from rich.console import Console

            console = Console()
            # the prompt holds other players' text: shown, never obeyed as escapes or markup
            print_fn = lambda text: console.print(terminal_safe(text), markup=False, highlight=False)  # noqa: E731
        self.print_fn = print_fn

    def act(self, observations: Sequence[Observation]) -> list[str]:
        return [self._one(obs) for obs in observations]

    def _one(self, obs: Observation) -> str:
        stage = Stage.of(obs["stage"]).name
        self.print_fn(f"\n===== Player {obs['seat'] + 1}: {stage} =====\n{obs['prompt']}\n")
        hint = "your vote (a player number or N/A)" if stage == "VOTE" else "your performance"
        self.print_fn(f"Type {hint}; end with a line containing only '.'")
        lines = []
        while True:
            try:
                line = self.input_fn("> ")
            except EOFError:
                break
            if line.strip() == ".":
                break
            lines.append(line)
        text = "\n".join(lines)
        if stage == "VOTE" and _BARE_VOTE.match(text):
            text = f"<vote>{text.strip().upper() if 'a' in text.lower() else text.strip()}</vote>"
        return text


@register_backend("human", help="you, at the terminal", accepts=any_argument)
def load_human(argument: str, *, seed: int | None = None, **kwargs) -> HumanPolicy:
    """``human``: a person at the terminal (whatever follows ``:`` and the seed are ignored)."""
    return HumanPolicy(**kwargs)


def manual_control(
    seat: int = 0,
    others: str = "heuristic",
    *,
    seed: int | None = None,
    input_fn: Callable[[str], str] = input,
    print_fn: Callable[[str], None] | None = None,
    **game: Any,
) -> dict[str, float]:
    """Play one game of ``spy_env.env(**game)`` from the terminal, seat ``seat`` yours (0-based), ``others``
    (an agent spec) at every other seat; returns each agent's total reward. PettingZoo's ``manual_control()``."""
    import agents
    import spy_env

    env = spy_env.env(**game)
    env.reset(seed=seed)
    if not 0 <= seat < env.num_agents:
        raise ValueError(f"seat must be in 0..{env.num_agents - 1}, got {seat}")
    you, rest = HumanPolicy(input_fn=input_fn, print_fn=print_fn), agents.load(others, seed=seed)
    totals = dict.fromkeys(env.possible_agents, 0.0)
    for agent in env.agent_iter():
        observation, reward, termination, truncation, _ = env.last()
        totals[agent] += reward
        if termination or truncation:
            env.step(None)
            continue
        policy = you if env.possible_agents.index(agent) == seat else rest
        env.step(policy.act([observation])[0])
    return totals
