"""The pieces of one GRPO update: samples as tensors, micro-batches, their loss, and the statistics.

An update (``SpyRLTrainer.update``) computes behaviour and reference log-probs once (no grad), then
walks ``epochs`` shuffled orders of the samples in mini-batches (one optimizer step each), each split
into micro-batches whose gradients accumulate. The first mini-batch of the first epoch trains before
any step, so its behaviour log-probs are the current ones (detached) and need no extra forward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from agents.registry import Registry
from trainers.choices import Choice, vote_gradient_of
from trainers.logprobs import pad_to, sequence_logps
from trainers.loss import ChoiceTerms, LossScale, Objective, clipped_policy_loss
from trainers.precision import make_optimizer
from trainers.samples import Sample
from trainers.validation import bad, check_choice, check_section, setting

__all__ = [
    "MINI_BATCH_UNITS",
    "MicroBatch",
    "MiniBatchUnit",
    "TrainingSamples",
    "UpdateConfig",
    "UpdateTotals",
    "micro_loss",
    "micro_step",
    "mini_batch_size",
    "optimizer_and_schedule",
]

# (prompts, completions, choices) -> (B, T) log-probs and each row's (C,) choice log-probs
LogpsFn = Callable[[list[list[int]], list[list[int]], list[Choice | None]], tuple[torch.Tensor, list]]


@dataclass(frozen=True)
class MiniBatchUnit:
    """A ``mini_batch_unit``: what ``mini_batch_size`` counts.

    ``updates(documents, mini_batch_size)``: the optimizer steps per epoch of an iteration of ``documents``
    documents (all processes together), or 0 when ``mini_batch_size`` counts the samples of each step.
    ``counts_samples``: a mini-batch is ``mini_batch_size`` samples, so it must split into whole
    micro-batches.
    """

    updates: Callable[[int, int], int]
    counts_samples: bool = False


def _sample_steps(documents: int, mini_batch_size: int) -> int:
    """Each step takes ``mini_batch_size`` samples: as many steps as the samples fill."""
    return 0


def _document_steps(documents: int, mini_batch_size: int) -> int:
    """verl's prompt-counted ``ppo_mini_batch_size`` (in prompts, × rollout.n): ``ceil(documents /
    mini_batch_size)`` steps, so 128 documents of 128 make one."""
    return -(-documents // mini_batch_size)


MINI_BATCH_UNITS: Registry[MiniBatchUnit] = Registry("mini_batch_unit")
MINI_BATCH_UNITS.register("samples", MiniBatchUnit(_sample_steps, counts_samples=True))
MINI_BATCH_UNITS.register("documents", MiniBatchUnit(_document_steps))


@dataclass(frozen=True)
class UpdateConfig:
    """``SpyRLConfig.update``: the optimizer, and how an iteration's samples become optimizer steps."""

    SECTION: ClassVar[str] = "update"

    learning_rate: float = setting(1e-6, "AdamW learning rate.")
    weight_decay: float = setting(0.0, "AdamW weight decay.")
    warmup_iterations: int = setting(0, "Linear warm-up, in iterations.")
    max_grad_norm: float = setting(1.0, "Gradient clipping; 0 disables.")
    mini_batch_size: int = setting(
        128, "PPO mini-batch per optimizer step, in mini_batch_unit; see also updates_per_iteration."
    )
    mini_batch_unit: str = setting(
        "samples",
        "Unit of mini_batch_size: samples (training rows), or documents as verl counts ppo_mini_batch_size (in "
        "prompts, × rollout.n): each iteration makes ceil(documents_per_iteration / mini_batch_size) updates. "
        "A name in trainers.update.MINI_BATCH_UNITS.",
    )
    updates_per_iteration: int = setting(
        0,
        "If > 0: split each iteration's samples into this many equal mini-batches (optimizer steps per epoch), "
        "whatever their number, as verl's prompt-counted ppo_mini_batch_size does; 0: use mini_batch_size.",
    )
    micro_batch_size: int = setting(8, "Samples per forward/backward; gradients accumulate to the mini-batch.")
    epochs: int = setting(1, "Passes over each iteration's samples (μ).")

    def __post_init__(self) -> None:
        check_section(
            self,
            positive_ints=("mini_batch_size", "micro_batch_size", "epochs"),
            positive=("learning_rate",),
            non_negative=("weight_decay", "max_grad_norm"),
        )
        check_choice(self, "mini_batch_unit", MINI_BATCH_UNITS)  # a registry: read when checked
        if self.updates_per_iteration < 0:
            raise bad(self, "updates_per_iteration", "an integer >= 0")
        if self.warmup_iterations < 0:
            raise bad(self, "warmup_iterations", "an integer >= 0")
        if self.unit.counts_samples and self.mini_batch_size % self.micro_batch_size:
            raise bad(self, "mini_batch_size", f"a multiple of micro_batch_size ({self.micro_batch_size})")

    @property
    def unit(self) -> MiniBatchUnit:
        """The registered :class:`MiniBatchUnit` that ``mini_batch_unit`` names."""
        return MINI_BATCH_UNITS[self.mini_batch_unit]


def optimizer_and_schedule(
    params: Sequence[torch.nn.Parameter], accelerator: Any, config: UpdateConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with fp32 masters (:func:`trainers.precision.make_optimizer`) and a linear warm-up over
    ``warmup_iterations`` (the schedule steps once an iteration)."""
    optimizer = make_optimizer(params, accelerator, lr=config.learning_rate, weight_decay=config.weight_decay)
    warmup = config.warmup_iterations
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda it: min(1.0, (it + 1) / (warmup + 1)) if warmup else 1.0
    )
    return optimizer, scheduler


def mini_batch_size(config: UpdateConfig, documents: int, samples: int, num_processes: int = 1) -> int:
    """Samples per optimizer step on one process when it trains on ``samples`` rows this iteration
    (``documents``: the iteration's documents, all processes together).

    ``updates_per_iteration`` k > 0: ``ceil(samples / k)``. ``mini_batch_unit="documents"`` (verl's
    prompt-counted ``ppo_mini_batch_size``): ``ceil(documents / mini_batch_size)`` updates (both
    global counts), so 128 documents of 128 make one. Else ``mini_batch_size`` samples over all
    processes, so ``mini_batch_size / num_processes`` on each.

    >>> mini_batch_size(UpdateConfig(mini_batch_unit="documents"), 128, 5120), mini_batch_size(UpdateConfig(), 128, 5120)
    (5120, 128)
    """
    updates = config.updates_per_iteration or config.unit.updates(documents, config.mini_batch_size)
    if updates:
        return max(1, -(-samples // updates))
    return max(1, config.mini_batch_size // num_processes)


@dataclass(frozen=True)
class MicroBatch:
    """What one forward and backward pass trains on, and how its loss is scaled."""

    prompts: list[list[int]]
    completions: list[list[int]]
    scored: list[torch.Tensor]  # (T_i,) 1 for tokens the model chose, 0 for forced ones
    old_logps: list[torch.Tensor | None]  # (T_i,) behaviour log-probs; None: on-policy, the current ones
    ref_logps: list[torch.Tensor] | None  # (T_i,) reference log-probs (beta > 0)
    advantages: list[float]
    loss: Objective  # Eq. 7's settings, at this stage's ratio level
    scale: LossScale  # dapo's denominator (trainers.loss.loss_items of the mini-batch) and accumulation
    choices: list[Choice | None] = field(default_factory=list)  # votes' choices (scored renormalised)
    old_choices: list[torch.Tensor | None] = field(default_factory=list)  # (C,) behaviour choice log-probs
    coefficients: list[torch.Tensor | None] = field(default_factory=list)  # (C,) expected/supervised weights


@dataclass
class TrainingSamples:
    """The training samples of one update: token ids, scored-token masks and fixed log-probs."""

    rows: list[Mapping[str, Any]]
    advantages: list[float]
    prompts: list[list[int]]
    completions: list[list[int]]
    scored: list[torch.Tensor]  # (T_i,) 1 for tokens the model chose, 0 for forced ones
    choices: list[Choice | None] = field(default_factory=list)  # each vote's choice (None: no choice)
    coefficients: list[torch.Tensor | None] = field(default_factory=list)  # (C,) expected/supervised weights
    old: dict[int, torch.Tensor] = field(default_factory=dict)  # behaviour log-probs, off-policy rows
    old_choices: dict[int, torch.Tensor | None] = field(default_factory=dict)  # their (C,) choice log-probs
    ref: dict[int, torch.Tensor] = field(default_factory=dict)  # reference log-probs (beta > 0)
    # every row's (logps, mask, choice_logps) with their graph, when the rollout kept them for a single
    # on-policy step (trainers.votes.retained_for_update): the update then makes no forward of its own
    kept: tuple | None = None

    @classmethod
    def from_samples(cls, samples: Sequence[Sample], max_tokens: int) -> TrainingSamples:
        rows = [s.row for s in samples]
        completions = [list(r["completion_token_ids"])[:max_tokens] for r in rows]
        scored = []
        for row, completion in zip(rows, completions, strict=True):
            mask = list(row.get("completion_mask") or [])[: len(completion)]
            scored.append(torch.tensor(mask if len(mask) == len(completion) else [1] * len(completion)))
        choices = [Choice.of(r, max_tokens) for r in rows]
        coefficients = [
            None if c is None or s.choice_advantages is None else torch.tensor(s.choice_advantages)
            for s, c in zip(samples, choices, strict=True)
        ]
        prompts = [list(r["prompt_token_ids"]) for r in rows]
        advantages = [s.advantage for s in samples]
        return cls(rows, advantages, prompts, completions, scored, choices, coefficients)

    def logps_by_row(
        self, logps_of: LogpsFn, indices: Sequence[int], chunk: int
    ) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor | None]]:
        """``logps_of`` over the samples ``indices``, ``chunk`` at a time: one (T_i,) row per sample, and its
        (C,) choice log-probs (None without a choice)."""
        out, choice_out = {}, {}
        for start in range(0, len(indices), chunk):
            part = indices[start : start + chunk]
            logps, choice_logps = logps_of(
                [self.prompts[i] for i in part], [self.completions[i] for i in part], [self.choices[i] for i in part]
            )
            out.update({i: logps[k, : len(self.completions[i])] for k, i in enumerate(part)})
            choice_out.update({i: choice_logps[k] for k, i in enumerate(part)})
        return out, choice_out

    def micro_batch(self, indices: Sequence[int], loss: Objective, scale: LossScale) -> MicroBatch:
        return MicroBatch(
            prompts=[self.prompts[i] for i in indices],
            completions=[self.completions[i] for i in indices],
            scored=[self.scored[i] for i in indices],
            old_logps=[self.old.get(i) for i in indices],
            ref_logps=[self.ref[i] for i in indices] if self.ref else None,
            advantages=[self.advantages[i] for i in indices],
            loss=loss,
            scale=scale,
            choices=[self.choices[i] for i in indices],
            old_choices=[self.old_choices.get(i) for i in indices],
            coefficients=[self.coefficients[i] for i in indices],
        )


def micro_step(
    model: Any,
    batch: MicroBatch,
    temperature: float,
    pad_id: int,
    backward: Callable[[torch.Tensor], None],
    kept: tuple | None = None,
) -> dict[str, float]:
    """Forward, Eq. 7 loss and ``backward`` of one micro-batch; returns its statistics. ``kept``: the
    micro-batch's ``(logps, mask, choice_logps)`` a forward-vote rollout already computed with their
    graph (``trainers.votes.retained_for_update``): no forward then, and no entropy."""
    if kept is not None:
        return micro_loss(kept[0], kept[1], None, kept[2], batch, backward)
    logps, mask, entropy, choice_logps = sequence_logps(
        model, batch.prompts, batch.completions, pad_id, temperature, with_entropy=True, choices=batch.choices
    )  # (B, T) each, and (C,) per vote with a choice
    return micro_loss(logps, mask, entropy, choice_logps, batch, backward)


def micro_loss(
    logps: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor | None,
    choice_logps: Sequence[torch.Tensor | None],
    batch: MicroBatch,
    backward: Callable[[torch.Tensor], None],
) -> dict[str, float]:
    """Eq. 7 on a micro-batch's current log-probs (``sequence_logps``'s outputs), then ``backward``."""
    width = logps.shape[1]
    mask = mask * torch.stack([pad_to(s, width) for s in batch.scored]).to(mask)  # forced tokens: 0
    old = torch.stack(
        [logps[k].detach() if row is None else pad_to(row, width) for k, row in enumerate(batch.old_logps)]
    )  # (B, T)
    ref = torch.stack([pad_to(row, width) for row in batch.ref_logps]) if batch.loss.beta else None  # (B, T)
    advantages = torch.tensor(batch.advantages, dtype=logps.dtype)  # (B,)
    choice = _choice_terms(choice_logps, batch, batch.loss.vote_gradient, logps)
    out = clipped_policy_loss(logps, old, advantages, mask, batch.loss, ref_logps=ref, scale=batch.scale, choice=choice)
    backward(out.loss)
    return {
        "tokens": int(mask.sum().item()),
        "loss": out.policy_loss,
        "kl": out.kl,
        "clip_fraction": out.clip_fraction,
        "ratio": out.ratio_mean,
        "entropy": float((entropy * mask).sum() / mask.sum().clamp(min=1)) if entropy is not None else float("nan"),
    }


def _choice_terms(
    choice_logps: Sequence[torch.Tensor | None], batch: MicroBatch, vote_gradient: str, logps: torch.Tensor
) -> ChoiceTerms | None:
    """``vote_gradient`` expected/supervised: each vote's loss at its choice token (B,) and where that
    token is (B, T); None when every row trains by its sampled choice."""
    loss = vote_gradient_of(vote_gradient).loss
    if loss is None or not any(c is not None for c in batch.coefficients):  # the sampled choice: a token as any
        return None
    losses, at = [], torch.zeros_like(logps, dtype=torch.float32)  # (B, T)
    for k, (choice, logq, coefficients) in enumerate(zip(batch.choices, choice_logps, batch.coefficients, strict=True)):
        if choice is None or logq is None or coefficients is None:
            losses.append(torch.zeros((), dtype=torch.float32, device=logps.device))
            continue
        old = batch.old_choices[k] if batch.old_choices and batch.old_choices[k] is not None else logq.detach()
        losses.append(loss(logq, old.to(logq), coefficients.to(logq), batch.loss.epsilon_low, batch.loss.epsilon_high))
        at[k, choice.step] = 1.0
    return ChoiceTerms(torch.stack([x.float() for x in losses]), at)


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
