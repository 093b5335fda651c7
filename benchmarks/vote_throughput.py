"""Votes trained per minute: constrained votes in one forward pass (``forward_votes``) vs ``generate``.

Each path trains SmolLM2-135M (the ``smollm2-selfplay`` preset: 3 players, heuristic performers, the
last 12 blocks, fp32 on CPU) for ``--iterations`` iterations on the *same* games (same seeds, so the
same vote prompts), each in its own process so its peak RSS is its own:

- ``generate-4``: the path before issue #18 (attempt 3): votes from ``generate`` (prefill, then one
  step per forced tag token), four updates an iteration (behaviour log-probs recomputed for the three
  off-policy mini-batches, then a forward and backward per mini-batch);
- ``generate-1``: votes from ``generate``, one on-policy update (a second prefill with gradients);
- ``forward``: ``forward_votes``: one forward per vote whose graph feeds the one update (no second
  prefill);
- ``forward-ckpt``: the same with gradient checkpointing (the kept graphs hold block inputs only).

Prints votes trained per minute of iteration time (rollouts + update; model loading excluded), the
ratio of each path to ``generate-4`` and ``generate-1`` measured in this run, and each process's
peak RSS. Goals (issue #18): ``forward`` ≥ 1.5× today's path; peak RSS ≤ 4 GB.

    python benchmarks/vote_throughput.py                 # 2 iterations a path (~10 min on 2 cores)
    python benchmarks/vote_throughput.py --iterations 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

PATHS = {
    "generate-4": {"forward_votes": False, "updates_per_iteration": 4},
    "generate-1": {"forward_votes": False, "updates_per_iteration": 1},
    "forward": {"forward_votes": True, "updates_per_iteration": 1},
    "forward-ckpt": {"forward_votes": True, "updates_per_iteration": 1, "gradient_checkpointing": True},
}


def measure(name: str, iterations: int, out: str) -> dict:
    """One path in this process: iteration seconds, votes trained, peak RSS."""
    import resource
    import tempfile
    import time

    import torch

    from trainers import SpyRLConfig, SpyRLTrainer

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        config = SpyRLConfig.preset(
            "smollm2-selfplay", performer="heuristic", output_dir=tmp, progress=False, keep_buffers=False,
            iterations=iterations, checkpoint_every=10**6, vote_gradient="sampled", **PATHS[name],
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated among {list(PATHS)}")
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure this path in this process
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        measure(args.one, args.iterations, args.result)
        return 0
    results = {}
    import tempfile

    for name in [x.strip() for x in args.paths.split(",") if x.strip()]:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            command = [
                sys.executable,
                __file__,
                "--one",
                name,
                "--iterations",
                str(args.iterations),
                "--result",
                f.name,
            ]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            results[name] = json.loads(Path(f.name).read_text())
        r = results[name]
        print(
            f"{name:13s} {r['votes'] / r['seconds'] * 60:6.1f} votes/min  peak RSS {r['peak_rss_gb']:.2f} GB",
            flush=True,
        )
    rate = {k: r["votes"] / r["seconds"] for k, r in results.items()}
    for base in ("generate-4", "generate-1"):
        if base in rate:
            for k in rate:
                if k.startswith("forward"):
                    print(f"ratio {k} / {base}: {rate[k] / rate[base]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
