"""Every section of :class:`~trainers.config.SpyRLConfig`, each a frozen dataclass that checks itself.

``model`` (:class:`ModelConfig`), ``rollout`` (:class:`RolloutConfig`, holding its vLLM engine's block
``rollout.vllm``, :class:`VLLMConfig`), ``decoding`` (:class:`DecodingConfig`, the agents' decoding record
extended with sampling), ``update`` (:class:`UpdateConfig`), ``loss`` (:class:`LossConfig`),
``advantages`` (:class:`AdvantageConfig`), ``stages`` (:class:`StageConfig`) and ``run``
(:class:`RunConfig`); the game's sections are :class:`spy_env.GameConfig`'s. Each field is a
:func:`~trainers.validation.setting` (a default and its help) and each ``__post_init__`` checks types,
``Literal`` choices and ranges (:func:`~trainers.validation.check_section`), and a setting that names a
registered strategy against its registry (an engine, a grouping, a vote gradient, a loss aggregation, a
mini-batch unit). A performing reward is the one registered name checked by ``SpyRLConfig`` instead: its
functions take :class:`AdvantageConfig`, so its registry (:data:`trainers.samples.PERFORM_REWARDS`) sits
above this module.

The code that reads a section takes it as an argument (:func:`trainers.models.trainable_model` takes
``model``, :class:`trainers.update.Updater` ``update`` and ``loss``, ...); only the trainer's constructor and
the CLI hold the whole config.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from typing import ClassVar, Literal
from urllib.parse import urlsplit

from agents.decoding import DecodingOptions
from agents.registry import spec_problem
from agents.sampling import SamplingParams
from spy_env.stage import Stage
from trainers.choices import VOTE_GRADIENTS
from trainers.engines import ROLLOUT_ENGINES, RolloutEngine, engine_of
from trainers.groups import ADVANTAGE_GROUPINGS
from trainers.loss import AGGREGATIONS, Objective
from trainers.mini_batch_units import MINI_BATCH_UNITS, MiniBatchUnit
from trainers.validation import bad, check_choice, check_section, named_in_config, section, setting

__all__ = [
    "SEAT_SETTINGS",
    "SINKS",
    "AdvantageConfig",
    "DecodingConfig",
    "LossConfig",
    "ModelConfig",
    "RolloutConfig",
    "RunConfig",
    "StageConfig",
    "UpdateConfig",
    "VLLMConfig",
]

SEAT_SETTINGS = ("performer", "voter", "civilians")  # the rollout settings that may name a fixed agent
SINKS = ("jsonl", "console", "wandb", "trackio", "tensorboard")  # run.report_to's metric sinks


@dataclass(frozen=True)
class ModelConfig:
    """``SpyRLConfig.model``: the trained model, where it runs, and which of its weights train."""

    SECTION: ClassVar[str] = "model"

    name_or_path: str = setting(
        "Qwen/Qwen3-4B-Instruct-2507",
        "Policy model: hub id or folder ('tiny' builds a tiny random model, 'smollm2' the offline SmolLM2).",
    )
    dtype: Literal["auto", "fast", "float32", "bfloat16", "float16"] = setting(
        "auto",
        "Model dtype: auto (bf16 on GPU, fp32 on CPU), fast (bf16 also on CPUs with native bf16: AVX-512 BF16 "
        "or AMX), float32, bfloat16. Low-precision weights train through fp32 masters (trainers/precision.py).",
    )
    device: str = setting("auto", "auto, cpu or cuda (single process; multi-GPU via accelerate launch).")
    gradient_checkpointing: bool = setting(False, "Trade compute for memory in the backward pass.")
    lora_r: int = setting(0, "LoRA rank via peft; 0 trains all parameters.")
    lora_alpha: int = setting(32, "LoRA alpha.")
    lora_dropout: float = setting(0.05, "LoRA dropout.")
    lora_target_modules: str = setting("all-linear", "peft target_modules.")
    train_top_layers: int = setting(
        0, "Without LoRA: train only the last k decoder blocks (+ final norm), 0 = all; cheaper updates on CPU."
    )

    def __post_init__(self) -> None:
        check_section(self)
        # checked here, before any output is written, not by torch once the model is loaded
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", self.device):
            raise bad(self, "device", "auto, cpu, mps, cuda or cuda:N")
        for name in ("lora_r", "train_top_layers"):
            if getattr(self, name) < 0:
                raise bad(self, name, "an integer >= 0")


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
        for name in SEAT_SETTINGS:  # checked by their form alone: nothing is built here
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


@dataclass(frozen=True)
class UpdateConfig:
    """``SpyRLConfig.update``: the optimizer, and how an iteration's samples become optimizer steps."""

    SECTION: ClassVar[str] = "update"

    learning_rate: float = setting(1e-6, "AdamW learning rate.")
    weight_decay: float = setting(0.0, "AdamW weight decay.")
    warmup_iterations: int = setting(0, "Linear warm-up, in iterations.")
    max_grad_norm: float = setting(1.0, "Gradient clipping; 0 disables.")
    mini_batch_size: int = setting(
        128, "PPO mini-batch per optimizer step, in mini_batch_unit; see also updates_per_iteration."
    )
    mini_batch_unit: str = setting(
        "samples",
        "Unit of mini_batch_size: samples (training rows), or documents as verl counts ppo_mini_batch_size (in "
        "prompts, × rollout.n): each iteration makes ceil(documents_per_iteration / mini_batch_size) updates. "
        "A name in trainers.mini_batch_units.MINI_BATCH_UNITS.",
    )
    updates_per_iteration: int = setting(
        0,
        "If > 0: split each iteration's samples into this many equal mini-batches (optimizer steps per epoch), "
        "whatever their number, as verl's prompt-counted ppo_mini_batch_size does; 0: use mini_batch_size.",
    )
    micro_batch_size: int = setting(8, "Samples per forward/backward; gradients accumulate to the mini-batch.")
    epochs: int = setting(1, "Passes over each iteration's samples (μ).")

    def __post_init__(self) -> None:
        check_section(
            self,
            positive_ints=("mini_batch_size", "micro_batch_size", "epochs"),
            positive=("learning_rate",),
            non_negative=("weight_decay", "max_grad_norm"),
        )
        check_choice(self, "mini_batch_unit", MINI_BATCH_UNITS)  # a registry: read when checked
        if self.updates_per_iteration < 0:
            raise bad(self, "updates_per_iteration", "an integer >= 0")
        if self.warmup_iterations < 0:
            raise bad(self, "warmup_iterations", "an integer >= 0")
        if self.unit.counts_samples and self.mini_batch_size % self.micro_batch_size:
            raise bad(self, "mini_batch_size", f"a multiple of micro_batch_size ({self.micro_batch_size})")

    @property
    def unit(self) -> MiniBatchUnit:
        """The registered :class:`MiniBatchUnit` that ``mini_batch_unit`` names."""
        return MINI_BATCH_UNITS[self.mini_batch_unit]


@dataclass(frozen=True)
class LossConfig:
    """``SpyRLConfig.loss``: Eq. 7's clipped objective, its KL term and how it is aggregated."""

    SECTION: ClassVar[str] = "loss"

    loss_type: str = setting("grpo", "Loss aggregation, as in TRL: a name in trainers.loss.AGGREGATIONS.")
    epsilon: float = setting(0.2, "Clip ε (lower).")
    epsilon_high: float | None = setting(None, "Clip ε upper (None = epsilon).")
    beta: float = setting(0.001, "KL coefficient (k3 estimator against the frozen reference); 0 disables.")
    kl_estimator: Literal["k3", "low_var_kl"] = setting(
        "k3",
        "KL to the reference: k3 (TRL's, optionally ratio-weighted, unclamped) or low_var_kl (verl's: k3 "
        "clamped to ±10, never ratio-weighted).",
    )
    kl_bias_correction: bool = setting(True, "Weight the k3 KL by the importance ratio (TRL 1.16's default; k3 only).")
    perform_ratio_level: Literal["token", "sequence", "action"] = setting(
        "token", "Importance ratio for performances: token, sequence (mean) or action (sum)."
    )
    detect_ratio_level: Literal["token", "sequence", "action"] = setting(
        "action", "Importance ratio for votes: action = one sequence log-prob ratio per vote."
    )

    def __post_init__(self) -> None:
        check_section(self, positive=("epsilon",), non_negative=("beta",))
        if self.epsilon_high is not None and not self.epsilon_high > 0:
            raise bad(self, "epsilon_high", "None or a number > 0")
        check_choice(self, "loss_type", AGGREGATIONS)  # read when checked: a registered aggregation is a choice

    @property
    def epsilon_upper(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    def objective(
        self, level: str, max_completion_length: int | None = None, vote_gradient: str = "sampled"
    ) -> Objective:
        """What one call of :func:`clipped_policy_loss` needs: these settings at ``level``."""
        return Objective(
            level=level,
            loss_type=self.loss_type,
            epsilon_low=self.epsilon,
            epsilon_high=self.epsilon_upper,
            beta=self.beta,
            kl_estimator=self.kl_estimator,
            kl_bias_correction=self.kl_bias_correction,
            max_completion_length=max_completion_length,
            vote_gradient=vote_gradient,
        )


@dataclass(frozen=True)
class AdvantageConfig:
    """``SpyRLConfig.advantages``: how rewards become advantages (Eq. 5 for votes, RAE for performances)."""

    SECTION: ClassVar[str] = "advantages"

    detect_advantage_groups: str = setting(
        "game",
        "Normalise detection rewards within: game (its voters, Eq. 5), prompt (one seat's vote across the "
        "games_per_document games of a replay_setup group: same document, spy and masks) or batch (all of the "
        "iteration's votes, over every process: with few voters a game, e.g. 2 civilians of 3 players, Eq. 5 zeroes "
        "every game whose voters agree). A name in trainers.groups.ADVANTAGE_GROUPINGS.",
    )
    vote_gradient: str = setting(
        "sampled",
        "Gradient at a vote's choice token (constrained or think-then-vote, hf): sampled (the paper's: the "
        "sampled choice's clipped surrogate), expected (its exact expectation over the legal choices, whose "
        "rewards the env knows; not the paper's estimator) or supervised (-log q(spy): a labels-only reference). "
        "A name in trainers.choices.VOTE_GRADIENTS; see trainers/choices.py and docs/FIDELITY.md.",
    )
    spy_vote_in_group: bool = setting(
        False, "The spy's vote joins its game's Eq. 5 normalisation group (the paper: all n voters), trained or not."
    )
    penalty_advantage: Literal["own", "shared"] = setting(
        "own",
        "Format/rule penalties: own (added to the offender's advantage after normalisation/baselines, so they "
        "never move anyone else's) or shared (added to the reward before, the old form).",
    )
    advantage_eps: float = setting(1e-4, "ε of (r − mean) / (std + ε).")
    rae: bool = setting(True, "Role-conditioned EMA baselines for performing advantages (off = raw rewards).")
    rae_alpha: float = setting(0.9, "RAE EMA factor α.")
    rae_init: Literal["first_batch", "zero"] = setting(
        "first_batch",
        "RAE baselines before a role's first batch: first_batch (seeded with that batch's mean: no cold start) "
        "or zero (b_role = 0).",
    )
    perform_group_norm: bool = setting(
        False, "Also scale performing advantages by the std within replay_setup groups: A = (r − b_role)/(std_g + ε)."
    )
    perform_roles: Literal["all", "spy", "civilian"] = setting(
        "all",
        "Performances the performing stage trains: all (the paper's), spy or civilian (the other role's "
        "neither train nor move its RAE baseline).",
    )
    perform_reward: str = setting(
        "sampled",
        "Performing reward: sampled (the paper's: votes as cast) or expected (votes received = Σ of the voters' "
        "recorded choice probabilities: same mean, less variance; not the paper's). trainers/perform_rewards.py. "
        "A name in trainers.samples.PERFORM_REWARDS.",
    )

    def __post_init__(self) -> None:
        check_section(self, non_negative=("advantage_eps",), fractions=("rae_alpha",))
        if self.rae_alpha >= 1:
            raise bad(self, "rae_alpha", "in [0, 1)")
        check_choice(self, "detect_advantage_groups", ADVANTAGE_GROUPINGS)  # registries: read when checked
        check_choice(self, "vote_gradient", VOTE_GRADIENTS)


@dataclass(frozen=True)
class StageConfig:
    """``SpyRLConfig.stages``: which stage trains when (the :class:`StageController`'s settings)."""

    SECTION: ClassVar[str] = "stages"

    stage_schedule: Literal["adaptive", "alternate", "detect", "perform"] = setting(
        "adaptive", "Stage switching: adaptive (the paper's thresholds), alternate (every k_min), detect or perform."
    )
    start_stage: Literal["detect", "perform"] = setting("detect", "First stage: detect or perform.")
    acc_high: float = setting(0.9, "detect → perform when EMA acc ≥ this ...")
    na_low: float = setting(0.1, "... and EMA N/A rate ≤ this.")
    err_high: float = setting(0.4, "perform → detect when 1 − EMA acc ≥ this ...")
    na_high: float = setting(0.5, "... or EMA N/A rate ≥ this.")
    k_min: int = setting(5, "Minimum iterations per stage (K_min).")
    k_perform: int | None = setting(
        None,
        "K_min of the performing stage alone (None: k_min): under alternate the stages run k_min detection "
        "and k_perform performing iterations in turn.",
    )
    stage_ema: float = setting(0.9, "EMA factor of acc and N/A for the controller.")

    def __post_init__(self) -> None:
        check_section(
            self, positive_ints=("k_min",), fractions=("stage_ema", "acc_high", "na_low", "err_high", "na_high")
        )
        if self.k_perform is not None and self.k_perform < 1:
            raise bad(self, "k_perform", "None or an integer >= 1")


@dataclass(frozen=True)
class RunConfig:
    """``SpyRLConfig.run``: how long a run lasts, its seed, and what it writes and reports."""

    SECTION: ClassVar[str] = "run"

    output_dir: str = setting("runs/spyrl", "Where checkpoints, buffers, metrics and plots go.")
    iterations: int = setting(100, "Training iterations (one stage each).")
    seed: int = setting(0, "Seed of everything (rollouts, sampling, shuffling).")
    checkpoint_every: int = setting(10, "Checkpoint every k iterations (and at the end).")
    keep_buffers: bool = setting(True, "Save each iteration's episode buffer (parquet).")
    heldout_fraction: float = setting(
        0.2, "Share of documents (by id hash) held out of training for evaluation; 0 trains on all."
    )
    eval_games: int = setting(0, "Held-out games for detection accuracy each eval_every iterations (0: off).")
    eval_every: int = setting(10, "Iterations between held-out evaluations.")
    report_to: list = setting(["jsonl"], f"Metric sinks: {', '.join(SINKS)}.")  # noqa: RUF009
    progress: bool = setting(True, "Rich progress display.")

    def __post_init__(self) -> None:
        check_section(self, positive_ints=("iterations", "checkpoint_every", "eval_every"))
        if not 0 <= self.seed < 2**32:
            raise bad(self, "seed", "an integer in [0, 2**32)")
        if not 0 <= self.heldout_fraction < 1:
            raise bad(self, "heldout_fraction", "a number in [0, 1)")
        if self.eval_games < 0:
            raise bad(self, "eval_games", "an integer >= 0")
        if not all(isinstance(sink, str) for sink in self.report_to) or not set(self.report_to) <= set(SINKS):
            raise bad(self, "report_to", f"a list drawn from {sorted(SINKS)}")
