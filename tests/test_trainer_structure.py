"""The trainer's contracts with the rest of the project: rollout policies, stages, seeds, validation."""

from __future__ import annotations

import numpy as np
import pytest

from spy_env.policy import RolloutPolicy
from spy_env.stage import Stage
from trainers.algorithm import StageController
from trainers.config import SpyRLConfig
from trainers.seeds import SeedStream, seed_for


class Learner:
    name = "learner"

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.restarts: list[int | None] = []
        self.syncs = 0

    def act(self, observations):
        self.seen += [o["seat"] for o in observations]
        return [f"learner {o['seat']}" for o in observations]

    def restart_sampling(self, seed):
        self.restarts.append(seed)

    def sync(self):
        self.syncs += 1


class Fixed:
    name = "fixed"

    def act(self, observations):
        return ["fixed"] * len(observations)


def test_stage_policy_routes_by_stage_and_restarts_and_syncs_only_the_learner():
    pytest.importorskip("torch")  # trainers.policies imports the hf backend
    from trainers.policies import StagePolicy, seat_policy
    from trainers.sections import RolloutConfig

    learner = Learner()
    assert isinstance(learner, RolloutPolicy)
    policy = StagePolicy(learner, performer=Fixed())
    observations = [{"seat": seat, "stage": stage.index} for seat, stage in enumerate([Stage.VOTE, Stage.PERFORM] * 2)]
    assert policy.act(observations) == ["learner 0", "fixed", "learner 2", "fixed"]
    assert learner.seen == [0, 2]
    policy.restart_sampling(7)
    policy.sync()
    assert learner.restarts == [7] and learner.syncs == 1
    assert isinstance(policy, RolloutPolicy)
    assert seat_policy(RolloutConfig(), 0, learner) is learner
    assert isinstance(
        seat_policy(RolloutConfig(voter="heuristic"), 0, learner),
        StagePolicy,
    )


def test_fixed_agents_are_built_once_and_scripted_ones_fresh_for_each_evaluation():
    """A spec named twice is one agent; ``fresh`` rebuilds scripted agents from the seed (an evaluation's
    players do not depend on the games before it) and keeps and reseeds the ones that sample."""
    pytest.importorskip("torch")
    from trainers.policies import FixedAgents, StagePolicy, fixed_agents, seat_policy
    from trainers.sections import RolloutConfig

    config = RolloutConfig(performer="heuristic", voter="heuristic")
    fixed = fixed_agents(config, seed=3)
    assert fixed.performer is fixed.voter and fixed.civilians is None
    assert not config.learner_plays("perform") and not config.learner_plays(Stage.VOTE)
    assert RolloutConfig(performer="heuristic").learner_plays("vote")
    assert not RolloutConfig(performer="heuristic").learner_plays("perform")
    first = [fixed.performer.rng.random() for _ in range(3)]
    again = fixed.fresh(config, seed=3)
    assert again.performer is not fixed.performer and [again.performer.rng.random() for _ in range(3)] == first
    learner = Learner()
    kept = FixedAgents(performer=learner)  # an agent that samples: kept, its sampling restarted
    assert kept.fresh(RolloutConfig(performer="random"), seed=5).performer is learner and learner.restarts == [5]
    policy = seat_policy(config, 0, Learner(), fixed)
    assert isinstance(policy, StagePolicy) and policy.performer is fixed.performer and policy.voter is fixed.voter
    civilians = fixed_agents(RolloutConfig(civilians="heuristic"), seed=0)
    assert seat_policy(RolloutConfig(civilians="heuristic"), 0, Learner(), civilians) is civilians.civilians


def test_seed_streams_keep_their_numbers():
    """The named streams draw exactly what ``(seed, iteration, 0/1/2/3[, rank])`` drew before they had names
    (FIXED, added later, is 4)."""
    for stream, number in (
        (SeedStream.GAMES, 0),
        (SeedStream.SAMPLING, 1),
        (SeedStream.SHUFFLE, 2),
        (SeedStream.EPOCH, 3),
        (SeedStream.FIXED, 4),
    ):
        for rank in (0, 2):
            entropy = [5, 4, number] + ([rank] if rank else [])
            assert seed_for(5, 4, stream, rank) == int(np.random.SeedSequence(entropy).generate_state(1)[0])


def test_the_controller_parses_schedule_names_once_and_holds_stages():
    config = SpyRLConfig.from_dict(dict(stage_schedule="alternate", start_stage="perform", k_min=1, stage_ema=0.5))
    controller = StageController.from_config(config.stages)
    assert (controller.schedule, controller.k_min, controller.ema) == ("alternate", 1, 0.5)
    assert controller.start is Stage.PERFORM
    assert controller.training_stage is Stage.PERFORM
    assert controller.update(0.5, 0.0) is Stage.VOTE and controller.training_stage is Stage.VOTE
    assert controller.state_dict()["stage"] == "detect"  # checkpoints keep the schedule name (JSON)
    restored = StageController()
    restored.load_state_dict(controller.state_dict())
    assert restored.stage is Stage.VOTE and restored.start is Stage.PERFORM


def test_validating_a_config_builds_no_agent(monkeypatch):
    import agents

    def refuse(*args, **kwargs):
        raise AssertionError("validation must not build agents")

    monkeypatch.setattr(agents, "load", refuse)
    SpyRLConfig.from_dict(dict(performer="hf:Qwen/Qwen3-4B-Instruct-2507", voter="openai:gpt@http://localhost:1/v1"))
    for spec, needle in (
        ("gpt", "unknown agent spec"),
        ("random:x", "integer seed"),
        ("hf:./no/such/dir", "does not exist"),
    ):
        with pytest.raises(
            ValueError, match=rf"SpyRLConfig\.rollout\.performer must be 'self' or an agent spec \(.*{needle}"
        ):
            SpyRLConfig.from_dict(dict(performer=spec))


def test_perform_temperature_is_checked_by_name_and_sets_only_the_performing_stage():
    config = SpyRLConfig.from_dict(dict(perform_temperature=0.5))
    assert config.decoding.temperature_of(Stage.PERFORM) == 0.5
    assert config.decoding.temperature_of("vote") == config.decoding.temperature == 1.0
    assert config.decoding.perform_sampling().temperature == 0.5
    assert SpyRLConfig.from_dict({}).decoding.perform_sampling() is None
    assert SpyRLConfig.from_dict({}).decoding.temperature_of(Stage.PERFORM) == 1.0
    for value in (0, -0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"SpyRLConfig\.decoding\.perform_temperature must be None or a finite"):
            SpyRLConfig.from_dict(dict(perform_temperature=value))
    with pytest.raises(ValueError, match=r"SpyRLConfig\.decoding\.perform_temperature must be a number or None"):
        SpyRLConfig.from_dict(dict(perform_temperature="warm"))
    with pytest.raises(  # one temperature a call through TRL's generate
        ValueError,
        match=r"perform_temperature must be None with rollout\.generation='vllm-server' unless vllm-colocate",
    ):
        SpyRLConfig.from_dict(dict(perform_temperature=0.5, generation="vllm-server"))
    # a colocated engine driven directly samples the performances at their own temperature
    assert SpyRLConfig.from_dict(dict(perform_temperature=0.5, generation="vllm-colocate")).decoding.perform_temperature
