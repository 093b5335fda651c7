"""SpyRL's GRPO trainer: self-play rollouts → episode buffer → advantages → clipped updates.

One iteration (reads top to bottom in :meth:`SpyRLTrainer.train_iteration`):

1. **Rollouts.** The batched runner plays ``documents_per_iteration × games_per_document``
   games with the current policy in every seat (the ``hf`` backend on the policy itself; vLLM on
   GPU). The episode buffer is saved per iteration.
2. **Samples.** Only the current stage trains: performances in the performing stage, votes in
   the detection stage (the spy's vote only with ``train_spy_vote``).
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

Simplifications, stated plainly: rollouts in every iteration play both stages (games need
both) but only one stage's samples train; behaviour log-probs are recomputed by the trainer
(equal to the ``hf`` rollout log-probs at temperature 1, and the right choice when vLLM
generated them); everything random derives from ``(seed, iteration)``, which is what makes a
resumed run identical to an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.hf import HFPolicy, resolve_device, resolve_dtype
from agents.sampling import SamplingParams
from spy_env.buffer import EpisodeBuffer
from spy_env.config import GameConfig
from spy_env.corpus import CorpusFilter, load_corpus, split_documents
from spy_env.heldout import evaluate_heldout, summarize
from spy_env.io import write_text
from spy_env.metrics import game_metrics
from spy_env.runner import Runner
from trainers import checkpoint as ckpt
from trainers.algorithm import (
    PERFORM,
    RAEBaselines,
    StageController,
    add_penalties,
    controller_signals,
    group_normalized_advantages,
    group_scaled,
)
from trainers.config import SpyRLConfig
from trainers.loss import clipped_policy_loss
from trainers.sinks import MetricSinks

logger = logging.getLogger(__name__)

__all__ = ["SpyRLTrainer", "epoch_documents", "load_policy_model", "sequence_logps"]

_DDP = ("MULTI_GPU", "MULTI_CPU", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU", "MULTI_HPU")  # no_sync is safe there


def _seed_for(seed: int, iteration: int, stream: int, rank: int = 0) -> int:
    entropy = [seed, iteration, stream] + ([rank] if rank else [])
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])


def decoding_options(config: SpyRLConfig) -> dict[str, Any]:
    """The :class:`~agents.hf.HFPolicy` keyword arguments that shape replies while decoding."""
    return {
        "vote_mode": config.vote_mode,
        "think_tokens": config.think_tokens,
        "abstain": config.vote_abstain,
        "answer": config.answer,
        "answer_tokens": config.answer_tokens,
    }


def epoch_documents(documents: Sequence[Any], per_step: int, step: int, seed: int) -> list[Any]:
    """The ``per_step`` documents of step ``step`` when steps walk seeded epochs of ``documents``.

    Like a shuffled data loader (verl's): every document is played once per epoch before any
    repeats; epoch ``e`` is a permutation seeded by ``(seed, e)``, so a resumed run draws the same.

    >>> steps = [epoch_documents("abcd", 2, k, seed=0) for k in range(4)]
    >>> sorted(steps[0] + steps[1]), sorted(steps[2] + steps[3])
    (['a', 'b', 'c', 'd'], ['a', 'b', 'c', 'd'])
    """
    n = len(documents)
    out = []
    for position in range(step * per_step, (step + 1) * per_step):
        epoch, index = divmod(position, n)
        order = np.random.default_rng(_seed_for(seed, epoch, 3)).permutation(n)
        out.append(documents[int(order[index])])
    return out


def freeze_below(model: Any, top_layers: int) -> None:
    """Train only the last ``top_layers`` decoder blocks and the final norm; freeze the rest.

    The frozen bottom then runs without building a graph, and the backward pass stops at the first
    trainable block: on long prompts with a short scored answer (votes) most of the update's cost
    goes away. Embeddings (and a tied output layer) stay frozen.
    """
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None or not 0 < top_layers <= len(layers):
        raise ValueError(f"SpyRLConfig.train_top_layers must be in [1, {len(layers or [])}], got {top_layers}")
    model.requires_grad_(False)
    for block in list(layers)[-top_layers:]:
        block.requires_grad_(True)
    norm = getattr(model.get_decoder(), "norm", None)
    if norm is not None:
        norm.requires_grad_(True)


def load_policy_model(config: SpyRLConfig) -> tuple[Any, Any, str]:
    """Model, tokenizer and the path they came from (``tiny`` and ``smollm2`` are built locally)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = config.model
    if path == "tiny":
        from agents.tiny import build_tiny_model

        path = str(build_tiny_model(Path(config.output_dir) / "tiny-model", seed=config.seed))
    elif path == "smollm2":
        from agents import smollm2

        path = str(smollm2.converted_path())
    device = resolve_device(config.device)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(config.dtype, device)).to(device)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model, tokenizer, path


def sequence_logps(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs of each completion given its prompt.

    Prompts are left-padded and completions right-padded so every completion starts at the same
    column; position ids follow the attention mask (as in generation). Returns ``(logps, mask,
    entropy)`` of shape (B, T).
    """
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    length = max(len(c) for c in completions)
    batch = len(prompts)
    input_ids = torch.full((batch, width + length), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width + length), dtype=torch.long)
    for row, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        input_ids[row, width - len(prompt) : width] = torch.tensor(prompt, dtype=torch.long)
        input_ids[row, width : width + len(completion)] = torch.tensor(completion, dtype=torch.long)
        attention[row, width - len(prompt) : width + len(completion)] = 1
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    input_ids, attention, position_ids = (
        input_ids.to(device),
        attention.to(device),
        position_ids.to(device),
    )
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids,
        logits_to_keep=length + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1, :]  # (B, T, V): position t predicts completion token t
    logps, entropy = selective_logps(logits, input_ids[:, width:], temperature, with_entropy)
    mask = attention[:, width:].to(logps.dtype)
    return logps * mask, mask, entropy


def selective_logps(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log softmax(logits / τ)[target]`` per position (fp32), and the entropy if asked.

    Computed one sequence at a time as ``logit[target] − logsumexp(logits)``, so neither an fp32
    copy of the whole (B, T, V) logits nor a (B, T, V) log-softmax is ever materialised at once
    (with a 150k vocabulary and 4k-token responses those are tens of GB).
    """
    logps, entropies = [], []
    for row_logits, row_targets in zip(logits, targets, strict=True):
        row = row_logits.float() / temperature  # (T, V)
        lse = torch.logsumexp(row, dim=-1)
        logps.append(row.gather(-1, row_targets.unsqueeze(-1)).squeeze(-1) - lse)
        if with_entropy:
            with torch.no_grad():  # H = lse − Σ p·z
                entropies.append(lse - (torch.softmax(row, dim=-1) * row).sum(-1))
    return torch.stack(logps), torch.stack(entropies) if with_entropy else None


class SpyRLTrainer:
    """GRPO for SpyRL with alternating stages and RAE (see the module docstring)."""

    def __init__(self, config: SpyRLConfig, resume_from: str | Path | None = None) -> None:
        self.config = config
        self.output_dir = Path(config.output_dir)
        if resume_from:  # a bad checkpoint fails here, before anything is built or written
            resume_from = ckpt.open_checkpoint(self.output_dir / "checkpoints", str(resume_from))
        self.output_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(config.seed)
        self.model, self.tokenizer, self.model_path = load_policy_model(config)
        if config.gradient_checkpointing:
            # non-reentrant checkpointing with input grads enabled, so frozen embeddings (LoRA) still
            # pass gradients through the checkpointed blocks; the new name since transformers 5
            enable = getattr(self.model, "activation_checkpointing_enable", None)
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
                self.model.enable_input_require_grads()
        if config.lora_r:
            self._apply_lora()
        elif config.train_top_layers:
            freeze_below(self.model, config.train_top_layers)
        from accelerate import Accelerator

        # One process: a plain loop. Under `accelerate launch`: DDP/FSDP/DeepSpeed as configured.
        self.accelerator = Accelerator(cpu=resolve_device(config.device) == "cpu")
        self.distributed = self.accelerator.num_processes > 1
        self.rank = self.accelerator.process_index
        self._check_sharding()
        if self.distributed:
            self.model.to(self.accelerator.device)
        self.ref_model = self._reference_model()
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        )
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        warmup = config.warmup_iterations
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda it: min(1.0, (it + 1) / (warmup + 1)) if warmup else 1.0
        )
        if self.distributed:
            self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)
        self.controller = StageController(
            schedule=config.stage_schedule,
            start=config.start_stage,
            acc_high=config.acc_high,
            na_low=config.na_low,
            err_high=config.err_high,
            na_high=config.na_high,
            k_min=config.k_min,
            ema=config.stage_ema,
        )
        self.rae = RAEBaselines(alpha=config.rae_alpha, init=config.rae_init)
        self.iteration = 0
        self.game_config = config.game_config()
        documents = load_corpus(
            self.game_config.corpus,
            CorpusFilter(truncate=self.game_config.max_document_chars),
            max_documents=self.game_config.max_documents,
        )
        # held-out documents (by id hash, spy_env.corpus.split_documents) are never played in training
        train, heldout = split_documents(documents, config.heldout_fraction)
        if not train:
            raise ValueError(f"SpyRLConfig.heldout_fraction={config.heldout_fraction} leaves no training document")
        if config.eval_games and not heldout:
            raise ValueError("SpyRLConfig.eval_games > 0 needs held-out documents: raise heldout_fraction")
        self.train_documents, self.eval_documents = tuple(train), tuple(heldout)
        self.policy = HFPolicy(
            self.unwrapped,
            self.tokenizer,
            sampling=SamplingParams(
                temperature=config.temperature,
                top_p=config.top_p,
                max_new_tokens=config.max_completion_tokens,
            ),
            name="policy",
            batch_size=config.generation_batch_size,
            **decoding_options(config),
        )
        if config.generation != "hf":
            self.policy = self._vllm_policy(self.policy)
        self.seat_policy = _seat_policy(config, self.policy)
        main = self.accelerator.is_main_process
        self.sinks = MetricSinks(self.output_dir, config.report_to if main else [], config.to_dict())
        if resume_from:
            self.load_checkpoint(resume_from, verified=True)
            self.policy.sync()  # a separate engine loaded the initial weights, not the checkpoint's

    @property
    def unwrapped(self) -> Any:
        """The model without DDP/FSDP wrappers (generation and saving use it)."""
        return self.accelerator.unwrap_model(self.model)

    def _all_reduce(self, values: Sequence[float], op: str = "sum") -> list[float]:
        """Sum (or mean) ``values`` over processes; identity in a single process."""
        if not self.distributed:
            return list(values)
        tensor = torch.tensor(list(values), dtype=torch.float64, device=self.accelerator.device)
        return self.accelerator.reduce(tensor, reduction=op).tolist()

    # --------------------------------------------------------------- set-up
    def _apply_lora(self) -> None:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as e:
            raise ImportError("LoRA needs peft: pip install 'spyrl[train]'") from e
        c = self.config
        lora = LoraConfig(
            r=c.lora_r,
            lora_alpha=c.lora_alpha,
            lora_dropout=c.lora_dropout,
            target_modules=c.lora_target_modules,
            task_type="CAUSAL_LM",
        )
        self.model = get_peft_model(self.model, lora)

    @property
    def sharding(self) -> str | None:
        """``"fsdp"`` or ``"zero3"`` when no process holds whole weights, else None."""
        state = self.accelerator.state
        if getattr(state, "fsdp_plugin", None) is not None:
            return "fsdp"
        ds = getattr(state, "deepspeed_plugin", None)
        return "zero3" if ds is not None and ds.zero_stage == 3 else None

    def _check_sharding(self) -> None:
        """Under FSDP or ZeRO-3 no process holds whole weights, so hf generation cannot run there."""
        if self.sharding is None:
            return
        if self.config.generation == "hf":
            raise ValueError(
                "SpyRLConfig.generation must be 'vllm-colocate' or 'vllm-server' under FSDP or DeepSpeed ZeRO-3 "
                "(the weights are sharded; TRL's VLLMGeneration gathers them for the engine), got 'hf'"
            )
        if self.config.eval_games:
            raise ValueError(
                "SpyRLConfig.eval_games must be 0 under FSDP or DeepSpeed ZeRO-3 (held-out games generate with "
                "the hf backend on one process); evaluate a checkpoint with `spyrl eval --game` instead"
            )

    def _vllm_policy(self, encoder: HFPolicy) -> Any:
        """Rollouts through TRL's VLLMGeneration (colocated or server), sharing ``encoder``'s prompts."""
        from trainers.vllm_engine import VLLMRolloutPolicy, make_vllm_generation

        c = self.config
        collective = c.generation == "vllm-server" or c.vllm_tensor_parallel_size > 1
        if collective and self.distributed and self.game_config.rounds > 1:
            # generation then gathers prompts across processes, so every process must make the same
            # number of calls; games of several rounds end at different times on different processes
            raise ValueError(
                "SpyRLConfig.game.rounds must be 1 with generation='vllm-server' or vllm_tensor_parallel_size > 1 "
                f"on several processes, got {self.game_config.rounds}"
            )
        # FSDP weights are gathered from the wrapped model; DDP, DeepSpeed and PEFT from the module itself
        model = self.model if self.sharding == "fsdp" else self.unwrapped
        engine = make_vllm_generation(c, model, self.accelerator, self.tokenizer, self.model_path)
        return VLLMRolloutPolicy(
            engine, encoder, vote_mode=c.vote_mode, think_tokens=c.think_tokens, abstain=c.vote_abstain, name="policy"
        )

    def _reference_model(self) -> Any:
        if self.config.beta == 0:
            return None
        if self.config.lora_r:
            return None  # the base model with adapters disabled is the reference
        from transformers import AutoModelForCausalLM

        device = next(self.model.parameters()).device
        ref = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=next(self.model.parameters()).dtype)
        ref.to(device).eval().requires_grad_(False)
        return ref

    def _ref_logps(self, prompts, completions) -> torch.Tensor:
        with torch.no_grad():
            if self.ref_model is not None:
                return sequence_logps(self.ref_model, prompts, completions, self.pad_id, self.config.temperature)[0]
            with self.unwrapped.disable_adapter():
                return sequence_logps(self.model, prompts, completions, self.pad_id, self.config.temperature)[0]

    # ------------------------------------------------------------- rollouts
    def _runner(self, documents, config: GameConfig | None = None) -> Runner:
        game = replace(config or self.game_config, corpus=documents, max_documents=None)
        return Runner(
            game,
            games_per_document=self.config.games_per_document,
            replay_setup=self.config.replay_setup,
            max_concurrent_games=self.config.documents_per_iteration * self.config.games_per_document,
            run_id=f"iter{self.iteration}",
        )

    def rollouts(self) -> EpisodeBuffer:
        c = self.config
        self.policy.restart_sampling(_seed_for(c.seed, self.iteration, 1, self.rank))
        self.model.eval()
        games = c.documents_per_iteration * c.games_per_document
        documents = self.train_documents
        if c.document_order == "epoch":
            step = self.iteration * self.accelerator.num_processes + self.rank
            documents = epoch_documents(documents, c.documents_per_iteration, step, c.seed)
        runner = self._runner(documents)
        return runner.run(
            [self.seat_policy] * self.game_config.n_players,
            games,
            seed=_seed_for(c.seed, self.iteration, 0, self.rank),
            policy_version=self.iteration,
            first_game_id=(self.iteration * self.accelerator.num_processes + self.rank) * games,
        )

    def evaluate(self, num_games: int, seed: int = 12345) -> dict[str, float]:
        """Held-out metrics (greedy decoding, held-out documents, fixed games) with 95% bootstrap bounds."""
        policy = HFPolicy(
            self.unwrapped,
            self.tokenizer,
            sampling=SamplingParams(temperature=0.0, max_new_tokens=self.config.max_completion_tokens),
            name="policy",
            batch_size=self.config.generation_batch_size,
            **decoding_options(self.config),
        )
        self.model.eval()
        seat_policy = _seat_policy(self.config, policy)
        seats = [seat_policy] * self.game_config.n_players
        buffer, games = evaluate_heldout(seats, self.game_config, self.eval_documents, num_games, seed=seed)
        out = game_metrics(buffer)
        for metric, interval in summarize(games).items():
            out.update({metric: interval.mean, f"{metric}_low": interval.low, f"{metric}_high": interval.high})
        return out

    # -------------------------------------------------------------- samples
    def select_samples(self, buffer: EpisodeBuffer, stage: str) -> tuple[list[dict], dict[str, float]]:
        """The rows of ``stage`` that train, with their advantages in ``row['advantage']``.

        Votes: Eq. 5 over ``r^D`` within each group (a game's voters, the spy's included with
        ``spy_vote_in_group``). Performances: RAE, ``r^P − b_role``, optionally scaled by
        the replay group's std. Penalties are added to the offender's advantage afterwards
        (``penalty_advantage="own"``) or folded into the reward first (``"shared"``).
        """
        c = self.config
        game_config = c.game_config()
        wanted = "perform" if stage == PERFORM else "vote"
        rows, skipped = [], {"too_long_prompt": 0, "empty": 0, "forfeit": 0, "no_choice": 0}
        for row in buffer:
            if row["stage"] != wanted:
                continue
            # the spy's untrained vote still joins its game's normalisation group when asked
            if not row["trainable"] and not (wanted == "vote" and c.spy_vote_in_group and row["role"] == "spy"):
                continue
            if row["error"]:
                skipped["forfeit"] += 1
            elif not row["completion_token_ids"]:
                skipped["empty"] += 1
            elif row["completion_mask"] and not any(row["completion_mask"]):  # every token was forced
                skipped["no_choice"] += 1
            elif len(row["prompt_token_ids"]) > c.max_prompt_tokens:
                skipped["too_long_prompt"] += 1
            else:
                rows.append(row)
        weight = game_config.weight_detect if wanted == "vote" else game_config.weight_perform
        component = "reward_detect" if wanted == "vote" else "reward_perform"
        if c.penalty_advantage == "own":
            rewards = [weight * r[component] for r in rows]
            penalties = [game_config.weight_penalty * r["reward_penalty"] for r in rows]
        else:
            rewards, penalties = [r["reward"] for r in rows], [0.0] * len(rows)
        rae_means = None
        if wanted == "perform" and c.rae and self.distributed:  # global role means keep baselines in sync
            roles = [r["role"] for r in rows]
            sums = self._all_reduce(
                [sum(r for r, k in zip(rewards, roles, strict=True) if k == role) for role in ("civilian", "spy")]
                + [roles.count("civilian"), roles.count("spy")]
            )
            rae_means = {role: sums[i] / sums[i + 2] for i, role in enumerate(("civilian", "spy")) if sums[i + 2]}
        if wanted == "vote":
            if c.detect_advantage_groups == "game":
                groups = [(r["game_id"], r["round"]) for r in rows]
            else:  # one seat's vote across the replayed games of its group (same document, spy and masks)
                groups = [(r["group_id"], r["seat"], r["round"]) for r in rows]
            advantages = group_normalized_advantages(rewards, groups, eps=c.advantage_eps)
        else:
            roles = [r["role"] for r in rows]
            if c.rae:
                advantages = self.rae.advantages(rewards, roles, role_means=rae_means)
            else:
                advantages = np.asarray(rewards, dtype=np.float64)
            if c.perform_group_norm:
                groups = [(r["group_id"], r["seat"], r["round"]) for r in rows]
                if c.rae:  # the baseline centres, the group scales (re-centring would cancel b_role)
                    advantages = group_scaled(advantages, rewards, groups, eps=c.advantage_eps)
                else:
                    advantages = group_normalized_advantages(rewards, groups, eps=c.advantage_eps)
        advantages = add_penalties(advantages, penalties)
        for row, advantage in zip(rows, advantages, strict=True):
            row["advantage"] = float(advantage)
        rows = [r for r in rows if r["trainable"]]
        if self.distributed:  # every process must run the same number of backward passes
            counts = self.accelerator.gather(torch.tensor([len(rows)], device=self.accelerator.device))
            rows = rows[: int(counts.min())]
        stats = {f"samples/skipped_{k}": v for k, v in skipped.items()}
        if not rows:
            return rows, stats
        trained = np.array([r["advantage"] for r in rows])
        stats["samples/count"] = len(rows)
        stats["advantages/mean"] = float(np.mean(trained))
        stats["advantages/std"] = float(np.std(trained))
        return rows, stats

    # -------------------------------------------------------------- updates
    def _micro_step(self, micro: list[int], samples: _Samples, level: str, items: int, accumulation: int) -> dict:
        """Forward and backward of one micro-batch (indices into ``samples``); returns its statistics."""
        c = self.config
        logps, mask, entropy = sequence_logps(
            self.model, [samples.prompts[i] for i in micro], [samples.completions[i] for i in micro],
            self.pad_id, c.temperature, with_entropy=True,
        )  # fmt: skip
        width = logps.shape[1]
        mask = mask * torch.stack([_pad(samples.scored[i], width) for i in micro]).to(mask)  # forced tokens: 0
        old_mb = torch.stack(
            [_pad(samples.old[i], width) if i in samples.old else logps[k].detach() for k, i in enumerate(micro)]
        )
        ref_mb = torch.stack([_pad(samples.ref[i], width) for i in micro]) if c.beta else None
        advantages = torch.tensor([samples.rows[i]["advantage"] for i in micro], dtype=logps.dtype)
        out = clipped_policy_loss(
            logps, old_mb, advantages, mask,
            ref_logps=ref_mb, level=level, loss_type=c.loss_type,
            epsilon_low=c.epsilon, epsilon_high=c.epsilon_upper, beta=c.beta,
            kl_bias_correction=c.kl_bias_correction, kl_estimator=c.kl_estimator, max_completion_length=c.max_completion_tokens,
            num_items_in_batch=items, accumulation_steps=accumulation,
        )  # fmt: skip
        self.accelerator.backward(out.loss)
        return {
            "tokens": int(mask.sum().item()),
            "loss": out.policy_loss,
            "kl": out.kl,
            "clip_fraction": out.clip_fraction,
            "ratio": out.ratio_mean,
            "entropy": float((entropy * mask).sum() / mask.sum().clamp(min=1)),
        }

    def mini_batch_size(self, samples: int) -> int:
        """Samples per optimizer step when this iteration trains on ``samples`` rows.

        ``updates_per_iteration`` k > 0: ``ceil(samples / k)``. ``mini_batch_unit="documents"`` (verl's
        prompt-counted ``ppo_mini_batch_size``): ``ceil(documents_per_iteration / mini_batch_size)``
        updates, so 128 documents of 128 make one. Else ``mini_batch_size`` samples.
        """
        c = self.config
        updates = c.updates_per_iteration
        if not updates and c.mini_batch_unit == "documents":
            updates = -(-c.documents_per_iteration // c.mini_batch_size)
        if updates:
            return max(1, -(-samples // updates))
        return c.mini_batch_size

    def update(self, rows: list[dict], stage: str) -> dict[str, float]:
        c = self.config
        level = c.perform_ratio_level if stage == PERFORM else c.detect_ratio_level
        samples = _Samples.from_rows(rows, c.max_completion_tokens)
        prompts, completions = samples.prompts, samples.completions
        mini_batch_size = self.mini_batch_size(len(rows))
        # Behaviour and reference log-probs, once, before any update. The first mini-batch of the
        # first epoch trains before any step, so its behaviour log-probs are the current ones
        # (detached) and need no extra forward pass.
        generator = torch.Generator().manual_seed(_seed_for(c.seed, self.iteration, 2))
        orders = [torch.randperm(len(rows), generator=generator).tolist() for _ in range(c.epochs)]
        on_policy = set(orders[0][:mini_batch_size])
        self.model.eval()
        with torch.no_grad():
            need_old = [i for i in range(len(rows)) if i not in on_policy]
            for start in range(0, len(need_old), c.micro_batch_size):
                chunk = need_old[start : start + c.micro_batch_size]
                logps = sequence_logps(
                    self.model, [prompts[i] for i in chunk], [completions[i] for i in chunk], self.pad_id, c.temperature
                )[0]
                samples.old.update({i: logps[k, : len(completions[i])] for k, i in enumerate(chunk)})
            if c.beta:
                for start in range(0, len(rows), c.micro_batch_size):
                    chunk = list(range(start, min(start + c.micro_batch_size, len(rows))))
                    logps = self._ref_logps([prompts[i] for i in chunk], [completions[i] for i in chunk])
                    samples.ref.update({i: logps[k, : len(completions[i])] for k, i in enumerate(chunk)})
        self.model.train()
        totals: dict[str, float] = {
            "loss": 0.0,
            "kl": 0.0,
            "clip_fraction": 0.0,
            "ratio": 0.0,
            "entropy": 0.0,
        }
        micro_steps = optimizer_steps = tokens = 0
        for order in orders:
            for mb_start in range(0, len(order), mini_batch_size):
                mini = order[mb_start : mb_start + mini_batch_size]
                micros = [mini[i : i + c.micro_batch_size] for i in range(0, len(mini), c.micro_batch_size)]
                items = int(sum(samples.scored[i].sum().item() for i in mini))
                if self.distributed:  # dapo/token-mean over every process's tokens (DDP then averages gradients)
                    items = self._all_reduce([items])[0] / self.accelerator.num_processes
                for k, micro in enumerate(micros):
                    # Gradients accumulate over the mini-batch's micro-batches: DeepSpeed steps only at
                    # the boundary (accelerate reads sync_gradients), DDP all-reduces only there.
                    boundary = k == len(micros) - 1
                    self.accelerator.sync_gradients = boundary
                    with contextlib.ExitStack() as stack:
                        if not boundary and self.accelerator.distributed_type in _DDP:
                            stack.enter_context(self.accelerator.no_sync(self.model))
                        stats = self._micro_step(micro, samples, level, items, len(micros))
                    micro_steps += 1
                    tokens += stats.pop("tokens")
                    for key, value in stats.items():
                        totals[key] += value
                if c.max_grad_norm:  # under DeepSpeed the engine clips (gradient_clipping) and reports the norm
                    grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), c.max_grad_norm)
                    if grad_norm is not None:
                        totals["grad_norm"] = totals.get("grad_norm", 0.0) + float(grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                optimizer_steps += 1
        self.model.eval()
        out = {f"losses/{k}": v / max(micro_steps, 1) for k, v in totals.items() if k != "grad_norm"}
        if "grad_norm" in totals:
            out["losses/grad_norm"] = totals["grad_norm"] / max(optimizer_steps, 1)
        out["losses/optimizer_steps"] = optimizer_steps
        out["perf/update_tokens"] = tokens
        return out

    # ------------------------------------------------------------ iteration
    def train_iteration(self) -> dict[str, Any]:
        c = self.config
        stage = self.controller.stage
        start = time.perf_counter()
        buffer = self.rollouts()
        rollout_seconds = time.perf_counter() - start
        if c.keep_buffers:
            suffix = f".rank{self.rank}" if self.distributed else ""
            buffer.save(self.output_dir / "buffers" / f"iter_{self.iteration:05d}{suffix}.parquet")
        game = game_metrics(buffer)
        if self.distributed:  # every process decides the next stage from the same global numbers
            keys = sorted(game)
            game = dict(zip(keys, self._all_reduce([game[k] for k in keys], op="mean"), strict=True))
            game["games"] *= self.accelerator.num_processes
        rows, sample_stats = self.select_samples(buffer, stage)
        start = time.perf_counter()
        update_stats = self.update(rows, stage) if rows else {"losses/optimizer_steps": 0, "perf/update_tokens": 0}
        update_seconds = time.perf_counter() - start
        self.scheduler.step()
        self.iteration += 1
        self.policy.sync()  # a separate engine (vLLM) needs the new weights
        next_stage = self.controller.update(*controller_signals(game, self.game_config.train_spy_vote))
        generated = sum(len(r["completion_token_ids"]) for r in buffer)
        metrics: dict[str, Any] = {
            "iteration": self.iteration,
            "stage": stage,
            "next_stage": next_stage,
            "policy_version": self.iteration,
            **{f"env/{k}": v for k, v in game.items()},
            **sample_stats,
            **update_stats,
            "charts/lr": self.scheduler.get_last_lr()[0],
            "charts/acc_ema": self.controller.acc_ema,
            "charts/na_ema": self.controller.na_ema,
            **{f"charts/rae_{k}": v for k, v in self.rae.baselines.items()},
            **length_metrics(buffer),
            "time/rollout_seconds": rollout_seconds,
            "time/update_seconds": update_seconds,
            "perf/rollout_tokens_per_s": generated / max(rollout_seconds, 1e-9),
            "perf/update_tokens_per_s": update_stats["perf/update_tokens"] / max(update_seconds, 1e-9),
        }
        if self.distributed:
            metrics["dist/num_processes"] = self.accelerator.num_processes
        if self.accelerator.distributed_type in _DDP:
            with torch.no_grad():  # replicas must stay identical: a cheap fingerprint, gathered
                fingerprint = sum(p.double().sum() for p in self.unwrapped.parameters())
            spread = self.accelerator.gather(fingerprint.reshape(1).to(self.accelerator.device))
            metrics["dist/param_sync_error"] = float(spread.max() - spread.min())
        if c.eval_games and self.iteration % c.eval_every == 0 and self.accelerator.is_main_process:
            for k, v in self.evaluate(c.eval_games).items():
                metrics[f"eval/{k}"] = v
        self.sinks.log(metrics)
        if self.iteration % c.checkpoint_every == 0 or self.iteration == c.iterations:
            self.save_checkpoint()
        return metrics

    def train(self) -> list[dict[str, Any]]:
        history = []
        progress = None
        if self.config.progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            progress = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            progress.start()
            task = progress.add_task("training", total=self.config.iterations, completed=self.iteration)
        try:
            while self.iteration < self.config.iterations:
                metrics = self.train_iteration()
                history.append(metrics)
                if progress is not None:
                    progress.update(
                        task,
                        advance=1,
                        description=f"training [{metrics['stage']}] acc {metrics['env/detection_accuracy']:.2f}"
                        f" na {metrics['env/na_rate']:.2f}",
                    )
        finally:
            if progress is not None:
                progress.stop()
            self.sinks.close()
        return history

    # ---------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> Path:
        """Everything needed to resume exactly, written atomically to ``checkpoints/iter_K``
        (safetensors + JSON + a sha256 manifest; see :mod:`trainers.checkpoint`)."""
        root = self.output_dir / "checkpoints"
        target = root / f"iter_{self.iteration:05d}"
        main = self.accelerator.is_main_process
        # one staging folder for every process (they all write into it), renamed into place at the end
        tmp = root / f".tmp_iter_{self.iteration:05d}{'' if self.distributed else f'_{os.getpid()}'}"
        bad = ckpt.first_non_finite(self.unwrapped)  # never write NaN weights over the run
        # every process decides together (each may hold only a shard), so none waits for the others forever
        if self.distributed and self._all_reduce([float(bad is not None)])[0] and bad is None:
            bad = "a parameter of another process"
        if bad is not None:
            raise ckpt.CheckpointError(
                f"parameter {bad} is not finite; checkpoint iter_{self.iteration:05d} not written"
            )
        if main:
            ckpt.remove_stale_staging(root)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        state_dict = None
        if self.distributed:
            self.accelerator.wait_for_everyone()
            # Collective. Model and optimizer as accelerate saves them for DDP, FSDP (shards) or
            # DeepSpeed (engine checkpoint), plus every process's RNG states; and the full weights
            # gathered once more for a plain Hugging Face folder.
            self.accelerator.save_state(str(tmp / "accelerate"))
            state_dict = self.accelerator.get_state_dict(self.model)
            self.accelerator.wait_for_everyone()
            if not main:  # the main process writes the rest; the others wait
                self.accelerator.wait_for_everyone()
                return target
        self.unwrapped.save_pretrained(tmp / "model", state_dict=state_dict)
        self.tokenizer.save_pretrained(tmp / "model")
        rng, tensors = ckpt.rng_snapshot()
        optimizer = None
        if not self.distributed:
            optimizer, optimizer_tensors = ckpt.optimizer_to_flat(self.optimizer.state_dict())
            tensors.update(optimizer_tensors)
        state = {
            "format": ckpt.FORMAT,
            "iteration": self.iteration,
            "distributed": self.distributed,
            "optimizer": optimizer,
            "scheduler": self.scheduler.state_dict(),
            "controller": self.controller.state_dict(),
            "rae": self.rae.state_dict(),
            "rng": rng,
            "config": self.config.to_dict(),
            "metrics_rows": self.sinks.rows_written,
        }
        ckpt.write_state(tmp, state, tensors)
        ckpt.write_manifest(tmp)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        write_text(root / "latest", target.name)
        if self.distributed:
            self.accelerator.wait_for_everyone()
        return target

    def load_checkpoint(self, path: str | Path, *, verified: bool = False) -> None:
        """Resume from a checkpoint folder (or ``"latest"``) after checking its manifest and that
        every tensor is finite (``verified``: :func:`~trainers.checkpoint.open_checkpoint` already
        did); raises :class:`trainers.checkpoint.CheckpointError` otherwise."""
        checkpoint = Path(path) if verified else ckpt.open_checkpoint(self.output_dir / "checkpoints", str(path))
        state, tensors = ckpt.read_state(checkpoint)
        if self.distributed:
            if not state["distributed"]:
                raise ckpt.CheckpointError(f"{checkpoint} was written by a single process; resume it with one process")
            self.accelerator.load_state(str(checkpoint / "accelerate"))  # model, optimizer, per-process RNG
        elif state["distributed"]:
            raise ckpt.CheckpointError(
                f"{checkpoint} was written by several processes; resume it under the same launcher"
            )
        elif self.config.lora_r:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(
                self.unwrapped, load_file(str(checkpoint / "model" / "adapter_model.safetensors"))
            )
        else:
            from transformers import AutoModelForCausalLM

            loaded = AutoModelForCausalLM.from_pretrained(
                checkpoint / "model", dtype=next(self.model.parameters()).dtype
            )
            self.unwrapped.load_state_dict(loaded.state_dict())
        if not self.distributed:
            self.optimizer.load_state_dict(ckpt.optimizer_from_flat(state["optimizer"], tensors, self.optimizer))
            ckpt.restore_rng(state["rng"], tensors)
        self.scheduler.load_state_dict(state["scheduler"])
        self.controller.load_state_dict(state["controller"])
        self.rae.load_state_dict(state["rae"])
        self.iteration = int(state["iteration"])
        self.sinks.truncate(int(state["metrics_rows"]))
        logger.info("resumed from %s at iteration %d", checkpoint, self.iteration)


@dataclass
class _Samples:
    """The training samples of one update: token ids, scored-token masks and fixed log-probs."""

    rows: list[dict]
    prompts: list[list[int]]
    completions: list[list[int]]
    scored: list[torch.Tensor]  # (T_i,) 1 for tokens the model chose, 0 for forced ones
    old: dict[int, torch.Tensor] = field(default_factory=dict)  # behaviour log-probs, off-policy rows
    ref: dict[int, torch.Tensor] = field(default_factory=dict)  # reference log-probs (beta > 0)

    @classmethod
    def from_rows(cls, rows: list[dict], max_tokens: int) -> _Samples:
        completions = [list(r["completion_token_ids"])[:max_tokens] for r in rows]
        scored = []
        for row, completion in zip(rows, completions, strict=True):
            mask = list(row.get("completion_mask") or [])[: len(completion)]
            scored.append(torch.tensor(mask if len(mask) == len(completion) else [1] * len(completion)))
        return cls(rows, [list(r["prompt_token_ids"]) for r in rows], completions, scored)


class _StagePolicy:
    """Different policies per stage: e.g. scripted performers and the learner's votes."""

    def __init__(self, performer: Any, voter: Any) -> None:
        self.performer = performer
        self.voter = voter
        self.name = "policy"

    def act(self, observations):
        out: list[Any] = [None] * len(observations)
        perform = [i for i, o in enumerate(observations) if o["stage"] == 0]
        vote = [i for i, o in enumerate(observations) if o["stage"] != 0]
        for indices, policy in ((perform, self.performer), (vote, self.voter)):
            if indices:
                for i, action in zip(indices, policy.act([observations[i] for i in indices]), strict=True):
                    out[i] = action
        return out


def _seat_policy(config: SpyRLConfig, learner: Any) -> Any:
    """The learner in every seat, except for a stage given to a scripted agent."""
    if config.performer == "self" and config.voter == "self":
        return learner
    from agents import load

    performer = learner if config.performer == "self" else load(config.performer, seed=config.seed)
    voter = learner if config.voter == "self" else load(config.voter, seed=config.seed)
    return _StagePolicy(performer, voter)


def length_metrics(rows: Sequence[dict]) -> dict[str, float]:
    """Mean prompt, completion and *scored* completion tokens per stage, over LLM rows only.

    Scripted agents' rows (no token ids) are left out, so a stage played by a heuristic does not
    pull the means toward 0; scored tokens are those the model chose (forced ones excluded).
    """
    out: dict[str, float] = {}
    for stage in ("perform", "vote"):
        llm = [r for r in rows if r["stage"] == stage and r["completion_token_ids"]]
        if not llm:
            continue
        out[f"lengths/{stage}_prompt_tokens"] = float(np.mean([len(r["prompt_token_ids"]) for r in llm]))
        out[f"lengths/{stage}_completion_tokens"] = float(np.mean([len(r["completion_token_ids"]) for r in llm]))
        out[f"lengths/{stage}_scored_tokens"] = float(
            np.mean(
                [sum(r["completion_mask"]) if r["completion_mask"] else len(r["completion_token_ids"]) for r in llm]
            )
        )
    return out


def _pad(values: torch.Tensor, width: int) -> torch.Tensor:
    """A (T_i,) row zero-padded (or cut) to ``width``."""
    out = values.new_zeros(width)
    n = min(width, values.shape[0])
    out[:n] = values[:n]
    return out
