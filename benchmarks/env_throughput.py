"""Env throughput: five-player Who-Is-the-Spy games/s vs PettingZoo's connect_four_v3 steps/s.

Both run in this process, one after the other, on one core (affinity pinned where the OS
allows), so the ratio is meaningful on a noisy shared machine; absolute numbers are not.
The spy env plays complete games through the wrapped AEC API with fixed pre-made actions:
every observation is rendered (prompt text included), every action parsed and scored.

    python benchmarks/env_throughput.py [--games 2000] [--c4-steps 20000]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

from spy_env.stage import Stage


def pin_one_core() -> str:
    try:
        core = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {core})
        return f"pinned to core {core}"
    except (AttributeError, OSError):
        return "not pinned"


PERFORMANCES = [
    (
        f"Problem {k}: A bakery bakes $12$ trays of $24$ muffins and sells $185$ in the morning and "
        f"$67$ in the afternoon. How many are left?\n\nSolution: $12 \\times 24 = 288$ muffins; "
        f"$288 - 185 - 67 = 36$. The answer is $\\boxed{{36}}$."
    )
    for k in range(10)
]


def spy_games_per_second(games: int) -> tuple[float, float]:
    import spy_env

    env = spy_env.make(n_players=5)
    steps = 0
    start = time.perf_counter()
    for g in range(games):
        env.reset(seed=g)
        for _agent in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            seat = obs["seat"]
            if Stage.of(obs["stage"]) is Stage.PERFORM:
                action = PERFORMANCES[seat]
            else:
                action = f"Player {(seat + 1) % 5 + 1} looks off. <vote>{(seat + 1) % 5 + 1}</vote>"
            env.step(action)
            steps += 1
    elapsed = time.perf_counter() - start
    return games / elapsed, steps / elapsed


def connect_four_steps_per_second(steps: int) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pettingzoo.classic import connect_four_v3

    env = connect_four_v3.env()
    rng = np.random.default_rng(0)
    done_steps = 0
    start = time.perf_counter()
    while done_steps < steps:
        env.reset(seed=int(rng.integers(1 << 30)))
        for _agent in env.agent_iter():
            obs, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            legal = np.flatnonzero(obs["action_mask"])
            env.step(int(rng.choice(legal)))
            done_steps += 1
    return done_steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=2000)
    parser.add_argument("--c4-steps", type=int, default=20000)
    args = parser.parse_args()
    print(pin_one_core())
    spy_games_per_second(20)  # warm-up: corpus load, imports
    games_s, spy_steps_s = spy_games_per_second(args.games)
    c4_steps_s = connect_four_steps_per_second(args.c4_steps)
    print(f"spy_env 5-player : {games_s:10.1f} games/s  ({spy_steps_s:10.1f} AEC steps/s)")
    print(f"connect_four_v3  : {c4_steps_s:10.1f} steps/s (random legal moves)")
    print(f"ratio spy_env steps/s : connect_four steps/s = {spy_steps_s / c4_steps_s:.2f}")
    print(f"target >= 1000 games/s: {'met' if games_s >= 1000 else 'NOT met'}")


if __name__ == "__main__":
    main()
