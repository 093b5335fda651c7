"""Small helpers shared by tests: scripted games through the parallel API."""

from __future__ import annotations

from collections.abc import Sequence

import spy_env

GOOD = "Problem: what is $2 + 3$?\nSolution: $2 + 3 = 5$, so the answer is $\\boxed{5}$."


def play_scripted(
    env: spy_env.parallel_env,
    rounds: Sequence[tuple[Sequence[str] | None, Sequence[str]]],
    *,
    spy_seat: int,
    seed: int = 0,
):
    """Play rounds of (performances by seat or None for GOOD, vote replies by seat).

    Entries for eliminated seats are skipped. Returns the list of (rewards, terminations, infos)
    after each detection stage.
    """
    env.reset(seed=seed, options={"spy_seat": spy_seat, "document_index": 0})
    results = []
    for performances, votes in rounds:
        live = list(env.agents)
        seats = [env.seat_of[a] for a in live]
        env.step({a: (GOOD if performances is None else performances[s]) for a, s in zip(live, seats, strict=True)})
        _, rewards, terms, _, infos = env.step({a: votes[s] for a, s in zip(live, seats, strict=True)})
        results.append((rewards, terms, infos))
    return results


def vote(k: int | str) -> str:
    return f"My reasoning. <vote>{k}</vote>"
