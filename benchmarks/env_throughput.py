"""Env throughput: five-player Who-Is-the-Spy games/s vs PettingZoo's connect_four_v3 steps/s.

Both run in this process on one core (affinity pinned where the OS allows), in alternating
rounds (a slice of spy games, then a slice of connect_four steps), and the median of the rounds'
ratios is reported, so a burst of load elsewhere on a shared machine lands in one round, not on
one side of the comparison; absolute numbers are context only.
The spy env plays complete games through the wrapped AEC API with fixed pre-made actions:
every observation is rendered (prompt text included), every action parsed and scored.

    python benchmarks/env_throughput.py [--games 2000] [--c4-steps 20000] [--rounds 5] [--smoke]
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


def spy_games_per_second(games: int, first_seed: int = 0) -> tuple[float, float]:
    import spy_env

    env = spy_env.make(n_players=5)
    steps = 0
    start = time.perf_counter()
    for g in range(first_seed, first_seed + games):
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


def connect_four_steps_per_second(steps: int, seed: int = 0) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pettingzoo.classic import connect_four_v3

    env = connect_four_v3.env()
    rng = np.random.default_rng(seed)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=2000)
    parser.add_argument("--c4-steps", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5, help="alternating slices; the median ratio is reported")
    parser.add_argument("--smoke", action="store_true", help="a few games and steps: checks the path, not the speed")
    args = parser.parse_args(argv)
    if args.smoke:
        args.games, args.c4_steps, args.rounds = 10, 200, 2
    print(pin_one_core())
    spy_games_per_second(20)  # warm-up: corpus load, imports
    connect_four_steps_per_second(200)
    games, spy, c4 = [], [], []
    for r in range(args.rounds):
        games_s, spy_steps_s = spy_games_per_second(args.games // args.rounds, first_seed=r * args.games)
        c4_steps_s = connect_four_steps_per_second(args.c4_steps // args.rounds, seed=r)
        games.append(games_s)
        spy.append(spy_steps_s)
        c4.append(c4_steps_s)
        print(
            f"round {r + 1}: spy_env {spy_steps_s:8.0f} steps/s, connect_four {c4_steps_s:8.0f} steps/s, "
            f"ratio {spy_steps_s / c4_steps_s:.2f}"
        )
    ratio = float(np.median(np.asarray(spy) / np.asarray(c4)))
    print(f"spy_env 5-player : {np.median(games):10.1f} games/s  ({np.median(spy):10.1f} AEC steps/s), median")
    print(f"connect_four_v3  : {np.median(c4):10.1f} steps/s (random legal moves), median")
    print(f"ratio spy_env steps/s : connect_four steps/s = {ratio:.2f} (median of {args.rounds} rounds)")
    print(f"target ratio >= 1.5: {'met' if ratio >= 1.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
