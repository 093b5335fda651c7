"""Who plays the rollouts: the learner (the trained model itself, or a vLLM engine kept in step with
it) in every seat, or in one stage's seats with a fixed agent in the other's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.decoding import DecodingOptions
from agents.hf import HFPolicy
from agents.sampling import SamplingParams
from spy_env.policy import Action, Observation, Policy, RolloutPolicy
from spy_env.stage import Stage
from trainers.config import SpyRLConfig

__all__ = ["StagePolicy", "decoding_options", "learner_policy", "seat_policy"]


def decoding_options(config: SpyRLConfig) -> DecodingOptions:
    """The options that shape the learner's replies while decoding, as one record."""
    return DecodingOptions(
        vote_mode=config.vote_mode,
        think_tokens=config.think_tokens,
        abstain=config.abstain,
        answer=config.answer,
        answer_tokens=config.answer_tokens,
    )


def learner_policy(config: SpyRLConfig, model: Any, tokenizer: Any, *, greedy: bool = False) -> RolloutPolicy:
    """The trained ``model`` as an ``hf`` policy: sampling as the config says, or greedy (evaluation);
    with ``forward_votes``, its constrained votes take one forward pass (:mod:`trainers.votes`)."""
    if greedy:
        sampling = SamplingParams(temperature=0.0, max_new_tokens=config.max_completion_tokens)
    else:
        sampling = SamplingParams(
            temperature=config.temperature, top_p=config.top_p, max_new_tokens=config.max_completion_tokens
        )
    policy = HFPolicy(
        model,
        tokenizer,
        sampling=sampling,
        name="policy",
        batch_size=config.generation_batch_size,
        decoding=decoding_options(config),
        share_prefix=config.share_prefix,
    )
    if config.forward_votes:
        from trainers.votes import ForwardVotes

        return ForwardVotes(policy)
    return policy


class StagePolicy:
    """The learner in one stage's seats and a fixed agent (e.g. scripted performers) in the other's.

    A :class:`~spy_env.policy.RolloutPolicy`: restarting and syncing reach the learner alone (a fixed
    agent neither trains nor follows the trainer's weights).
    """

    def __init__(self, learner: RolloutPolicy, *, performer: Policy | None = None, voter: Policy | None = None) -> None:
        self.learner = learner
        self.performer = learner if performer is None else performer
        self.voter = learner if voter is None else voter
        self.name = "policy"

    def act(self, observations: Sequence[Observation]) -> list[Action | str]:
        out: list[Any] = [None] * len(observations)
        perform = [i for i, o in enumerate(observations) if Stage.of(o["stage"]) is Stage.PERFORM]
        vote = [i for i, o in enumerate(observations) if Stage.of(o["stage"]) is not Stage.PERFORM]
        for indices, policy in ((perform, self.performer), (vote, self.voter)):
            if indices:
                for i, action in zip(indices, policy.act([observations[i] for i in indices]), strict=True):
                    out[i] = action
        return out

    def restart_sampling(self, seed: int | None) -> None:
        self.learner.restart_sampling(seed)

    def sync(self) -> None:
        self.learner.sync()


def seat_policy(config: SpyRLConfig, learner: RolloutPolicy) -> RolloutPolicy:
    """The learner in every seat, except for a stage the config gives to a fixed agent (``performer``/``voter``)."""
    if config.performer == "self" and config.voter == "self":
        return learner
    from agents import load

    performer = None if config.performer == "self" else load(config.performer, seed=config.seed)
    voter = None if config.voter == "self" else load(config.voter, seed=config.seed)
    return StagePolicy(learner, performer=performer, voter=voter)
