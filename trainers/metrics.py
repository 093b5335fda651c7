"""An iteration's metrics, named by family as CleanRL does: ``env/``, ``samples/``, ``advantages/``,
``losses/``, ``charts/``, ``lengths/``, ``time/``, ``perf/`` (and ``dist/``, ``eval/``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.rules import RULES, played_shares
from spy_env.stage import Stage
from trainers.algorithm import RAEBaselines, StageController
from trainers.samples import Sample

__all__ = [
    "TrainingProgress",
    "UpdateTotals",
    "chart_metrics",
    "iteration_metrics",
    "length_metrics",
    "rule_metrics",
    "sample_stats",
    "strongest_rule",
]


def iteration_metrics(
    *,
    iteration: int,
    stage: Stage,
    next_stage: Stage,
    game: Mapping[str, float],
    families: Sequence[Mapping[str, float]],
    buffer: Sequence[dict],
    seconds: Mapping[str, float],
) -> dict[str, Any]:
    """One iteration's metrics row (``stage`` and ``next_stage`` by their schedule names: detect, perform).

    ``iteration`` is also the policy version that the next rollouts use. ``game`` is the game
    metrics (written under ``env/``), ``families`` the rows already named by family (samples,
    losses, charts), ``seconds`` the ``rollout`` and ``update`` times.
    """
    generated = sum(len(r["completion_token_ids"]) for r in buffer)
    update_tokens = next(f["perf/update_tokens"] for f in families if "perf/update_tokens" in f)
    return {
        "iteration": iteration,
        "stage": stage.schedule_name,
        "next_stage": next_stage.schedule_name,
        "policy_version": iteration,
        **{f"env/{k}": v for k, v in game.items()},
        **{k: v for family in families for k, v in family.items()},
        **length_metrics(buffer),
        "time/rollout_seconds": seconds["rollout"],
        "time/update_seconds": seconds["update"],
        "perf/rollout_tokens_per_s": generated / max(seconds["rollout"], 1e-9),
        "perf/update_tokens_per_s": update_tokens / max(seconds["update"], 1e-9),
    }


def rule_metrics(buffer: Sequence[dict]) -> dict[str, float]:
    """Each rule baseline's detection accuracy on the buffer's own games (``rule_<name>_accuracy``, as
    :func:`agents.rules.played_shares`: the first-round civilian votes, on the performances those voters
    saw), logged beside ``detection_accuracy`` so that a voter's accuracy is read against what a rule
    reading only the surface of the same performances scores; NaN without a civilian vote."""
    out = {}
    for name, rule in RULES.items():
        shares = played_shares(buffer, rule)
        out[f"rule_{name.replace('-', '_')}_accuracy"] = float(np.mean(shares)) if shares else float("nan")
    return out


def sample_stats(samples: Sequence[Sample], skipped: Mapping[str, int]) -> dict[str, float]:
    """``samples/*`` and ``advantages/*`` metrics of the samples that train.

    >>> sample_stats([Sample({}, 1.0), Sample({}, -1.0)], {"empty": 2})
    {'samples/skipped_empty': 2, 'samples/count': 2, 'advantages/mean': 0.0, 'advantages/std': 1.0}
    """
    stats: dict[str, float] = {f"samples/skipped_{k}": v for k, v in skipped.items()}
    if not samples:
        return stats
    trained = np.array([s.advantage for s in samples])
    stats["samples/count"] = len(samples)
    stats["advantages/mean"] = float(np.mean(trained))
    stats["advantages/std"] = float(np.std(trained))
    return stats


@dataclass
class UpdateTotals:
    """Running sums of an update's micro-batch statistics, reported as ``losses/*`` means."""

    sums: dict[str, float] = field(
        default_factory=lambda: {"loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "ratio": 0.0, "entropy": 0.0}
    )
    grad_norm: float | None = None  # summed over optimizer steps that reported one
    micro_steps: int = 0
    optimizer_steps: int = 0
    tokens: int = 0

    def add_micro_step(self, stats: dict[str, float]) -> None:
        self.micro_steps += 1
        self.tokens += int(stats["tokens"])
        for key, value in stats.items():
            if key != "tokens":
                self.sums[key] += value

    def add_optimizer_step(self, grad_norm: Any | None) -> None:
        """``grad_norm``: what gradient clipping reported (None: no clipping, or DeepSpeed's engine clipped)."""
        if grad_norm is not None:
            self.grad_norm = (self.grad_norm or 0.0) + float(grad_norm)
        self.optimizer_steps += 1

    def metrics(self) -> dict[str, float]:
        out = {f"losses/{k}": v / max(self.micro_steps, 1) for k, v in self.sums.items()}
        if self.grad_norm is not None:
            out["losses/grad_norm"] = self.grad_norm / max(self.optimizer_steps, 1)
        out["losses/optimizer_steps"] = self.optimizer_steps
        out["perf/update_tokens"] = self.tokens
        return out


def chart_metrics(scheduler: Any, controller: StageController, rae: RAEBaselines) -> dict[str, float]:
    """``charts/*``: the learning rate of ``scheduler``, the stage ``controller``'s EMAs and the RAE baselines."""
    return {
        "charts/lr": scheduler.get_last_lr()[0],
        "charts/acc_ema": controller.acc_ema,
        "charts/na_ema": controller.na_ema,
        **{f"charts/rae_{k}": v for k, v in rae.baselines.items()},
    }


def strongest_rule(metrics: Mapping[str, Any], prefix: str = "env/") -> float:
    """The best rule baseline's accuracy among ``metrics``' ``<prefix>rule_*_accuracy`` (NaN if none).

    >>> strongest_rule({"env/rule_shortest_accuracy": 0.25, "env/rule_odd_one_out_accuracy": 0.5})
    0.5
    """
    values = [
        v
        for k, v in metrics.items()
        if k.startswith(f"{prefix}rule_") and k.endswith("_accuracy") and isinstance(v, float) and not np.isnan(v)
    ]
    return max(values) if values else float("nan")


def length_metrics(rows: Sequence[dict]) -> dict[str, float]:
    """Mean prompt, completion and *scored* completion tokens per stage, over LLM rows only.

    Scripted agents' rows (no token ids) are left out, so a stage played by a heuristic does not
    pull the means toward 0; scored tokens are those the model chose (forced ones excluded).

    >>> row = {"stage": "vote", "prompt_token_ids": [1, 2], "completion_token_ids": [3, 4], "completion_mask": [0, 1]}
    >>> length_metrics([row, {**row, "stage": "perform", "completion_token_ids": []}])
    {'lengths/vote_prompt_tokens': 2.0, 'lengths/vote_completion_tokens': 2.0, 'lengths/vote_scored_tokens': 1.0}
    """
    out: dict[str, float] = {}
    for stage in (Stage.PERFORM, Stage.VOTE):
        llm = [r for r in rows if r["stage"] == stage and r["completion_token_ids"]]
        if not llm:
            continue
        out[f"lengths/{stage.value}_prompt_tokens"] = float(np.mean([len(r["prompt_token_ids"]) for r in llm]))
        out[f"lengths/{stage.value}_completion_tokens"] = float(np.mean([len(r["completion_token_ids"]) for r in llm]))
        out[f"lengths/{stage.value}_scored_tokens"] = float(
            np.mean(
                [sum(r["completion_mask"]) if r["completion_mask"] else len(r["completion_token_ids"]) for r in llm]
            )
        )
    return out


class TrainingProgress:
    """A rich progress bar of a run's iterations (``enabled`` False: nothing is shown), described by the
    last iteration's stage, detection accuracy and N/A rate."""

    def __init__(self, total: int, completed: int, *, enabled: bool = True) -> None:
        self.bar = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self.bar = Progress(
                "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()
            )
            self.bar.start()
            self.task = self.bar.add_task("training", total=total, completed=completed)

    def advance(self, metrics: Mapping[str, Any]) -> None:
        if self.bar is not None:
            self.bar.update(
                self.task,
                advance=1,
                description=f"training [{metrics['stage']}] acc {metrics['env/detection_accuracy']:.2f}"
                f" na {metrics['env/na_rate']:.2f}",
            )

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
