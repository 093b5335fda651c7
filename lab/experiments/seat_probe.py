"""Do a model's votes follow the texts or the seats? Its votes on a run's training games, the texts moved.

A voter that reads the performances puts its probability on the spy's *text* wherever that text sits; a
voter that leans on seats (the first and the last shown, say) puts it on the same seats whatever they
show. This probe replays first-round civilian votes of a run's kept training games (``run.keep_buffers``)
with the performances moved between seats and asks each ``--model`` for its vote distribution (constrained
votes at the run's vote temperature, as the trainer draws them). For every civilian voter the four texts
of its fellow seats go round those four seats in the four cyclic rotations (the voter's own performance
stays in its seat), so the spy's text sits once in each of them, and per vote:

- ``as_played``: the probability on the spy in the game as it was played (rotation 0);
- ``balanced``: the mean over the four rotations of the probability on the seat holding the spy's text:
  accuracy with the seat lean averaged out (chance 0.25);
- ``text_effect`` and ``seat_effect``: over the 4×4 table (rotation × seat) of one vote, the spread
  (standard deviation) of its four text means and of its four seat means: each text visits every seat once
  and each seat shows every text once, so the two are the table's two main effects. A voter that reads
  only seats has a text effect of 0;
- ``seat_lean``: the mean probability a seat receives over all rotations, per seat 1..n, where it is a
  legal vote (0.25 each for an even voter).

Every model after the first is also compared with the first on the same votes (``vs_first``: the change of
each metric, paired by game), so a trained model is read against its start.

A scripted voter that reads only the texts (``--model heuristic-soft``, a softmax over the heuristic's scores)
is the probe's positive control: its seat effect is 0 and its text effect what its reading gives.

Every interval resamples games (a game's civilians read the same texts). The games come from the run's
own buffers, the training split only; the texts are the run's, nothing is generated.

    python lab/experiments/seat_probe.py runs/attempt13/phase_v/detect-only --iterations 161-192 \\
        --config lab/results/selfplay/attempt13/phase_v.yaml \\
        --model runs/attempt11/spy-soft/checkpoints/iter_00024/model \\
        --model runs/attempt13/phase_v/detect-only/checkpoints/iter_00192/model --out seat_probe.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness import command_of, experiment_parser, user_error

from spy_env.buffer import EpisodeBuffer, reset_args
from spy_env.heldout import bootstrap
from spy_env.io import refuse_existing_outputs, write_text
from spy_env.stage import Stage

METRICS = ("as_played", "balanced", "text_effect", "seat_effect")


def iteration_range(text: str) -> tuple[int, int]:
    """``A-B`` (1-based, inclusive) as ``(A, B)``.

    >>> iteration_range("161-192")
    (161, 192)
    """
    first, sep, last = text.partition("-")
    if not sep or not first.isdigit() or not last.isdigit() or not 1 <= int(first) <= int(last):
        raise ValueError(f"--iterations {text!r}: give A-B with 1 <= A <= B")
    return int(first), int(last)


def kept_rows(run: Path, iteration: int) -> list[dict[str, Any]]:
    """The rows of ``run``'s kept buffer of ``iteration`` (1-based); a ``ValueError`` where the run kept none."""
    path = run / "buffers" / f"iter_{iteration - 1:05d}.parquet"  # the files count from 0
    if not path.is_file():
        raise ValueError(f"{str(path)!r} not found: the run kept no buffer for iteration {iteration}")
    return EpisodeBuffer.load(path).rows


def add_iteration_ranges(parser: argparse.ArgumentParser) -> None:
    """The repeatable ``--iterations A-B`` option of the scripts that read kept buffers by ranges."""
    parser.add_argument(
        "--iterations", action="append", required=True,
        help="A-B: a range of iterations (1-based) measured together (repeatable: one result per range)",
    )  # fmt: skip


def played_games(run: Path, first: int, last: int) -> list[dict[str, Any]]:
    """The first-round games of iterations ``first..last`` of ``run``'s buffers: each game's reset arguments,
    performances by seat, spy seat and civilian voters."""
    games = []
    for iteration in range(first, last + 1):
        rows: dict[int, list[dict]] = {}
        for row in kept_rows(run, iteration):
            if row["round"] == 0:
                rows.setdefault(row["game_id"], []).append(row)
        for game_rows in rows.values():
            texts = {r["seat"]: r["completion"] for r in game_rows if r["stage"] == Stage.PERFORM}
            voters = sorted(r["seat"] for r in game_rows if r["stage"] == Stage.VOTE and r["role"] == "civilian")
            games.append({"reset": reset_args(game_rows[0]), "texts": texts,
                          "spy": game_rows[0]["spy_seat"], "voters": voters})  # fmt: skip
    return games


def rotations(voter: int, n_players: int) -> list[dict[int, int]]:
    """For each cyclic rotation of the voter's fellow seats, the seat whose text each seat shows.

    >>> rotations(1, 3)
    [{0: 0, 2: 2}, {0: 2, 2: 0}]
    """
    others = [s for s in range(n_players) if s != voter]
    k = len(others)
    return [{others[i]: others[(i + r) % k] for i in range(k)} for r in range(k)]


def vote_observation(host: Any, game: dict[str, Any], voter: int, shows: dict[int, int]) -> Any:
    """``voter``'s first vote observation in ``game`` replayed with seat ``s`` showing seat ``shows[s]``'s text."""
    texts = game["texts"]
    host.new_game(game["reset"]["seed"], game["reset"]["options"])
    for seat in range(host.config.rules.n_players):
        host.step_seat(seat, texts[shows.get(seat, seat)])
    return host.observe(voter)


def vote_table(policy: Any, host: Any, game: dict[str, Any], voter: int) -> tuple[np.ndarray, list[dict[int, int]]]:
    """The voter's probability on each seat (columns) under each rotation (rows), and the rotations."""
    n = host.config.rules.n_players
    turns = rotations(voter, n)
    actions = policy.act([vote_observation(host, game, voter, shows) for shows in turns])
    table = np.zeros((len(turns), n))
    for r, action in enumerate(actions):
        for key, p in (action.vote_distribution or {}).items():
            if key.isdigit() and 1 <= int(key) <= n:
                table[r, int(key) - 1] = p
    return table, turns


def vote_metrics(table: np.ndarray, turns: list[dict[int, int]], spy: int, voter: int) -> dict[str, Any]:
    """A vote's metrics (the module docstring) from its rotation × seat table.

    >>> turns = rotations(0, 3)
    >>> m = vote_metrics(np.array([[0, 0.9, 0.1], [0, 0.9, 0.1]]), turns, spy=1, voter=0)
    >>> m["as_played"], m["balanced"], round(m["seat_effect"], 2), m["text_effect"]
    (0.9, 0.5, 0.4, 0.0)
    """
    others = sorted(turns[0])
    text_at = [{shown: seat for seat, shown in shows.items()} for shows in turns]  # text -> seat showing it
    text_means = [np.mean([table[r, text_at[r][t]] for r in range(len(turns))]) for t in others]
    seat_means = [float(np.mean(table[:, s])) for s in others]
    return {
        "as_played": float(table[0, spy]),
        "balanced": float(text_means[others.index(spy)]),
        "text_effect": float(np.std(text_means)),
        "seat_effect": float(np.std(seat_means)),
        "seats": dict(zip(others, seat_means, strict=True)),
    }


def probe_model(policy: Any, host: Any, games: list[dict[str, Any]]) -> dict[str, Any]:
    """Every metric over ``games`` (means per game, intervals over games, the means themselves in
    ``per_game``) and the seat lean."""
    per_game: dict[str, list[float]] = {m: [] for m in METRICS}
    lean: dict[int, list[float]] = {}
    for game in games:
        votes = [vote_metrics(*vote_table(policy, host, game, v), game["spy"], v) for v in game["voters"]]
        for m in METRICS:
            per_game[m].append(float(np.mean([v[m] for v in votes])))
        for v in votes:
            for seat, p in v["seats"].items():
                lean.setdefault(seat, []).append(p)
    out: dict[str, Any] = {m: bootstrap(values).to_dict() for m, values in per_game.items()}
    out["per_game"] = per_game
    out["seat_lean"] = [float(np.mean(lean[s])) if s in lean else math.nan for s in range(host.config.rules.n_players)]
    return out


def voter_policy(spec: str, config: Any) -> Any:
    """A saved model folder's constrained votes at the run's decoding, one forward pass each (as the trainer
    plays them), or the agent ``spec`` names (one that records its vote distribution, e.g. ``heuristic-soft``)."""
    if (Path(spec) / "config.json").is_file():
        from trainers.policies import fixed_agent
        from trainers.votes import ForwardVotes

        return ForwardVotes(fixed_agent(f"hf:{spec}", config.run.seed, config.decoding, device="cpu", dtype="fast"))
    from agents import load

    return load(spec, seed=config.run.seed)


def main(argv: list[str] | None = None) -> int:
    p = experiment_parser(__doc__, None, "JSON file to write", overrides=False)
    p.add_argument("run", help="a training run folder that kept its buffers (buffers/iter_NNNNN.parquet)")
    p.add_argument("--config", required=True, help="the run's config YAML (the game it played, its vote decoding)")
    p.add_argument("--iterations", required=True, help="A-B: the iterations whose games are probed (1-based)")
    p.add_argument(
        "--model", action="append", required=True,
        help="a saved model folder, or an agent spec that records its vote distribution, e.g. heuristic-soft "
        "(repeatable)",
    )  # fmt: skip
    args = p.parse_args(argv)
    from agents.registry import backend_of
    from spy_env.env import GameHost
    from trainers.config import SpyRLConfig

    try:
        first, last = iteration_range(args.iterations)
        for spec in args.model:
            if not (Path(spec) / "config.json").is_file() and backend_of(spec) is None:
                raise ValueError(f"--model {spec!r}: neither a model folder (no config.json) nor an agent spec")
        if not Path(args.config).is_file():
            raise ValueError(f"--config {args.config!r}: no such file")
        refuse_existing_outputs([args.out], overwrite=args.overwrite)
        config = SpyRLConfig.from_yaml(args.config)
        games = played_games(Path(args.run), first, last)
    except ValueError as e:
        return user_error(e)
    host = GameHost(config.game)
    result: dict[str, Any] = {"command": command_of(__file__, argv), "run": args.run, "iterations": [first, last],
                              "games": len(games), "votes": sum(len(g["voters"]) for g in games), "models": {}}  # fmt: skip
    for spec in args.model:
        start = time.perf_counter()
        row = probe_model(voter_policy(spec, config), host, games)
        row["minutes"] = (time.perf_counter() - start) / 60
        if result["models"]:
            first = next(iter(result["models"].values()))["per_game"]
            row["vs_first"] = {
                m: bootstrap(np.subtract(row["per_game"][m], first[m]).tolist()).to_dict() for m in METRICS
            }
        result["models"][spec] = row
        line = ", ".join(f"{m} {row[m]['mean']:.3f}" for m in METRICS)
        print(f"{spec}: {line}; seat lean {', '.join(f'{p:.3f}' for p in row['seat_lean'])}", flush=True)
    write_text(Path(args.out), json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
