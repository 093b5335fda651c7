"""Votes trained per minute: constrained votes in one forward pass (``forward_votes``), one row per lever.

Each path trains SmolLM2-135M (the ``smollm2-selfplay`` preset: 3 players, heuristic performers, the
last 12 blocks, on CPU) for ``--iterations`` iterations on the *same* games (same seeds, so the same
vote prompts), each run in its own process so its peak RSS is its own, the paths interleaved
``--reps`` times:

- ``forward-full``: the fast path before issue #27: one left-padded float32 forward per batch of
  votes whose graph feeds the one on-policy update (``share_prefix=false``);
- ``forward``: the same with shared prefixes: a game's civilians read the same copy and performances,
  so their common prefix is encoded once and both votes backpropagate into that one graph;
- ``forward-bf16``: shared prefixes with bfloat16 weights (``dtype=bfloat16``; the optimizer steps
  fp32 masters, :mod:`trainers.precision`), on a CPU that computes bf16 natively;
- ``forward-ckpt``: shared prefixes off, gradient checkpointing on (the memory-saving path);
- ``generate-4`` / ``generate-1``: votes from ``generate`` (the path before issue #18), four updates
  or one on-policy update an iteration.

Prints each path's votes trained per minute of iteration time (rollouts + update; model loading
excluded; median of the repeats, with min and max), its peak RSS, and its ratio to ``forward-full``
measured in this run. Goal (issue #27): ≥ 2× ``forward-full`` at ≤ 4 GB peak RSS.

    python benchmarks/vote_throughput.py                          # forward-full, forward, forward-bf16
    python benchmarks/vote_throughput.py --paths forward-full,forward-ckpt,generate-4 --reps 1
    python benchmarks/vote_throughput.py --smoke   # every path once, one iteration of a tiny random model
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

PATHS = {
    "forward-full": {"forward_votes": True, "updates_per_iteration": 1, "share_prefix": False},
    "forward": {"forward_votes": True, "updates_per_iteration": 1},
    "forward-bf16": {"forward_votes": True, "updates_per_iteration": 1, "dtype": "bfloat16"},
    "forward-ckpt": {"forward_votes": True, "updates_per_iteration": 1, "gradient_checkpointing": True},
    "generate-4": {"forward_votes": False, "updates_per_iteration": 4},
    "generate-1": {"forward_votes": False, "updates_per_iteration": 1},
}
DEFAULT = ("forward-full", "forward", "forward-bf16")


# --smoke: the preset on a tiny random model (two heads of 32), one document, short replies
SMOKE = {"documents_per_iteration": 1, "games_per_document": 2, "train_top_layers": 1, "max_completion_tokens": 24,
         "think_tokens": 4}  # fmt: skip


def measure(name: str, iterations: int, out: str, smoke: bool = False) -> dict:
    """One path in this process: iteration seconds, votes trained, peak RSS."""
    import resource
    import tempfile
    import time

    import torch

    from trainers import SpyRLConfig, SpyRLTrainer

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        smoke_fields = {}
        if smoke:
            from agents.tiny import build_tiny_model

            smoke_fields = {**SMOKE, "name_or_path": str(build_tiny_model(f"{tmp}/tiny", hidden_size=64, num_heads=2))}
        config = SpyRLConfig.preset(
            "smollm2-selfplay", performer="heuristic", output_dir=tmp, progress=False, keep_buffers=False,
            iterations=iterations, checkpoint_every=10**6, vote_gradient="sampled", **PATHS[name], **smoke_fields,
        )  # fmt: skip
        trainer = SpyRLTrainer(config)
        seconds, votes = 0.0, 0
        for _ in range(iterations):
            start = time.perf_counter()
            metrics = trainer.train_iteration()
            seconds += time.perf_counter() - start
            votes += int(metrics["samples/count"])
    result = {
        "path": name,
        "seconds": seconds,
        "votes": votes,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }
    from spy_env.io import write_text  # atomic, never through a link at the path

    write_text(out, json.dumps(result))
    return result


def run_one(name: str, iterations: int, smoke: bool) -> dict:
    """Measure one path in a fresh process."""
    import tempfile

    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        command = [sys.executable, __file__, "--one", name, "--iterations", str(iterations), "--result", f.name]
        command += ["--smoke"] if smoke else []
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"path {name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return json.loads(Path(f.name).read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--paths", default=",".join(DEFAULT), help=f"comma-separated among {list(PATHS)}")
    p.add_argument("--reps", type=int, default=3, help="runs of each path, interleaved")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this path in this process
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--smoke", action="store_true", help="every path once, one iteration, a tiny random model")
    args = p.parse_args(argv)
    if args.one:
        measure(args.one, args.iterations, args.result, args.smoke)
        return 0
    if args.smoke:
        args.iterations, args.paths, args.reps = 1, ",".join(PATHS), 1
    names = [x.strip() for x in args.paths.split(",") if x.strip()]
    unknown = sorted(set(names) - set(PATHS))
    if unknown:
        p.error(f"unknown paths {unknown}; choose among {list(PATHS)}")
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for _ in range(args.reps):
        for name in names:
            runs[name].append(run_one(name, args.iterations, args.smoke))
    rate = {name: statistics.median(r["votes"] / r["seconds"] * 60 for r in rs) for name, rs in runs.items()}
    for name, rs in runs.items():
        rates = [r["votes"] / r["seconds"] * 60 for r in rs]
        line = f"{name:13s} {rate[name]:6.1f} votes/min (min {min(rates):.1f}, max {max(rates):.1f})"
        line += f"  peak RSS {max(r['peak_rss_gb'] for r in rs):.2f} GB"
        if "forward-full" in rate:
            line += f"  x{rate[name] / rate['forward-full']:.2f} forward-full"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
