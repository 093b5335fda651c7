"""The main job's time: ``spyrl play`` with SmolLM2 (warm cache) against raw generation of the same game.

Runs ``spyrl play --agent smollm2`` as a user would (a fresh process: imports, model load, five
performances, five think-then-vote votes, transcript), ``--reps`` times after one warm-up run that
fills the conversion cache. Then, in this process, plain ``model.generate`` on the same prompts with
as many new tokens as the game's longest completion per stage. Prints the wall times, the budget
(60 s on the 2-core CPU machine) and the ratio play ÷ raw generation, measured side by side.

    python benchmarks/play_time.py [--reps 2] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from smollm2_iteration import raw_generate  # benchmarks/ is on sys.path when run as a script

from spy_env.stage import Stage

BUDGET_S = 60.0


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agents import smollm2

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    path = smollm2.converted_path()  # the warm cache
    out = Path(tempfile.mkdtemp(prefix="play-time-")) / "game.jsonl"
    command = [sys.executable, "-m", "spyrl", "play", "--agent", "smollm2", "--seed", str(args.seed), "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True)  # warm-up (page cache, bytecode)
    plays = []
    for _ in range(args.reps):
        out.unlink(missing_ok=True)
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        plays.append(time.perf_counter() - start)
    rows = [json.loads(line) for line in out.read_text().splitlines()]

    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    pad = AutoTokenizer.from_pretrained(str(path)).eos_token_id
    load = time.perf_counter() - start
    start = time.perf_counter()
    for stage in (Stage.PERFORM, Stage.VOTE):
        llm = [r for r in rows if r["stage"] == stage]
        longest = max(len(r["completion_token_ids"]) for r in llm)
        raw_generate(model, [r["prompt_token_ids"] for r in llm], longest, 16, pad)
    generate = time.perf_counter() - start

    play = min(plays)
    votes = [r for r in rows if r["stage"] == Stage.VOTE]
    valid = sum(not r["violations"] and r["vote"] >= 0 for r in votes)
    answered = sum("no_answer" not in r["violations"] for r in rows if r["stage"] == Stage.PERFORM)
    print(f"spyrl play (warm cache, best of {args.reps}): {play:.1f} s   budget {BUDGET_S:.0f} s")
    print(f"raw generate of the same game: {generate:.1f} s (+ model load {load:.1f} s)")
    print(f"ratio play / (load + raw generate): {play / (load + generate):.2f}")
    print(f"valid seat votes {valid}/{len(votes)}, performances with a boxed answer {answered}/{len(votes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
