"""One GRPO update: the :class:`Updater`, and its pieces (samples as tensors, micro-batches, their loss).

An update (:meth:`Updater.fit`, once an iteration) computes behaviour and reference log-probs once (no
grad), then walks ``epochs`` shuffled orders of the samples in mini-batches (one optimizer step each),
each split into micro-batches whose gradients accumulate. The first mini-batch of the first epoch trains
before any step, so its behaviour log-probs are the current ones (detached) and need no extra forward pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from spy_env.stage import Stage
from trainers.choices import Choice
from trainers.logprobs import pad_to, sequence_logps
from trainers.loss import LossScale, Objective, choice_terms, clipped_policy_loss, loss_items
from trainers.metrics import UpdateTotals
from trainers.models import reference_logps
from trainers.precision import make_optimizer
from trainers.processes import DDP_TYPES
from trainers.samples import Sample
from trainers.sections import DecodingConfig, LossConfig, UpdateConfig
from trainers.votes import retained_for_update

__all__ = [
    "MicroBatch",
    "TrainingSamples",
    "Updater",
    "micro_loss",
    "micro_step",
    "mini_batch_size",
    "optimizer_and_schedule",
]

# (prompts, completions, choices) -> (B, T) log-probs and each row's (C,) choice log-probs
LogpsFn = Callable[[list[list[int]], list[list[int]], list[Choice | None]], tuple[torch.Tensor, list]]


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
    choice = choice_terms(choice_logps, batch.choices, batch.coefficients, batch.old_choices, batch.loss, logps)
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


@dataclass
class Updater:
    """The iteration's update: log-probs fixed once, then clipped optimizer steps (the module docstring).

    ``ref_model``: the frozen reference (None: the model with its LoRA adapters off, or no KL); ``policy``:
    the rollout policy (a forward-vote one keeps its votes' graphs for a single on-policy step); ``decoding``:
    the completion budget and each stage's temperature; ``documents``: an iteration's documents (all
    processes); ``sum_over_processes``: adds up floats over the processes (None: one process)."""

    model: Any  # the trained model as prepared: DDP, FSDP or DeepSpeed wrap it
    ref_model: Any
    optimizer: Any  # torch.optim.Optimizer, prepared with the model
    accelerator: Any  # accelerate.Accelerator
    policy: Any
    pad_id: int
    config: UpdateConfig
    loss: LossConfig
    decoding: DecodingConfig
    vote_gradient: str  # a name in trainers.choices.VOTE_GRADIENTS
    documents: int
    sum_over_processes: Callable[[list[float]], list[float]] | None = None

    @property
    def one_step(self) -> bool:
        """Whether each iteration makes exactly one on-policy optimizer step needing no other forward pass
        (one mini-batch, one epoch, no KL reference, one process: DDP syncs gradients in its own forward)."""
        c = self.config
        one = c.updates_per_iteration == 1 or c.unit.updates(self.documents, c.mini_batch_size) == 1
        return one and c.epochs == 1 and not self.loss.beta and self.sum_over_processes is None

    def fit(self, selected: Sequence[Sample], stage: Stage, seed: int) -> dict[str, float]:
        """``epochs`` passes over ``selected`` (samples of ``stage``) in mini-batches shuffled from ``seed``,
        one optimizer step each; returns ``losses/*``. A forward-vote rollout's kept graphs are spent here,
        whether a step reads them or not."""
        samples = TrainingSamples.from_samples(selected, self.decoding.max_completion_tokens)
        rows = samples.rows
        size = mini_batch_size(self.config, self.documents, len(rows), self.accelerator.num_processes)
        generator = torch.Generator().manual_seed(seed)
        orders = [torch.randperm(len(rows), generator=generator).tolist() for _ in range(self.config.epochs)]
        temperature = self.decoding.temperature_of(stage)
        level = self.loss.perform_ratio_level if stage is Stage.PERFORM else self.loss.detect_ratio_level
        objective = self.loss.objective(level, self.decoding.max_completion_tokens, self.vote_gradient)
        # the first mini-batch trains before any step: its behaviour log-probs are the current ones
        self._fix_logps(samples, set(orders[0][:size]), temperature)
        samples.kept = retained_for_update(self.policy, samples, size, self.one_step)
        if not rows:
            return {"losses/optimizer_steps": 0, "perf/update_tokens": 0}
        orders = [list(range(len(rows)))] if samples.kept else orders  # one step, in the kept log-probs' order
        minis = [order[start : start + size] for order in orders for start in range(0, len(order), size)]
        items = [loss_items([samples.scored[i] for i in mini], objective.level) for mini in minis]
        if self.sum_over_processes is not None:  # dapo/token-mean over every process's tokens (DDP averages them)
            items = [x / self.accelerator.num_processes for x in self.sum_over_processes(items)]
        self.model.train()
        totals = UpdateTotals()
        for mini, count in zip(minis, items, strict=True):
            self._optimizer_step(samples, mini, objective, count, temperature, totals)
        self.model.eval()
        return totals.metrics()

    def _fix_logps(self, samples: TrainingSamples, on_policy: set[int], t: float) -> None:
        """Behaviour log-probs of the off-policy samples, and reference log-probs (``beta`` > 0), at the
        stage's temperature ``t``: once, before any step."""

        def behaviour(prompts: list[list[int]], completions: list[list[int]], choices: list) -> tuple:
            out = sequence_logps(self.model, prompts, completions, self.pad_id, t, choices=choices)
            return out.logps, out.choices

        def reference(prompts: list[list[int]], completions: list[list[int]], choices: list) -> tuple:
            models = (self.ref_model, self.model, self.accelerator.unwrap_model(self.model))
            return reference_logps(*models, prompts, completions, self.pad_id, t, choices)

        self.model.eval()
        with torch.no_grad():
            off_policy = [i for i in range(len(samples.rows)) if i not in on_policy]
            old, old_choices = samples.logps_by_row(behaviour, off_policy, self.config.micro_batch_size)
            samples.old.update(old)
            samples.old_choices.update(old_choices)
            if self.loss.beta:
                every = range(len(samples.rows))
                samples.ref.update(samples.logps_by_row(reference, every, self.config.micro_batch_size)[0])

    def _optimizer_step(
        self,
        samples: TrainingSamples,
        mini: list[int],
        objective: Objective,
        items: float,
        temperature: float,
        totals: UpdateTotals,
    ) -> None:
        """One optimizer step on ``mini`` (sample indices), gradients accumulated over micro-batches (one, kept),
        log-probs at the stage's ``temperature``; ``items``: dapo's denominator, the whole mini-batch's."""
        kept = samples.kept
        step = len(mini) if kept else self.config.micro_batch_size  # the rollout's kept graphs: no new forward
        micros = [mini[i : i + step] for i in range(0, len(mini), step)]
        for k, micro in enumerate(micros):
            # Gradients accumulate over the mini-batch's micro-batches: DeepSpeed steps only at the
            # boundary (accelerate reads sync_gradients), DDP all-reduces only there.
            boundary = k == len(micros) - 1
            self.accelerator.sync_gradients = boundary
            batch = samples.micro_batch(micro, objective, LossScale(items, len(micros)))
            with contextlib.ExitStack() as stack:
                if not boundary and self.accelerator.distributed_type in DDP_TYPES:
                    stack.enter_context(self.accelerator.no_sync(self.model))
                stats = micro_step(self.model, batch, temperature, self.pad_id, self.accelerator.backward, kept)
            totals.add_micro_step(stats)
        grad_norm = None
        if self.config.max_grad_norm:  # under DeepSpeed the engine clips (gradient_clipping) and reports the norm
            grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        totals.add_optimizer_step(grad_norm)
