"""The main job's time: ``spyrl play`` with SmolLM2 (warm cache), one row per speed lever, side by side.

Each path is ``spyrl play --agent smollm2`` as a user runs it (a fresh process: imports, model load,
five performances, five think-then-vote votes, transcript), the paths interleaved ``--reps`` times
after one warm-up run that fills the conversion cache:

- ``float32, full prefill``: the path before issue #27 (``--dtype float32 --no-share-prefix``, and torch's
  own linear products: ``SPYRL_WEIGHTS_FIRST=0``);
- ``float32, shared prefixes, torch's linear``: a game's civilians share their copy and the performances,
  so their long common prefix is encoded once and decoding appends to a reserved cache (``--dtype
  float32``, ``SPYRL_WEIGHTS_FIRST=0``);
- ``float32, shared prefixes``: that, with a decode step's products computed weights first
  (:mod:`agents.weights_first`: ``--dtype float32``, ``SPYRL_WEIGHTS_FIRST=1``; what an AMD CPU gets unasked);
- ``bf16, full prefill``: bfloat16 weights on a CPU that computes bf16 natively (``--dtype bfloat16
  --no-share-prefix``);
- ``default``: what ``spyrl play`` does today (``--dtype fast``: bf16 where native, shared prefixes);
- ``int8``: linear weights in int8, one scale per channel, the output head float32 (``--dtype int8``,
  shared prefixes; :func:`agents.hf.quantize_int8`), the lever for a CPU without native bf16.

Prints the median and spread of each path's wall time and its ratio to the first, measured in this
run, then the start-up row: what a fresh ``spyrl play`` does before its first token (``--dtype float32``),
timed in a fresh process phase by phase (the CLI's imports; torch and transformers; the model and its
tokenizer; the corpus and the first game's reset), beside the float32 game it precedes. Then two checks
that the fast paths play the same game:

- greedy (``--temperature 0``) float32 games with and without shared prefixes, and with weights-first
  products and torch's: the same tokens;
- SmolLM2's constrained vote (its argmax seat) on a fixed set of vote prompts (``--agreement-games``
  heuristic-performed 5-player games, every seat's vote), float32 against bfloat16 and against int8:
  the share of equal votes (goal: ≥ 95% each), and the seconds each took to vote.

A CPU with AVX-512 or AMX can stand in for one without (``--isa avx2``): the command runs again with
torch's kernels (ATen, oneDNN, MKL, FBGEMM) held to AVX2, as on a CPU without native bf16; the bf16 rows
and votes are left out there (emulated bf16 is hundreds of times slower), so ``fast`` is float32.

    python benchmarks/play_time.py [--reps 3] [--seed 0] [--agreement-games 20] [--model smollm2] [--isa avx2]
    python benchmarks/play_time.py --smoke   # a tiny random model, one run a path: checks the path, not the speed
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATHS = {
    "float32, full prefill": ["--dtype", "float32", "--no-share-prefix"],
    "float32, shared prefixes, torch's linear": ["--dtype", "float32"],
    "float32, shared prefixes": ["--dtype", "float32"],
    "bf16, full prefill": ["--dtype", "bfloat16", "--no-share-prefix"],
    "default (fast: bf16 where native, shared prefixes)": [],
    "int8, shared prefixes": ["--dtype", "int8"],
}


# Each library's own switch for the instruction sets it may use, read when it loads.
AVX2_ONLY = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
}


# agents/weights_first.py's switch: models as loaded, or weights first on any CPU (auto: on AMD CPUs)
TORCH_LINEAR, WEIGHTS_FIRST = {"SPYRL_WEIGHTS_FIRST": "0"}, {"SPYRL_WEIGHTS_FIRST": "1"}
ENVIRONMENTS = {
    "float32, full prefill": TORCH_LINEAR,
    "float32, shared prefixes, torch's linear": TORCH_LINEAR,
    "float32, shared prefixes": WEIGHTS_FIRST,
}


def play(agent: str, seed: int, out: Path, extra: list[str], env: dict[str, str] | None = None) -> float:
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "spyrl", "play", "--agent", agent, "--seed", str(seed), "--out", str(out)]
    start = time.perf_counter()
    subprocess.run(command + extra, check=True, capture_output=True, env={**os.environ, **(env or {})})
    return time.perf_counter() - start


# What `spyrl play --agent AGENT --dtype float32` does before its first token, timed phase by phase.
STARTUP = """
import json, sys, time
start = time.perf_counter()
from spyrl.commands import build_parser
import spyrl.commands.play, spy_env.runner
cli = time.perf_counter()
import torch, transformers
libraries = time.perf_counter()
from spyrl.commands.common import game_config
from spyrl.commands.policies import seat_policies
args = build_parser().parse_args(["play", "--agent", sys.argv[1], "--dtype", "float32"])
config = game_config(args)
seat_policies(args, config.rules.n_players)
model = time.perf_counter()
import spy_env
spy_env.parallel_env(config).reset(seed=0)
game = time.perf_counter()
print(json.dumps({"CLI imports": cli - start, "torch and transformers": libraries - cli,
                  "model and tokenizer": model - libraries, "corpus and reset": game - model}))
"""


def startup(agent: str) -> tuple[float, dict[str, float]]:
    """A fresh process's wall time up to the first token, and its phases (interpreter start-up and exit
    are the wall time less the phases)."""
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", STARTUP, agent], check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    return wall, json.loads(run.stdout.strip().splitlines()[-1])


def tokens(out: Path) -> list[list[int]]:
    return [json.loads(line)["completion_token_ids"] for line in out.read_text().splitlines()]


def vote_agreement(model: str, games: int, dtypes: tuple[str, ...]) -> dict[str, tuple[int, int, float]]:
    """Constrained greedy votes in each of ``dtypes`` (float32 first) against float32's, on every seat's vote
    of ``games`` heuristic games: ``{dtype: (equal votes, votes, seconds to vote)}``."""
    import spy_env
    from agents import HeuristicAgent, SamplingParams
    from agents.decoding import DecodingOptions
    from agents.hf import HFPolicy

    observations = []
    performer = HeuristicAgent(seed=0)
    for seed in range(games):
        env = spy_env.parallel_env()
        obs, _ = env.reset(seed=seed)
        obs, *_ = env.step(dict(zip(env.agents, performer.act([obs[a] for a in env.agents]), strict=True)))
        observations += [obs[a] for a in env.agents]
    votes, out = {}, {}
    for dtype in dtypes:
        policy = HFPolicy.from_pretrained(
            model,
            sampling=SamplingParams(temperature=0.0, max_new_tokens=8),
            dtype=dtype,
            decoding=DecodingOptions(vote_mode="constrained"),
        )
        start = time.perf_counter()
        votes[dtype] = [a.text for a in policy.act(observations)]
        seconds = time.perf_counter() - start
        out[dtype] = (
            sum(a == b for a, b in zip(votes["float32"], votes[dtype], strict=True)),
            len(observations),
            seconds,
        )
    return out


def report_agreement(model: str, games: int, bf16: bool) -> bool:
    """Print each fast dtype's constrained votes against float32's (bf16 only where native); whether all agree."""
    dtypes = ("float32", "bfloat16", "int8") if bf16 else ("float32", "int8")
    agreement = vote_agreement(model, games, dtypes)
    base = agreement["float32"][2]
    for dtype in dtypes[1:]:
        equal, total, seconds = agreement[dtype]
        print(
            f"constrained greedy votes, {dtype} vs float32: {equal}/{total} equal ({equal / total:.0%}, goal ≥ 95%); "
            f"voting took {seconds:.1f} s against {base:.1f} s (×{base / seconds:.2f})"
        )
    return all(equal >= 0.95 * total for equal, total, _ in agreement.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--agreement-games", type=int, default=20)
    p.add_argument("--model", default="smollm2", help="smollm2, tiny (a random model built here) or a model folder")
    p.add_argument("--smoke", action="store_true", help="the tiny model, one run a path, one agreement game")
    p.add_argument("--isa", choices=("native", "avx2"), default="native", help="avx2: torch's kernels held to AVX2")
    args = p.parse_args(argv)
    if args.isa == "avx2" and any(os.environ.get(k) != v for k, v in AVX2_ONLY.items()):
        # the switches are read when the libraries load: run again with them set (the children inherit them)
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **AVX2_ONLY})
    if args.smoke:
        args.model, args.reps, args.agreement_games = "tiny", 1, 1
    from agents.hf import native_bf16
    from agents.models import resolve_model_path

    folder = Path(tempfile.mkdtemp(prefix="play-time-"))
    model = resolve_model_path(args.model, tiny_dir=folder / "tiny")
    agent = "smollm2" if args.model == "smollm2" else f"hf:{model}"
    short = ["--max-new-tokens", "16"] if args.smoke else []
    if not args.smoke:
        play(agent, args.seed, folder / "warm.jsonl", [])  # warm-up: conversion cache, page cache, bytecode
    paths = {name: extra for name, extra in PATHS.items() if native_bf16() or not name.startswith("bf16")}
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.reps):
        for name, extra in paths.items():
            times[name].append(play(agent, args.seed, folder / "game.jsonl", [*short, *extra], ENVIRONMENTS.get(name)))
    print(
        f"spyrl play --agent {args.model} (warm cache), {args.reps} runs a path, interleaved; native bf16: {native_bf16()}; "
        f"kernels: {'AVX2 only' if args.isa == 'avx2' else 'all this CPU has'}"
    )
    base = statistics.median(times[next(iter(PATHS))])
    for name, runs in times.items():
        median = statistics.median(runs)
        print(f"  {name:<52} {median:6.1f} s  (min {min(runs):.1f}, max {max(runs):.1f})  ×{base / median:.2f}")

    starts = [startup(agent) for _ in range(args.reps)]
    wall = statistics.median(w for w, _ in starts)
    game = statistics.median(times["float32, shared prefixes"])
    phases = ", ".join(f"{k} {statistics.median(p[k] for _, p in starts):.1f} s" for k in starts[0][1])
    print(f"  {'start-up before the first token (float32)':<52} {wall:6.1f} s  ({phases}; ", end="")
    print(f"{wall / game:.0%} of the float32 shared-prefix game)")

    greedy = [*short, "--temperature", "0", "--dtype", "float32"]
    play(agent, args.seed, folder / "shared.jsonl", greedy, WEIGHTS_FIRST)
    play(agent, args.seed, folder / "full.jsonl", [*greedy, "--no-share-prefix"], WEIGHTS_FIRST)
    play(agent, args.seed, folder / "torch.jsonl", greedy, TORCH_LINEAR)
    same = tokens(folder / "shared.jsonl") == tokens(folder / "full.jsonl")
    print(f"greedy float32 game, shared prefixes vs full prefill: {'the same tokens' if same else 'DIFFERENT tokens'}")
    first = tokens(folder / "shared.jsonl") == tokens(folder / "torch.jsonl")
    print(f"greedy float32 game, weights-first vs torch's linear: {'the same tokens' if first else 'DIFFERENT tokens'}")
    agree = report_agreement(model, args.agreement_games, native_bf16())
    # a random tiny model's near-uniform votes are no test of a dtype: the smoke run checks the path only
    return 0 if same and first and (args.smoke or agree) else 1


if __name__ == "__main__":
    sys.exit(main())
