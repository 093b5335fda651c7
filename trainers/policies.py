"""Who plays the rollouts: the learner (the trained model itself, or a vLLM engine kept in step with
it) in every seat, or in one stage's seats with a fixed agent in the other's (built once for the run:
:func:`fixed_agents`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from agents.decoding import DecodingOptions
from agents.hf import HFPolicy
from agents.registry import backend_of, spec_problem
from agents.sampling import SamplingParams
from spy_env.policy import Action, Observation, Policy, RolloutPolicy
from spy_env.stage import Stage
from trainers.engines import ROLLOUT_ENGINES, RolloutEngine, engine_of
from trainers.validation import bad, check_choice, check_section, named_in_config, section, setting

__all__ = [
    "DecodingConfig",
    "FixedAgents",
    "RolloutConfig",
    "StagePolicy",
    "VLLMConfig",
    "fixed_agents",
    "learner_policy",
    "seat_policy",
    "spy_seat_policy",
]

_SEATS = ("performer", "voter", "civilians")  # the rollout settings that may name a fixed agent


@dataclass(frozen=True)
class VLLMConfig:
    """``SpyRLConfig.rollout.vllm``: the vLLM engine of ``generation=vllm-colocate`` or ``vllm-server``
    (:mod:`trainers.vllm_engine`). Each field's flat name is ``vllm_<field>`` (``--set vllm_server_url=...``)."""

    SECTION: ClassVar[str] = "rollout.vllm"

    # both engines
    max_model_length: int | None = setting(
        None,
        "Context window of the vLLM engine (None: max_prompt_tokens + decoding.max_completion_tokens); longer "
        "prompts forfeit.",
    )
    # server only (generation=vllm-server)
    server_url: str = setting("http://127.0.0.1:8000", "trl vllm-serve / vllm serve base URL.")
    server_timeout: float = setting(240.0, "Seconds to wait for the vLLM server to come up.")
    group_port: int = setting(51216, "Port of the NCCL weight-update group with the server.")
    # colocate only (generation=vllm-colocate)
    gpu_memory_utilization: float = setting(0.3, "GPU memory fraction a colocated engine may take; the rest trains.")
    tensor_parallel_size: int = setting(1, "Tensor-parallel size of each colocated engine; divides the world size.")
    kv_cache_gib: float | None = setting(
        None,
        "KV cache of a colocated engine on a CPU, in GiB (None: 1, or $VLLM_CPU_KVCACHE_SPACE); on a GPU None "
        "leaves it to gpu_memory_utilization.",
    )
    enable_sleep_mode: bool = setting(
        False, "Put the colocated engine to sleep (weights and KV cache freed) outside rollouts."
    )

    def __post_init__(self) -> None:
        check_section(self, positive_ints=("tensor_parallel_size",), positive=("server_timeout",))
        if not 0 < self.gpu_memory_utilization <= 1:
            raise bad(self, "gpu_memory_utilization", "in (0, 1]")
        if not 0 < self.group_port < 65536:
            raise bad(self, "group_port", "a port number in [1, 65535]")
        if self.max_model_length is not None and self.max_model_length < 2:
            raise bad(self, "max_model_length", "None or an integer >= 2")
        if self.kv_cache_gib is not None and not self.kv_cache_gib > 0:
            raise bad(self, "kv_cache_gib", "None or a positive number of GiB")
        try:
            url = urlsplit(self.server_url)
            url.port  # noqa: B018 - parses the port, raising ValueError when it is not a number
        except ValueError as e:
            raise bad(self, "server_url", f"an http(s):// URL ({e})") from e
        if url.scheme not in ("http", "https") or not url.hostname:
            raise bad(self, "server_url", "an http(s):// URL with a host")


@dataclass(frozen=True)
class RolloutConfig:
    """``SpyRLConfig.rollout``: the games of an iteration, who plays them and on which engine."""

    SECTION: ClassVar[str] = "rollout"

    documents_per_iteration: int = setting(
        128, "Documents per iteration, all processes together (the global batch; paper: 128): each plays its share."
    )
    games_per_document: int = setting(8, "Games sharing a document: the GRPO group (paper: 8).")
    replay_setup: bool = setting(True, "Games of a group also share spy seat and masks (exchangeable groups).")
    spy_seats: Literal["random", "balanced"] = setting(
        "random",
        "Spy seats of an iteration's games (groups): random (each drawn alone) or balanced (shuffled rounds of "
        "every seat: each round of n_players groups, counted from the first, holds each seat once: no seat is the right vote more often "
        "than another within a batch of n_players groups; per process). The documents and masks stay the same.",
    )
    document_order: Literal["random", "epoch"] = setting(
        "random",
        "Documents of an iteration: random (a fresh draw from the training documents each iteration) or "
        "epoch (seeded epochs, as a shuffled data loader: each document once before any repeats).",
    )
    performer: str = setting(
        "self",
        "Who performs: self (self-play), or an agent spec (e.g. heuristic, or hf:PATH for a frozen model): trains "
        "the detector alone. A fixed LLM is loaded once and samples as decoding says; its replies never train.",
    )
    voter: str = setting(
        "self", "Who votes: self, or an agent spec (e.g. heuristic, hf:PATH): trains the performer alone."
    )
    civilians: str = setting(
        "self",
        "Who holds the civilians' seats: self (every seat is the learner's), or an agent spec (e.g. heuristic) that "
        "performs and votes in them while the learner holds the spy's seat alone (the spy-v1 leaderboard's scene "
        "on training documents; only the spy's performances train: stage_schedule perform).",
    )
    generation: str = setting(
        "hf",
        "Rollout engine: hf (the policy itself, CPU or GPU); vllm-colocate (a vLLM engine in each training "
        "process) or vllm-server (trl vllm-serve + VLLMClient), both through TRL's VLLMGeneration with weight sync. "
        "A name in trainers.engines.ROLLOUT_ENGINES.",
    )
    vllm: VLLMConfig = section(  # noqa: RUF009
        VLLMConfig,
        "The vLLM engine of vllm-colocate and vllm-server rollouts (flat names: vllm_<field>, e.g. vllm_server_url).",
        prefix="vllm_",
    )
    max_prompt_tokens: int = setting(12288, "Longer prompts are skipped for training and counted.")
    generation_batch_size: int = setting(64, "hf backend generation batch size.")
    share_prefix: bool = setting(
        True,
        "hf backend: encode the prompts' shared prefixes once (a game's civilians share the copy and the "
        "performances) and decode into a reserved cache; False prefills every prompt in full.",
    )
    forward_votes: bool = setting(
        False,
        "Constrained votes in one forward pass each (no generate loop for the forced tags); with one on-policy "
        "update an iteration the rollout's forward also feeds the update (trainers/votes.py).",
    )

    def __post_init__(self) -> None:
        check_section(
            self,
            positive_ints=(
                "documents_per_iteration",
                "games_per_document",
                "max_prompt_tokens",
                "generation_batch_size",
            ),
        )
        check_choice(self, "generation", ROLLOUT_ENGINES)  # a registry: read when checked
        if not isinstance(self.vllm, VLLMConfig):
            raise bad(self, "vllm", "a VLLMConfig (SpyRLConfig.from_dict builds it from a mapping)")
        for name in _SEATS:  # checked by their form alone: nothing is built here
            spec = getattr(self, name)
            problem = None if spec == "self" else spec_problem(spec)
            if problem is not None:
                raise bad(self, name, f"'self' or an agent spec ({problem})")

    @property
    def engine(self) -> RolloutEngine:
        """The registered rollout engine ``generation`` names (:mod:`trainers.engines`)."""
        return engine_of(self.generation)

    @property
    def drives_colocated_engine(self) -> bool:
        """Whether vLLM rollouts drive the colocated ``vllm.LLM`` directly
        (:class:`trainers.vllm_engine.ColocatedVLLMPolicy`: every decoding program, per-stage temperatures)
        rather than through TRL's ``generate`` (one pattern and temperature per call, as a server or a
        tensor-parallel group needs; it also wakes a sleeping engine)."""
        return self.engine.colocated and self.vllm.tensor_parallel_size == 1 and not self.vllm.enable_sleep_mode

    @property
    def decodes_each_request(self) -> bool:
        """Whether the rollouts honour every decoding program (a forced boxed ending) and a temperature per
        stage: an engine that always does (``hf``), or a colocated engine the trainer drives directly."""
        return self.engine.decodes_each_request or self.drives_colocated_engine

    def learner_plays(self, stage: Stage | str) -> bool:
        """Whether the learner's own replies fill ``stage``'s seats (not a fixed ``performer``/``voter``):
        only those rows may train, whatever the stage schedule (a fixed LLM's tokens are not the learner's)."""
        return (self.performer if Stage.of(stage) is Stage.PERFORM else self.voter) == "self"


@dataclass(frozen=True)
class DecodingConfig(DecodingOptions):
    """``SpyRLConfig.decoding``: how the learner's replies are sampled and shaped.

    The shaping is the agents' one record, :class:`~agents.decoding.DecodingOptions` (``vote_mode``,
    ``think_tokens``, ``abstain``, ``answer``, ``answer_tokens``: its fields, helps and checks), which
    this section extends with how replies are sampled; :meth:`options` gives the record alone."""

    SECTION: ClassVar[str] = "decoding"

    temperature: float = setting(1.0, "Sampling temperature of rollouts (logps are computed at this temperature).")
    perform_temperature: float | None = setting(
        None,
        "Sampling temperature of performances (None: temperature); votes keep temperature, and each stage's "
        "logps are computed at its own (hf rollouts).",
    )
    top_p: float = setting(1.0, "Nucleus sampling of rollouts.")
    max_completion_tokens: int = setting(4096, "Completion budget (max new tokens).")

    def __post_init__(self) -> None:
        check_section(self, positive_ints=("max_completion_tokens",), positive=("temperature",), fractions=("top_p",))
        with named_in_config(self):
            super().__post_init__()  # the decoding options' own checks: their names and budgets
        value = self.perform_temperature
        if value is not None and (isinstance(value, bool) or not math.isfinite(value) or value <= 0):
            raise bad(self, "perform_temperature", "None or a finite number > 0")

    def temperature_of(self, stage: Stage | str) -> float:
        """The temperature ``stage``'s replies are sampled at, and their log-probs computed at."""
        if Stage.of(stage) is Stage.PERFORM and self.perform_temperature is not None:
            return self.perform_temperature
        return self.temperature

    def options(self) -> DecodingOptions:
        """The options that shape the learner's replies while decoding, as the agents' record alone (the
        fields this section takes from it)."""
        return DecodingOptions(**{f.name: getattr(self, f.name) for f in fields(DecodingOptions)})

    def sampling(self, *, greedy: bool = False) -> SamplingParams:
        """How the learner samples (``greedy``: evaluation's greedy decoding within the same budget)."""
        if greedy:
            return SamplingParams(temperature=0.0, max_new_tokens=self.max_completion_tokens)
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_completion_tokens)

    def perform_sampling(self) -> SamplingParams | None:
        """How performances are sampled when ``perform_temperature`` sets them apart from the votes (else None)."""
        if self.perform_temperature is None:
            return None
        return replace(self.sampling(), temperature=self.perform_temperature)


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
        kept = {n: getattr(self, n) for n in _SEATS if hasattr(getattr(self, n), "restart_sampling")}
        scripted = fixed_agents(replace(config, **dict.fromkeys(kept, "self")), seed)
        return FixedAgents(**{n: kept.get(n, getattr(scripted, n)) for n in _SEATS})


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
    for name in _SEATS:
        spec = getattr(config, name)
        if spec != "self" and spec not in built:
            built[spec] = fixed_agent(spec, seed, decoding, **placement)
    return FixedAgents(**{n: built.get(getattr(config, n)) for n in _SEATS})


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
