"""SpyRL's GRPO trainer: self-play rollouts → episode buffer → advantages → clipped updates.

One iteration (reads top to bottom in :meth:`SpyRLTrainer.train_iteration`):

1. **Rollouts.** ``documents_per_iteration × games_per_document`` games over all processes, the
   current policy in every seat (``hf`` on the policy itself; vLLM on GPU); buffers are saved.
2. **Samples.** Only the current stage trains: performances in the performing stage, votes in
   the detection stage (the spy's vote only with ``train_spy_vote``); a fixed agent's replies never.
3. **Advantages.** Detection: rewards normalised over each game's voters (Eq. 5; the spy's vote
   in the group with ``spy_vote_in_group``). Performing: ``r − b_role`` with role-conditioned
   EMA baselines (RAE, seeded by the first batch), optionally scaled within
   ``replay_setup`` groups. Penalties are charged to the offender's advantage alone.
4. **Updates.** Behaviour and reference log-probs are computed once (no grad); then mini-batches
   (``mini_batch_size`` samples, or documents as verl counts them, or ``updates_per_iteration``
   equal parts), split into micro-batches with gradient accumulation, minimise the clipped
   objective (token ratios for performances, one sequence ratio per vote) plus ``β·KL`` (k3 or
   verl's ``low_var_kl``) to the frozen reference.
5. **Bookkeeping.** Policy version + 1 (the ``hf`` engine *is* the policy, so it is in sync), the
   stage controller sees this iteration's detection accuracy and N/A rate, metrics go to JSONL
   (and other sinks), and a checkpoint is written every ``checkpoint_every`` iterations.

Simplifications, stated plainly: rollouts in every iteration play both stages (games need both) but only
one stage's samples train; behaviour log-probs are recomputed by the trainer (equal to the ``hf`` rollout
log-probs at temperature 1, and the right choice when vLLM generated them); everything random derives from
``(seed, iteration)`` (:mod:`trainers.seeds`), which is what makes a resumed run identical to an uninterrupted one.

The pieces live next door: :mod:`trainers.samples` (which rows train, advantages), :mod:`trainers.update`
(micro-batches and their loss), :mod:`trainers.loss` (Eq. 7), :mod:`trainers.policies` (who plays),
:mod:`trainers.models` (what trains), :mod:`trainers.checkpoint`, :mod:`trainers.metrics`, :mod:`trainers.processes`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from agents.hf import load_pretrained
from agents.models import resolve_model_path
from spy_env.buffer import EpisodeBuffer
from spy_env.config import GameConfig
from spy_env.heldout import Look, evaluate_heldout, summarize
from spy_env.metrics import game_metrics
from spy_env.policy import RolloutPolicy
from spy_env.runner import Runner
from spy_env.stage import Stage
from trainers import checkpoint as ckpt
from trainers import processes
from trainers.algorithm import (
    RAEBaselines,
    StageController,
    add_penalties,
    controller_signals,
    role_means,
    role_reward_sums,
)
from trainers.config import SpyRLConfig
from trainers.documents import epoch_documents, training_documents
from trainers.extras import require_training_extras
from trainers.logprobs import sequence_logps
from trainers.loss import LossScale, loss_items
from trainers.metrics import TrainingProgress, chart_metrics, iteration_metrics, rule_metrics, sample_stats
from trainers.models import reference_logps, trainable_model
from trainers.policies import fixed_agents, learner_policy, seat_policy, spy_seat_policy
from trainers.samples import (
    Sample,
    choice_advantages,
    global_group_stats,
    stage_advantages,
    stage_rewards,
    stage_rows,
    trainable_samples,
)
from trainers.seeds import SeedStream, seed_for
from trainers.sinks import MetricSinks
from trainers.update import TrainingSamples, UpdateTotals, micro_step, mini_batch_size, optimizer_and_schedule
from trainers.votes import ForwardVotes, one_update, release_retained, retained_for_update

__all__ = ["SpyRLTrainer"]


class SpyRLTrainer:
    """GRPO for SpyRL with alternating stages and RAE (see the module docstring)."""

    def __init__(self, config: SpyRLConfig) -> None:
        """A fresh run in ``config.run.output_dir`` (:meth:`from_checkpoint` continues one)."""
        # a missing tracker or peft fails now, not after the first iteration
        require_training_extras(config.model, config.run.report_to)
        self.config = config
        self.output_dir = ckpt.hold_run_folder(self, config.run.output_dir)  # one writer a run
        torch.manual_seed(config.run.seed)
        self.model_path = resolve_model_path(
            config.model.name_or_path, tiny_dir=self.output_dir / "tiny-model", seed=config.run.seed
        )
        model, self.tokenizer = load_pretrained(self.model_path, dtype=config.model.dtype, device=config.model.device)
        from accelerate import Accelerator

        # One process: a plain loop. Under `accelerate launch`: DDP/FSDP/DeepSpeed as configured.
        self.accelerator = Accelerator(cpu=model.device.type == "cpu")
        self.distributed = self.accelerator.num_processes > 1
        self.rank = self.accelerator.process_index
        if self.distributed:
            model.to(self.accelerator.device)
        self.model, self.ref_model = trainable_model(model, config.model, config.loss.beta)  # the reference beside it
        processes.check_sharding(config.rollout.generation, config.run.eval_games, self.sharding)
        self.documents_share = processes.documents_share(
            config.rollout.documents_per_iteration, self.accelerator.num_processes, self.rank
        )
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.tokenizer.eos_token_id
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer, self.scheduler = optimizer_and_schedule(params, self.accelerator, config.update)
        if self.distributed:
            self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)
        self.controller = StageController.from_config(config.stages)
        self.rae = RAEBaselines(alpha=config.advantages.rae_alpha, init=config.advantages.rae_init)
        self.iteration = 0
        self.train_documents, self.eval_documents = training_documents(
            self.config.game, config.run.heldout_fraction, config.run.eval_games
        )
        self.policy: RolloutPolicy = learner_policy(config.decoding, config.rollout, self.unwrapped, self.tokenizer)
        if config.rollout.engine.syncs_weights:  # a separate engine; FSDP weights are gathered from the wrapped model
            from trainers.vllm_engine import vllm_rollout_policy

            model = self.model if self.sharding == "fsdp" else self.unwrapped
            engine = (model, self.accelerator, self.tokenizer, self.model_path)
            self.policy = vllm_rollout_policy(self.policy, config.rollout, config.decoding, config.game.rounds, *engine)
        place = {"device": str(self.accelerator.device), "dtype": config.model.dtype}  # fixed agents: loaded once
        self.fixed = fixed_agents(config.rollout, config.run.seed, config.decoding, **place)
        self.seat_policy = seat_policy(config.rollout, config.run.seed, self.policy, self.fixed)
        main = self.accelerator.is_main_process
        self.sinks = MetricSinks(self.output_dir, config.run.report_to if main else [], config.to_dict())

    @classmethod
    def from_checkpoint(cls, config: SpyRLConfig, checkpoint: str | Path = "latest") -> SpyRLTrainer:
        """The run in ``config.run.output_dir`` continued from ``checkpoint`` (its folder, or ``"latest"``)
        exactly where it was written: the checkpoint is verified under the run's lock before anything is
        built (a bad one is a :class:`~trainers.checkpoint.CheckpointError`), then the trainer that
        ``config`` builds takes its weights, optimizer, schedules, controller, baselines and RNG states."""
        with ckpt.opened_checkpoint(config.run.output_dir, str(checkpoint)) as folder:
            trainer = cls(config)
            trainer.load_checkpoint(folder, verified=True)
        return trainer

    @property
    def unwrapped(self) -> Any:
        """The model without DDP/FSDP wrappers (generation and saving use it)."""
        return self.accelerator.unwrap_model(self.model)

    @property
    def sharding(self) -> str | None:
        """``"fsdp"`` or ``"zero3"`` when no process holds whole weights, else None."""
        return processes.sharding(self.accelerator)

    def all_reduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        """Sum (or mean) ``values`` over processes; identity in a single process."""
        return processes.all_reduce(self.accelerator, values, op)

    # ------------------------------------------------------------- rollouts
    def _runner(self, documents: Sequence[Any], config: GameConfig | None = None) -> Runner:
        game = replace(config or self.config.game, corpus=documents, max_documents=None)
        return Runner(
            game,
            games_per_document=self.config.rollout.games_per_document,
            replay_setup=self.config.rollout.replay_setup,
            spy_seats=self.config.rollout.spy_seats,
            max_concurrent_games=self.documents_share[1] * self.config.rollout.games_per_document,
            run_id=f"iter{self.iteration}",
        )

    def rollouts(self) -> EpisodeBuffer:
        """This iteration's games, the current policy in every seat (seeded by the iteration)."""
        c = self.config
        self.policy.restart_sampling(seed_for(c.run.seed, self.iteration, SeedStream.SAMPLING, self.rank))
        self.fixed.restart_sampling(seed_for(c.run.seed, self.iteration, SeedStream.FIXED, self.rank))
        if isinstance(self.policy, ForwardVotes):  # keep the votes' graphs when they feed a one-step update
            self.policy.keep_graphs = self.controller.training_stage is Stage.VOTE and one_update(
                c.update, c.rollout.documents_per_iteration, c.loss.beta, self.distributed
            )
        self.model.eval()
        start, share = self.documents_share  # documents_per_iteration is the global batch: this process's slice
        games = share * c.rollout.games_per_document
        documents = self.train_documents
        if c.rollout.document_order == "epoch":
            documents = epoch_documents(documents, c.rollout.documents_per_iteration, self.iteration, c.run.seed)
            documents = documents[start : start + share]
        return self._runner(documents).run(
            [self.seat_policy] * self.config.game.n_players,
            games,
            seed=seed_for(c.run.seed, self.iteration, SeedStream.GAMES, self.rank),
            policy_version=self.iteration,
            first_game_id=(self.iteration * c.rollout.documents_per_iteration + start) * c.rollout.games_per_document,
            spy=spy_seat_policy(c.rollout, self.policy),
        )

    def save_buffer(self, buffer: EpisodeBuffer) -> None:
        suffix = f".rank{self.rank}" if self.distributed else ""
        buffer.save(self.output_dir / "buffers" / f"iter_{self.iteration:05d}{suffix}.parquet")

    def evaluate(self, num_games: int, seed: int = 12345) -> dict[str, float]:
        """Held-out metrics (greedy decoding, held-out documents, fixed games) with 95% bootstrap bounds."""
        c = self.config
        policy = learner_policy(c.decoding, c.rollout, self.unwrapped, self.tokenizer, greedy=True)
        self.model.eval()
        seats = [seat_policy(c.rollout, c.run.seed, policy, self.fixed.fresh(c.rollout, c.run.seed))] * c.game.n_players
        look = Look(model=f"{c.model.name_or_path}@iter{self.iteration}", recipe=c.to_dict())  # for the ledger
        spy = spy_seat_policy(c.rollout, policy)
        buffer, games = evaluate_heldout(seats, c.game, self.eval_documents, num_games, seed=seed, spy=spy, look=look)
        out = {**game_metrics(buffer), **rule_metrics(buffer)}
        for metric, interval in summarize(games).items():
            out.update({metric: interval.mean, f"{metric}_low": interval.low, f"{metric}_high": interval.high})
        return out

    # -------------------------------------------------------------- samples
    def select_samples(self, buffer: EpisodeBuffer, stage: Stage | str) -> tuple[list[Sample], dict[str, float]]:
        """The rows of ``stage`` that train, each paired with its advantages in a :class:`~trainers.samples.Sample`
        (the buffer's rows are not written; ``stage`` a :class:`~spy_env.Stage` or a schedule name)."""
        c = self.config
        stage = Stage.of(stage)
        rows, skipped = stage_rows(
            buffer if c.rollout.learner_plays(stage) else [],  # a fixed agent's replies are not the learner's
            stage,
            c.advantages,
            max_prompt_tokens=c.rollout.max_prompt_tokens,
        )
        rewards, penalties = stage_rewards(rows, stage, c.advantages, c.game, buffer)  # performances: perform_reward
        means = stats = None
        if stage is Stage.PERFORM and c.advantages.rae and self.distributed:  # global role means keep baselines in sync
            means = role_means(self.all_reduce(role_reward_sums(rewards, [r["role"] for r in rows])))
        if stage is Stage.VOTE and self.distributed:  # a group spread over the processes: their summed moments
            stats = global_group_stats(rows, rewards, c.advantages, c.game.weight_detect, self.all_reduce)
        advantages = stage_advantages(rows, rewards, stage, c.advantages, self.rae, c.game.weight_detect, means, stats)
        choices = choice_advantages(rows, stage, c.advantages, c.game.weight_detect, stats)
        samples = trainable_samples(rows, add_penalties(advantages, penalties), choices)
        if self.distributed:  # every process must run the same number of backward passes
            samples = samples[: processes.smallest_count(self.accelerator, len(samples))]
        return samples, sample_stats(samples, skipped)

    # -------------------------------------------------------------- updates
    def mini_batch_size(self, samples: int) -> int:
        """Samples per optimizer step when this iteration trains on ``samples`` rows (:func:`.update.mini_batch_size`)."""
        return mini_batch_size(
            self.config.update, self.config.rollout.documents_per_iteration, samples, self.accelerator.num_processes
        )

    def update(self, selected: list[Sample], stage: Stage | str) -> dict[str, float]:
        """``epochs`` passes over ``selected`` in shuffled mini-batches, one optimizer step each; returns ``losses/*``."""
        c = self.config
        level = c.loss.perform_ratio_level if Stage.of(stage) is Stage.PERFORM else c.loss.detect_ratio_level
        samples = TrainingSamples.from_samples(selected, c.decoding.max_completion_tokens)
        rows = samples.rows
        size = self.mini_batch_size(len(rows))
        samples.kept = retained_for_update(
            self.policy,
            samples,
            size,
            one_update(c.update, c.rollout.documents_per_iteration, c.loss.beta, self.distributed),
        )
        generator = torch.Generator().manual_seed(seed_for(c.run.seed, self.iteration, SeedStream.SHUFFLE))
        orders = [torch.randperm(len(rows), generator=generator).tolist() for _ in range(c.update.epochs)]
        orders = [list(range(len(rows)))] if samples.kept else orders  # one step, in the kept log-probs' order
        # the first mini-batch trains before any step: its behaviour log-probs are the current ones
        temperature = c.decoding.temperature_of(stage)
        self._fix_logps(samples, set(orders[0][:size]), temperature)
        self.model.train()
        totals = UpdateTotals()
        for order in orders:
            for start in range(0, len(order), size):
                self._optimizer_step(samples, order[start : start + size], level, temperature, totals)
        self.model.eval()
        return totals.metrics()

    def _fix_logps(self, samples: TrainingSamples, on_policy: set[int], t: float) -> None:
        """Behaviour log-probs of the off-policy samples, and reference log-probs (``beta`` > 0), at the
        stage's temperature ``t``: once, before any step."""
        c = self.config

        def behaviour(prompts: list[list[int]], completions: list[list[int]], choices: list) -> tuple:
            out = sequence_logps(self.model, prompts, completions, self.pad_id, t, choices=choices)
            return out.logps, out.choices

        def reference(prompts: list[list[int]], completions: list[list[int]], choices: list) -> tuple:
            models = (self.ref_model, self.model, self.unwrapped)
            return reference_logps(*models, prompts, completions, self.pad_id, t, choices)

        self.model.eval()
        with torch.no_grad():
            off_policy = [i for i in range(len(samples.rows)) if i not in on_policy]
            old, old_choices = samples.logps_by_row(behaviour, off_policy, c.update.micro_batch_size)
            samples.old.update(old)
            samples.old_choices.update(old_choices)
            every = range(len(samples.rows))
            if c.loss.beta:
                samples.ref.update(samples.logps_by_row(reference, every, c.update.micro_batch_size)[0])

    def _optimizer_step(
        self, samples: TrainingSamples, mini: list[int], level: str, temperature: float, totals: UpdateTotals
    ) -> None:
        """One optimizer step on ``mini`` (sample indices), gradients accumulated over micro-batches (one, kept),
        log-probs at the stage's ``temperature``."""
        c, kept = self.config, samples.kept
        step = len(mini) if kept else c.update.micro_batch_size  # the rollout's kept graphs: no new forward
        micros = [mini[i : i + step] for i in range(0, len(mini), step)]
        items = loss_items([samples.scored[i] for i in mini], level)
        if self.distributed:  # dapo/token-mean over every process's tokens (DDP then averages gradients)
            items = self.all_reduce([items])[0] / self.accelerator.num_processes
        loss = c.loss.objective(level, c.decoding.max_completion_tokens, c.advantages.vote_gradient)
        for k, micro in enumerate(micros):
            # Gradients accumulate over the mini-batch's micro-batches: DeepSpeed steps only at the
            # boundary (accelerate reads sync_gradients), DDP all-reduces only there.
            boundary = k == len(micros) - 1
            self.accelerator.sync_gradients = boundary
            batch = samples.micro_batch(micro, loss, LossScale(items, len(micros)))
            with contextlib.ExitStack() as stack:
                if not boundary and self.accelerator.distributed_type in processes.DDP_TYPES:
                    stack.enter_context(self.accelerator.no_sync(self.model))
                totals.add_micro_step(
                    micro_step(self.model, batch, temperature, self.pad_id, self.accelerator.backward, kept)
                )
        grad_norm = None
        if c.update.max_grad_norm:  # under DeepSpeed the engine clips (gradient_clipping) and reports the norm
            grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), c.update.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        totals.add_optimizer_step(grad_norm)

    # ------------------------------------------------------------ iteration
    def train_iteration(self) -> dict[str, Any]:
        """One iteration: rollouts, samples of the stage that trains, an update, then bookkeeping."""
        c = self.config
        stage = self.controller.training_stage
        start = time.perf_counter()
        buffer = self.rollouts()
        rollout_seconds = time.perf_counter() - start
        if c.run.keep_buffers:
            self.save_buffer(buffer)
        game = processes.mean_over_processes(self.accelerator, {**game_metrics(buffer), **rule_metrics(buffer)})
        rows, sample_metrics = self.select_samples(buffer, stage)
        start = time.perf_counter()
        update_metrics = self.update(rows, stage) if rows else {"losses/optimizer_steps": 0, "perf/update_tokens": 0}
        update_seconds = time.perf_counter() - start
        release_retained(self.policy)  # forward_votes: the rollout's graphs are spent
        self.scheduler.step()
        self.iteration += 1
        self.policy.sync()  # a separate engine (vLLM) needs the new weights
        next_stage = self.controller.update(*controller_signals(game, self.config.game.train_spy_vote))
        metrics = iteration_metrics(
            iteration=self.iteration,
            stage=stage,
            next_stage=next_stage,
            game=game,
            families=(sample_metrics, update_metrics, chart_metrics(self.scheduler, self.controller, self.rae)),
            buffer=buffer,
            seconds={"rollout": rollout_seconds, "update": update_seconds},
        )
        metrics.update(processes.process_metrics(self.accelerator, self.unwrapped))
        if c.run.eval_games and self.iteration % c.run.eval_every == 0 and self.accelerator.is_main_process:
            metrics.update({f"eval/{k}": v for k, v in self.evaluate(c.run.eval_games).items()})
        self.sinks.log(metrics)
        if self.iteration % c.run.checkpoint_every == 0 or self.iteration == c.run.iterations:
            self.save_checkpoint()
        return metrics

    def train(self) -> list[dict[str, Any]]:
        """Iterations until ``config.run.iterations``, with a progress bar if asked; returns their metrics."""
        history = []
        progress = TrainingProgress(self.config.run.iterations, self.iteration, enabled=self.config.run.progress)
        try:
            while self.iteration < self.config.run.iterations:
                history.append(self.train_iteration())
                progress.advance(history[-1])
        finally:
            progress.stop()
            self.sinks.close()
        return history

    # ---------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> Path:
        """Everything needed to resume exactly, written atomically to ``checkpoints/iter_K``
        (safetensors + JSON + a sha256 manifest; see :mod:`trainers.checkpoint`)."""
        return ckpt.save_trainer(self)

    def load_checkpoint(self, path: str | Path, *, verified: bool = False) -> None:
        """Resume from a checkpoint folder (or ``"latest"``) after checking its manifest and that
        every tensor is finite (``verified``: :func:`~trainers.checkpoint.opened_checkpoint` already
        did); raises :class:`trainers.checkpoint.CheckpointError` otherwise. :meth:`from_checkpoint`
        verifies before building, which is what ``spyrl train --resume`` does."""
        checkpoint = Path(path) if verified else ckpt.open_checkpoint(self.output_dir / "checkpoints", str(path))
        ckpt.load_trainer(self, checkpoint)
        self.policy.sync()  # a separate engine (vLLM) holds the weights it loaded, not the checkpoint's
