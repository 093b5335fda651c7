"""One training process or several under ``accelerate launch``: the collectives and checks the trainer needs.

Every function is the identity (or a no-op) in a single process, so the plain loop stays plain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trainers.engines import ROLLOUT_ENGINES, engine_of

__all__ = [
    "DDP_TYPES",
    "all_reduce",
    "check_sharding",
    "documents_share",
    "mean_over_processes",
    "process_metrics",
    "sharding",
    "smallest_count",
]

DDP_TYPES = ("MULTI_GPU", "MULTI_CPU", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU", "MULTI_HPU")  # no_sync is safe there


def all_reduce(accelerator: Any, values: Sequence[float], op: str = "sum") -> list[float]:
    """Sum (or mean) ``values`` over processes; identity in a single process."""
    if accelerator.num_processes == 1:
        return list(values)
    tensor = torch.tensor(list(values), dtype=torch.float64, device=accelerator.device)
    return accelerator.reduce(tensor, reduction=op).tolist()


def smallest_count(accelerator: Any, count: int) -> int:
    """The smallest ``count`` over processes: every process must run the same number of backward passes, so
    each trains on at most this many samples (the others' extra samples are dropped that iteration)."""
    if accelerator.num_processes == 1:
        return count
    counts = accelerator.gather(torch.tensor([count], device=accelerator.device))
    return int(counts.min())


def documents_share(total: int, num_processes: int, rank: int = 0) -> tuple[int, int]:
    """``(start, count)``: the slice of each iteration's ``total`` documents that process ``rank`` plays.
    ``total`` (``rollout.documents_per_iteration``) is the global batch (verl's ``train_batch_size``), split as evenly as
    it goes (128 over 7 processes: 19 × 2 and 18 × 5); raises ``ValueError`` naming the field when a
    process would get none.

    >>> [documents_share(8, 3, r) for r in range(3)]
    [(0, 3), (3, 3), (6, 2)]
    """
    if total < num_processes:
        raise ValueError(
            f"SpyRLConfig.rollout.documents_per_iteration ({total}) must be at least the number of processes "
            f"({num_processes}): it is the global batch, split over them"
        )
    base, extra = divmod(total, num_processes)
    return rank * base + min(rank, extra), base + (rank < extra)


def mean_over_processes(accelerator: Any, game: Mapping[str, float]) -> dict[str, float]:
    """An iteration's game metrics over every process's games, so every process decides the next stage
    from the same numbers (rates averaged, ``games`` added up)."""
    if accelerator.num_processes == 1:
        return dict(game)
    keys = sorted(game)
    out = dict(zip(keys, all_reduce(accelerator, [game[k] for k in keys], op="mean"), strict=True))
    out["games"] *= accelerator.num_processes
    return out


def sharding(accelerator: Any) -> str | None:
    """``"fsdp"`` or ``"zero3"`` when no process holds whole weights, else None."""
    state = accelerator.state
    if getattr(state, "fsdp_plugin", None) is not None:
        return "fsdp"
    ds = getattr(state, "deepspeed_plugin", None)
    return "zero3" if ds is not None and ds.zero_stage == 3 else None


def check_sharding(generation: str, eval_games: int, sharded: str | None) -> None:
    """Under FSDP or ZeRO-3 no process holds whole weights, so hf generation (a ``rollout.generation`` engine
    that does not run sharded, and the held-out games of ``run.eval_games``) cannot run there."""
    if sharded is None:
        return
    if not engine_of(generation).runs_sharded:
        sharded_engines = " or ".join(repr(name) for name, engine in ROLLOUT_ENGINES.items() if engine.runs_sharded)
        raise ValueError(
            f"SpyRLConfig.rollout.generation must be {sharded_engines} under FSDP or DeepSpeed ZeRO-3 "
            f"(the weights are sharded; TRL's VLLMGeneration gathers them for the engine), got {generation!r}"
        )
    if eval_games:
        raise ValueError(
            "SpyRLConfig.run.eval_games must be 0 under FSDP or DeepSpeed ZeRO-3 (held-out games generate with "
            "the hf backend on one process); evaluate a checkpoint with `spyrl eval --game` instead"
        )


def process_metrics(accelerator: Any, unwrapped: Any) -> dict[str, float]:
    """``dist/*`` metrics: the number of processes and, under DDP, how far the replicas' weights drifted
    apart (they must stay identical: a cheap fingerprint, gathered)."""
    out: dict[str, float] = {}
    if accelerator.num_processes > 1:
        out["dist/num_processes"] = accelerator.num_processes
    if accelerator.distributed_type in DDP_TYPES:
        with torch.no_grad():
            fingerprint = sum(p.double().sum() for p in unwrapped.parameters())
        spread = accelerator.gather(fingerprint.reshape(1).to(accelerator.device))
        out["dist/param_sync_error"] = float(spread.max() - spread.min())
    return out
