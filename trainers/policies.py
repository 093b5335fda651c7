"""Who plays the rollouts: the learner (the trained model itself, or a vLLM engine kept in step with
it) in every seat, or in one stage's seats with a fixed agent in the other's (built once for the run:
:func:`fixed_agents`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from agents.hf import HFPolicy
from agents.registry import backend_of
from spy_env.policy import Action, Observation, Policy, RolloutPolicy
from spy_env.stage import Stage
from trainers.sections import SEAT_SETTINGS, DecodingConfig, RolloutConfig

__all__ = [
    "FixedAgents",
    "StagePolicy",
    "fixed_agents",
    "learner_policy",
    "seat_policy",
    "spy_seat_policy",
]


def learner_policy(
    decoding: DecodingConfig, rollout: RolloutConfig, model: Any, tokenizer: Any, *, greedy: bool = False
) -> RolloutPolicy:
    """The trained ``model`` as an ``hf`` policy: sampling as ``decoding`` says, or greedy (evaluation);
    with ``rollout.forward_votes``, its constrained votes take one forward pass (:mod:`trainers.votes`)."""
    sampling, options = decoding.sampling(greedy=greedy), decoding.options()
    performing = None if greedy else decoding.perform_sampling()
    policy = HFPolicy(
        model,
        tokenizer,
        sampling=sampling,
        name="policy",
        batch_size=rollout.generation_batch_size,
        decoding=options,
        share_prefix=rollout.share_prefix,
    )
    policy.perform_sampling = performing
    if rollout.forward_votes:
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


@dataclass(frozen=True)
class FixedAgents:
    """The fixed agents a run's ``rollout`` names (None where the learner plays), built once: they neither
    train nor follow the trainer's weights."""

    performer: Policy | None = None
    voter: Policy | None = None
    civilians: Policy | None = None

    def restart_sampling(self, seed: int) -> None:
        """Seed the sampling of every fixed agent that samples (an LLM), as the learner is each iteration."""
        for agent in {id(a): a for a in (self.performer, self.voter, self.civilians) if a is not None}.values():
            if hasattr(agent, "restart_sampling"):
                agent.restart_sampling(seed)

    def fresh(self, config: RolloutConfig, seed: int) -> FixedAgents:
        """These agents as a fresh run seeded by ``seed`` has them (an evaluation's players must not depend on
        the games before it): scripted ones built again, LLMs kept (loaded once) and their sampling reseeded."""
        self.restart_sampling(seed)
        kept = {n: getattr(self, n) for n in SEAT_SETTINGS if hasattr(getattr(self, n), "restart_sampling")}
        scripted = fixed_agents(replace(config, **dict.fromkeys(kept, "self")), seed)
        return FixedAgents(**{n: kept.get(n, getattr(scripted, n)) for n in SEAT_SETTINGS})


def fixed_agent(spec: str, seed: int, decoding: DecodingConfig | None = None, **placement: Any) -> Policy:
    """``agents.load(spec)`` for a fixed seat. With ``decoding`` an LLM samples as the run's learner does
    (temperatures, ``perform_temperature``, top-p and budget; a local model also its vote and answer modes,
    loaded with ``placement``: the trainer gives ``device`` and ``dtype``, and its batch size and prefix
    sharing stay the backend's); without, at its backend's defaults."""
    from agents import load

    backend = backend_of(spec)
    if decoding is None or backend is None or not backend.llm:
        return load(spec, seed=seed)
    if not backend.decoding:
        return load(spec, seed=seed, sampling=decoding.sampling())
    agent = load(spec, seed=seed, sampling=decoding.sampling(), decoding=decoding.options(), **placement)
    performing = decoding.perform_sampling()
    agent.perform_sampling = None if performing is None else replace(performing, seed=agent.sampling.seed)
    return agent


def fixed_agents(
    config: RolloutConfig, seed: int, decoding: DecodingConfig | None = None, **placement: Any
) -> FixedAgents:
    """The fixed agents ``config`` names, each built once by :func:`fixed_agent` (a spec named twice: one
    agent)."""
    built: dict[str, Policy] = {}
    for name in SEAT_SETTINGS:
        spec = getattr(config, name)
        if spec != "self" and spec not in built:
            built[spec] = fixed_agent(spec, seed, decoding, **placement)
    return FixedAgents(**{n: built.get(getattr(config, n)) for n in SEAT_SETTINGS})


def seat_policy(
    config: RolloutConfig, seed: int, learner: RolloutPolicy, fixed: FixedAgents | None = None
) -> RolloutPolicy:
    """The learner in every seat, except for a stage ``config`` gives to a fixed agent (``performer``/``voter``);
    with fixed ``civilians``, that agent (the learner then plays the spy's seat alone: :func:`spy_seat_policy`).
    ``fixed``: the run's agents, built once (default: :func:`fixed_agents` at the backends' defaults, seeded
    with ``seed``)."""
    if config.civilians == config.performer == config.voter == "self":
        return learner
    fixed = fixed or fixed_agents(config, seed)
    if fixed.civilians is not None:
        return fixed.civilians
    return StagePolicy(learner, performer=fixed.performer, voter=fixed.voter)


def spy_seat_policy(config: RolloutConfig, learner: RolloutPolicy) -> RolloutPolicy | None:
    """The learner when it plays every game's spy seat in a scene of fixed ``civilians`` (the runner's
    ``spy``), else None."""
    return None if config.civilians == "self" else learner
