"""``spyrl play`` on a busy machine: its time beside known busy processes, with each thread setting.

Each row is ``spyrl play --agent smollm2 --dtype float32`` as a user runs it (a fresh process, warm
cache), with ``--threads all`` (one torch thread per core, torch's own choice and spyrl's before
``agents/threads.py``) or ``--threads auto`` (the cores free when the model loads), while ``LOAD``
other processes spin on the CPU (each a Python ``while True: pass``: one core's worth of work, the
known job). The settings alternate within each load, ``--reps`` times; every time is shown as a
ratio to the idle machine's time with the same setting and with ``all``, measured in this run.

Goals (issue #65): one busy process costs ≤ 1.5x the idle time, five ≤ 3x.

    python benchmarks/busy_play.py [--loads 0 1 5] [--reps 2] [--seed 0] [--model smollm2]
    python benchmarks/busy_play.py --smoke   # a tiny random model, the idle machine, one run a setting: the path, not the speed
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

SETTINGS = ("all", "auto")
SPIN = "while True: pass"


def play(agent: str, seed: int, out: Path, threads: str, extra: list[str]) -> float:
    out.unlink(missing_ok=True)
    command = [sys.executable, "-m", "spyrl", "play", "--agent", agent, "--seed", str(seed), "--dtype", "float32",
               "--threads", threads, "--out", str(out), *extra]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def spinners(n: int) -> list[subprocess.Popen]:
    """``n`` processes that each keep one core busy until killed; given a second to be scheduled."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    if procs:
        time.sleep(1.0)
    return procs


def measure(agent: str, args: argparse.Namespace, folder: Path, extra: list[str]) -> dict[int, dict[str, list[float]]]:
    times: dict[int, dict[str, list[float]]] = {}
    for load in args.loads:
        procs = spinners(load)
        try:
            times[load] = {setting: [] for setting in SETTINGS}
            for _ in range(args.reps):
                for setting in SETTINGS:
                    times[load][setting].append(play(agent, args.seed, folder / "game.jsonl", setting, extra))
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()
    return times


def cpu_line() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    flags = set(cpuinfo.read_text().split()) if cpuinfo.exists() else set()
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"CPU: {os.cpu_count()} cores, flags {' '.join(shown) or 'none of avx2/avx512'}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--loads", nargs="+", type=int, default=[0, 1, 5], help="busy processes beside each run")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="smollm2", help="smollm2, tiny (a random model built here) or a model folder")
    p.add_argument("--smoke", action="store_true", help="the tiny model, the idle machine only, one run a setting")
    args = p.parse_args(argv)
    if args.smoke:
        args.model, args.loads, args.reps = "tiny", [0], 1
    if 0 not in args.loads:
        p.error("--loads must include 0: every ratio is to the idle machine's time")
    from agents.models import resolve_model_path

    folder = Path(tempfile.mkdtemp(prefix="busy-play-"))
    model = resolve_model_path(args.model, tiny_dir=folder / "tiny")
    agent = "smollm2" if args.model == "smollm2" else f"hf:{model}"
    extra = ["--max-new-tokens", "16"] if args.smoke else []
    if not args.smoke:
        play(agent, args.seed, folder / "warm.jsonl", "all", extra)  # conversion cache, page cache, bytecode
    times = measure(agent, args, folder, extra)
    print(f"{cpu_line()}; spyrl play --agent {args.model} --dtype float32 (warm), {args.reps} runs a cell, alternating")
    idle = {setting: statistics.median(times[0][setting]) for setting in SETTINGS}
    print(f"{'busy processes':>15} {'--threads':>10} {'median s':>9} {'x idle (same)':>14} {'x idle (all)':>13}")
    for load, by_setting in times.items():
        for setting, runs in by_setting.items():
            median = statistics.median(runs)
            print(f"{load:>15} {setting:>10} {median:>9.1f} {median / idle[setting]:>14.2f} {median / idle['all']:>13.2f}")
    print(json.dumps({"cpu": cpu_line(), "times": {str(k): v for k, v in times.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
