"""``rollout.generation``: the engines that play the learner's rollouts, each saying what it can do.

- ``hf``: the trained model itself generates (:class:`agents.hf.HFPolicy`, CPU or GPU). It runs every
  decoding program token by token and records each vote's choice distribution, and it needs no weight
  sync: it *is* the policy. It needs whole weights on every process (no FSDP or ZeRO-3).
- ``vllm-colocate``: a vLLM engine in each training process, through TRL's ``VLLMGeneration``
  (:mod:`trainers.vllm_engine`), given the trained weights after every update.
- ``vllm-server``: a separate ``trl vllm-serve`` reached through TRL's ``VLLMClient``; each call gathers
  every process's prompts.

The trainer and ``SpyRLConfig`` ask the registered :class:`RolloutEngine` (:data:`ROLLOUT_ENGINES`,
:func:`engine_of`) what it supports; none of them compares the setting's name.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.registry import Registry

__all__ = ["ROLLOUT_ENGINES", "RolloutEngine", "engine_of"]


@dataclass(frozen=True)
class RolloutEngine:
    """A ``rollout.generation``: what generates the learner's replies, and what it supports.

    ``records_votes``: a vote's allowed tokens and its choice distribution are recorded
    (``completion_mask``, ``vote_distribution``, the choice step), as the ``expected`` and ``supervised``
    vote gradients and the ``expected`` performing reward need; vLLM's structured outputs do not say
    which tokens the pattern allowed. ``decodes_each_request``: every decoding program (a forced boxed
    ending) and a temperature per stage, whatever the engine's placement. ``syncs_weights``: a separate
    engine built beside the trained model, holding its own copy of the weights, which it is given after
    every update (``RolloutPolicy.sync``). ``runs_sharded``: it generates when no process holds whole
    weights (FSDP, DeepSpeed ZeRO-3: TRL gathers the shards for it). ``colocated``: it lives in each
    training process, so the trainer may drive its ``vllm.LLM`` directly (one device, no sleep mode:
    ``RolloutConfig.drives_colocated_engine``). ``remote``: a server process (TRL's ``server`` mode),
    each of whose calls gathers every process's prompts.
    """

    records_votes: bool = False
    decodes_each_request: bool = False
    syncs_weights: bool = True
    runs_sharded: bool = True
    colocated: bool = False
    remote: bool = False

    @property
    def trl_mode(self) -> str:
        """The ``mode`` of TRL's ``VLLMGeneration`` that runs this engine."""
        return "server" if self.remote else "colocate"


ROLLOUT_ENGINES: Registry[RolloutEngine] = Registry("generation")
ROLLOUT_ENGINES.register(
    "hf",
    RolloutEngine(records_votes=True, decodes_each_request=True, syncs_weights=False, runs_sharded=False),
)
ROLLOUT_ENGINES.register("vllm-colocate", RolloutEngine(colocated=True))
ROLLOUT_ENGINES.register("vllm-server", RolloutEngine(remote=True))


def engine_of(generation: str) -> RolloutEngine:
    """The registered engine ``rollout.generation`` names (a ``ValueError`` naming the registered ones)."""
    return ROLLOUT_ENGINES.of(generation)
