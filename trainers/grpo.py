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

The pieces live next door: :mod:`trainers.advantages` (one pipeline a stage: which rows train, their
advantages), :mod:`trainers.update` (the updater: log-probs, micro-batches, optimizer steps), :mod:`trainers.loss`
(Eq. 7), :mod:`trainers.policies` (who plays), :mod:`trainers.models` (what trains), :mod:`trainers.checkpoint`,
:mod:`trainers.metrics`, :mod:`trainers.processes`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from agents.models import resolve_model_path
from agents.pretrained import load_pretrained
from spy_env.buffer import EpisodeBuffer
from spy_env.config import GameConfig
from spy_env.heldout import Look, evaluate_heldout, summarize
from spy_env.metrics import game_metrics
from spy_env.policy import RolloutPolicy
from spy_env.runner import Runner
from spy_env.stage import Stage
from trainers import checkpoint as ckpt
from trainers import processes
from trainers.advantages import AdvantagePipeline
from trainers.algorithm import RAEBaselines, StageController, controller_signals
from trainers.config import SpyRLConfig
from trainers.documents import epoch_documents, training_documents
from trainers.extras import require_training_extras
from trainers.metrics import TrainingProgress, chart_metrics, iteration_metrics, rule_metrics
from trainers.models import trainable_model
from trainers.policies import fixed_agents, learner_policy, seat_policy, spy_seat_policy
from trainers.samples import Sample
from trainers.seeds import SeedStream, seed_for
from trainers.sinks import MetricSinks
from trainers.update import Updater, optimizer_and_schedule
from trainers.votes import ForwardVotes

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
        optimizer, self.scheduler = optimizer_and_schedule(params, self.accelerator, config.update)
        if self.distributed:
            self.model, optimizer = self.accelerator.prepare(self.model, optimizer)
        self.controller = StageController.from_config(config.stages)
        self.rae = RAEBaselines(alpha=config.advantages.rae_alpha, init=config.advantages.rae_init)
        self.iteration = 0
        self.train_documents, self.eval_documents = training_documents(
            self.config.game, config.run.heldout_fraction, config.run.eval_games
        )
        self.policy: RolloutPolicy = learner_policy(config.decoding, config.rollout, self.unwrapped, self.tokenizer)
        if config.rollout.engine.syncs_weights:  # a separate engine; FSDP weights are gathered from the wrapped model
            from trainers.vllm_engine import vllm_rollout_policy
            from trainers.vllm_generation import make_vllm_generation

            model = self.model if self.sharding == "fsdp" else self.unwrapped
            weights = (model, self.accelerator, self.tokenizer, self.model_path)
            engine = make_vllm_generation(config.rollout, config.decoding, config.game.rules.rounds, *weights)
            self.policy = vllm_rollout_policy(self.policy, engine, config.rollout, config.decoding)
        place = {"device": str(self.accelerator.device), "dtype": config.model.dtype}  # fixed agents: loaded once
        self.fixed = fixed_agents(config.rollout, config.run.seed, config.decoding, **place)
        self.seat_policy = seat_policy(config.rollout, config.run.seed, self.policy, self.fixed)
        learner = frozenset(stage for stage in (Stage.PERFORM, Stage.VOTE) if config.rollout.learner_plays(stage))
        total = fewest = None
        if self.distributed:  # what processes add up: the advantages' sums and fewest samples, the update's tokens
            total, fewest = self.all_reduce, partial(processes.smallest_count, self.accelerator)
        pipeline = (config.advantages, config.game, self.rae, learner, config.rollout.max_prompt_tokens)
        self.advantages = AdvantagePipeline(*pipeline, total, fewest)
        model = (self.model, self.ref_model, optimizer, self.accelerator, self.policy, self.pad_id)
        sections = (config.update, config.loss, config.decoding, config.advantages.vote_gradient)
        self.updater = Updater(*model, *sections, config.rollout.documents_per_iteration, total)
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
    def optimizer(self) -> Any:
        """The optimizer (the updater steps it, a checkpoint keeps its state)."""
        return self.updater.optimizer

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
            self.policy.keep_graphs = self.controller.training_stage is Stage.VOTE and self.updater.one_step
        self.model.eval()
        start, share = self.documents_share  # documents_per_iteration is the global batch: this process's slice
        games = share * c.rollout.games_per_document
        documents = self.train_documents
        if c.rollout.document_order == "epoch":
            documents = epoch_documents(documents, c.rollout.documents_per_iteration, self.iteration, c.run.seed)
            documents = documents[start : start + share]
        return self._runner(documents).run(
            [self.seat_policy] * self.config.game.rules.n_players,
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
        seats = [
            seat_policy(c.rollout, c.run.seed, policy, self.fixed.fresh(c.rollout, c.run.seed))
        ] * c.game.rules.n_players
        look = Look(model=f"{c.model.name_or_path}@iter{self.iteration}", recipe=c.to_dict())  # for the ledger
        spy = spy_seat_policy(c.rollout, policy)
        buffer, games = evaluate_heldout(seats, c.game, self.eval_documents, num_games, seed=seed, spy=spy, look=look)
        out = {**game_metrics(buffer), **rule_metrics(buffer)}
        for metric, interval in summarize(games).items():
            out.update({metric: interval.mean, f"{metric}_low": interval.low, f"{metric}_high": interval.high})
        return out

    # ------------------------------------------------------ samples, update
    def select_samples(self, buffer: EpisodeBuffer, stage: Stage | str) -> tuple[list[Sample], dict[str, float]]:
        """The rows of ``stage`` that train, each paired with its advantages in a :class:`~trainers.samples.Sample`,
        and their metrics (:meth:`trainers.advantages.AdvantagePipeline.samples_of`; the buffer's rows are not
        written; ``stage`` a :class:`~spy_env.Stage` or a schedule name)."""
        return self.advantages.samples_of(buffer, Stage.of(stage))

    def update(self, selected: list[Sample], stage: Stage | str) -> dict[str, float]:
        """``epochs`` passes over ``selected`` in shuffled mini-batches, one optimizer step each; returns
        ``losses/*`` (:meth:`trainers.update.Updater.fit`, shuffled as this iteration's update is)."""
        shuffle = seed_for(self.config.run.seed, self.iteration, SeedStream.SHUFFLE)
        return self.updater.fit(selected, Stage.of(stage), shuffle)

    # ------------------------------------------------------------ iteration
    def train_iteration(self) -> dict[str, Any]:
        """One iteration: rollouts, the stage's advantage pipeline, the updater, then bookkeeping."""
        c = self.config
        stage = self.controller.training_stage
        start = time.perf_counter()
        buffer = self.rollouts()
        rollout_seconds = time.perf_counter() - start
        if c.run.keep_buffers:
            self.save_buffer(buffer)
        samples, sample_metrics = self.advantages.samples_of(buffer, stage)
        start = time.perf_counter()
        update_metrics = self.updater.fit(samples, stage, seed_for(c.run.seed, self.iteration, SeedStream.SHUFFLE))
        update_seconds = time.perf_counter() - start
        self.scheduler.step()
        self.iteration += 1
        self.policy.sync()  # a separate engine (vLLM) needs the new weights
        dist = processes.process_metrics(self.accelerator, self.unwrapped)  # the replicas after the step
        game = processes.mean_over_processes(self.accelerator, {**game_metrics(buffer), **rule_metrics(buffer)})
        next_stage = self.controller.update(*controller_signals(game, c.game.rules.train_spy_vote))
        metrics = iteration_metrics(
            iteration=self.iteration,
            stage=stage,
            next_stage=next_stage,
            game=game,
            families=(sample_metrics, update_metrics, chart_metrics(self.scheduler, self.controller, self.rae)),
            buffer=buffer,
            seconds={"rollout": rollout_seconds, "update": update_seconds},
        )
        metrics.update(dist)
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
