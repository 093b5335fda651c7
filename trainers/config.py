"""``SpyRLConfig``: every knob of SpyRL's GRPO trainer, with the paper's recipe as defaults.

Presets (``SpyRLConfig.preset(name, **overrides)``, values in :mod:`trainers.presets`):

- ``qwen3-4b-paper``: the reported recipe (GPU) read through verl (docs/FIDELITY.md):
  Qwen3-4B-Instruct-2507, lr 1e-6, 128 documents × 8 games per iteration, mini-batch 128
  *documents* (one on-policy update per iteration), token-mean loss (``dapo``), ε 0.2, β 0.001
  with verl's ``low_var_kl``, the spy's vote trained and in the Eq. 5 group (self-votes legal),
  RAE seeded by its first batch, Nemotron-CC-Math-v1 ``4plus`` (streamed, ``HF_TOKEN``) with 20%
  held out, silent span removal, 100 iterations, prompts up to 12288 and responses up to 4096
  tokens, 5 players, 1 round, bf16, gradient checkpointing, colocated vLLM rollouts
  (``generation=vllm-server`` for a separate ``trl vllm-serve``).
- ``smollm2-cpu``: SmolLM2-135M-Instruct on CPU, tiny batches, one iteration of each stage.
- ``smollm2-selfplay``: SmolLM2 learning to detect the spy on CPU (docs/experiment/TUNING.md): an eased
  3-player game, constrained votes, ``vote_gradient=expected`` (not the paper's estimator), ``batch``
  advantage groups, detection only.
- ``cpu-smoke``: a tiny random model built on the fly; minutes on CPU.

Values can also come from a YAML file (``SpyRLConfig.from_yaml``) and ``key=value`` overrides
(``spyrl train --set lr=1e-5``). Bad values raise ``ValueError`` naming the field.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from spy_env.config import coerce_floats
from trainers.presets import PRESETS
from trainers.validation import KL_ESTIMATORS, LOSS_TYPES, SCHEDULES, validate

__all__ = ["CHARS_PER_TOKEN", "SpyRLConfig"]

CHARS_PER_TOKEN = 8  # above the characters of almost any BPE token of text (~4 on average)
CHAR_LIMITS = {"max_vote_chars": 4_000, "max_performance_chars": 8_000}  # GameConfig's defaults


def _f(default: Any, help: str, **kw: Any) -> Any:
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


@dataclass
class SpyRLConfig:
    """Configuration of :class:`trainers.SpyRLTrainer` (docs/TRAINING.md)."""

    # ---------------------------------------------------------------- model
    model: str = _f(
        "Qwen/Qwen3-4B-Instruct-2507",
        "Policy model: hub id or folder ('tiny' builds a tiny random model).",
    )
    output_dir: str = _f("runs/spyrl", "Where checkpoints, buffers, metrics and plots go.")
    dtype: str = _f(
        "auto",
        "Model dtype: auto (bf16 on GPU, fp32 on CPU), fast (bf16 also on CPUs with native bf16: AVX-512 BF16 "
        "or AMX), float32, bfloat16. Low-precision weights train through fp32 masters (trainers/precision.py).",
    )
    device: str = _f("auto", "auto, cpu or cuda (single process; multi-GPU via accelerate launch).")
    gradient_checkpointing: bool = _f(False, "Trade compute for memory in the backward pass.")
    lora_r: int = _f(0, "LoRA rank via peft; 0 trains all parameters.")
    lora_alpha: int = _f(32, "LoRA alpha.")
    lora_dropout: float = _f(0.05, "LoRA dropout.")
    lora_target_modules: str = _f("all-linear", "peft target_modules.")
    train_top_layers: int = _f(
        0, "Without LoRA: train only the last k decoder blocks (+ final norm), 0 = all; cheaper updates on CPU."
    )
    # ----------------------------------------------------------------- game
    game: dict = _f({}, "GameConfig overrides (n_players, rounds, degrade, corpus, prompts, ...).")  # noqa: RUF009
    documents_per_iteration: int = _f(
        128, "Documents per iteration, all processes together (the global batch; paper: 128): each plays its share."
    )
    games_per_document: int = _f(8, "Games sharing a document: the GRPO group (paper: 8).")
    replay_setup: bool = _f(True, "Games of a group also share spy seat and masks (exchangeable groups).")
    document_order: str = _f(
        "random",
        "Documents of an iteration: random (a fresh draw from the training documents each iteration) or "
        "epoch (seeded epochs, as a shuffled data loader: each document once before any repeats).",
    )
    # ------------------------------------------------------------ rollouts
    generation: str = _f(
        "hf",
        "Rollout engine: hf (the policy itself, CPU or GPU); vllm-colocate (a vLLM engine in each training "
        "process) or vllm-server (trl vllm-serve + VLLMClient), both through TRL's VLLMGeneration with weight sync.",
    )
    vllm_server_url: str = _f("http://127.0.0.1:8000", "trl vllm-serve / vllm serve base URL (vllm-server).")
    vllm_server_timeout: float = _f(240.0, "Seconds to wait for the vLLM server to come up (vllm-server).")
    vllm_group_port: int = _f(51216, "Port of the NCCL weight-update group with the server (vllm-server).")
    vllm_gpu_memory_utilization: float = _f(
        0.3, "GPU memory fraction a colocated vLLM engine may take; the rest trains (vllm-colocate)."
    )
    vllm_tensor_parallel_size: int = _f(1, "Tensor-parallel size of each colocated engine; divides the world size.")
    vllm_max_model_length: int | None = _f(
        None,
        "Context window of the vLLM engine (None: max_prompt_tokens + max_completion_tokens); longer prompts forfeit.",
    )
    vllm_enable_sleep_mode: bool = _f(
        False, "Put the colocated engine to sleep (weights and KV cache freed) outside rollouts (vllm-colocate)."
    )
    temperature: float = _f(1.0, "Sampling temperature of rollouts (logps are computed at this temperature).")
    top_p: float = _f(1.0, "Nucleus sampling of rollouts.")
    max_prompt_tokens: int = _f(12288, "Longer prompts are skipped for training and counted.")
    max_completion_tokens: int = _f(4096, "Completion budget (max new tokens).")
    generation_batch_size: int = _f(64, "hf backend generation batch size.")
    share_prefix: bool = _f(
        True,
        "hf backend: encode the prompts' shared prefixes once (a game's civilians share the copy and the "
        "performances) and decode into a reserved cache; False prefills every prompt in full.",
    )
    vote_mode: str = _f(
        "free",
        "How votes are decoded (hf): free; constrained (<vote>k</vote>, the model picks k: warm start); "
        "think-then-vote (free reasoning up to think_tokens, then a forced <vote>k</vote>). Forced tokens are "
        "recorded but never scored.",
    )
    think_tokens: int = _f(32, "Reasoning budget of think-then-vote votes, in tokens.")
    abstain: bool = _f(False, "Forced votes may also pick N/A (the game allows it); off: a seat is named.")
    answer: str = _f(
        "free", "How performances end (hf): free, or boxed (a \\boxed{} answer is forced when the budget runs out)."
    )
    answer_tokens: int = _f(12, "Tokens the model may write inside a forced \\boxed{} answer.")
    performer: str = _f(
        "self", "Who performs: self (self-play), or an agent spec (e.g. heuristic): trains the detector alone."
    )
    voter: str = _f("self", "Who votes: self, or an agent spec (e.g. heuristic): trains the performer alone.")
    # ------------------------------------------------------------ algorithm
    iterations: int = _f(100, "Training iterations (one stage each).")
    learning_rate: float = _f(1e-6, "AdamW learning rate.")
    weight_decay: float = _f(0.0, "AdamW weight decay.")
    warmup_iterations: int = _f(0, "Linear warm-up, in iterations.")
    max_grad_norm: float = _f(1.0, "Gradient clipping; 0 disables.")
    mini_batch_size: int = _f(
        128, "PPO mini-batch per optimizer step, in mini_batch_unit; see also updates_per_iteration."
    )
    mini_batch_unit: str = _f(
        "samples",
        "Unit of mini_batch_size: samples (training rows), or documents as verl counts ppo_mini_batch_size (in "
        "prompts, × rollout.n): each iteration makes ceil(documents_per_iteration / mini_batch_size) updates.",
    )
    updates_per_iteration: int = _f(
        0,
        "If > 0: split each iteration's samples into this many equal mini-batches (optimizer steps per epoch), "
        "whatever their number, as verl's prompt-counted ppo_mini_batch_size does; 0: use mini_batch_size.",
    )
    micro_batch_size: int = _f(8, "Samples per forward/backward; gradients accumulate to the mini-batch.")
    epochs: int = _f(1, "Passes over each iteration's samples (μ).")
    epsilon: float = _f(0.2, "Clip ε (lower).")
    epsilon_high: float | None = _f(None, "Clip ε upper (None = epsilon).")
    beta: float = _f(0.001, "KL coefficient (k3 estimator against the frozen reference); 0 disables.")
    kl_estimator: str = _f(
        "k3",
        f"KL to the reference: k3 (TRL's, optionally ratio-weighted, unclamped) or low_var_kl (verl's: k3 "
        f"clamped to ±10, never ratio-weighted): {KL_ESTIMATORS}.",
    )
    kl_bias_correction: bool = _f(True, "Weight the k3 KL by the importance ratio (TRL 1.16's default; k3 only).")
    loss_type: str = _f("grpo", f"Loss aggregation, as in TRL: {LOSS_TYPES}.")
    perform_ratio_level: str = _f("token", "Importance ratio for performances: token, sequence (mean) or action (sum).")
    detect_ratio_level: str = _f("action", "Importance ratio for votes: action = one sequence log-prob ratio per vote.")
    detect_advantage_groups: str = _f(
        "game",
        "Normalise detection rewards within: game (its voters, Eq. 5), prompt (one seat's vote across the "
        "games_per_document games of a replay_setup group: same document, spy and masks) or batch (all of the "
        "iteration's votes, over every process: with few voters a game, e.g. 2 civilians of 3 players, Eq. 5 zeroes "
        "every game whose voters agree; docs/experiment/TUNING.md).",
    )
    vote_gradient: str = _f(
        "sampled",
        "Gradient at a vote's choice token (constrained or think-then-vote, hf): sampled (the paper's: the "
        "sampled choice's clipped surrogate), expected (its exact expectation over the legal choices, whose "
        "rewards the env knows; not the paper's estimator) or supervised (-log q(spy): a labels-only reference). "
        "See trainers/choices.py and docs/FIDELITY.md.",
    )
    forward_votes: bool = _f(
        False,
        "Constrained votes in one forward pass each (no generate loop for the forced tags); with one on-policy "
        "update an iteration the rollout's forward also feeds the update (trainers/votes.py).",
    )
    spy_vote_in_group: bool = _f(
        False, "The spy's vote joins its game's Eq. 5 normalisation group (the paper: all n voters), trained or not."
    )
    penalty_advantage: str = _f(
        "own",
        "Format/rule penalties: own (added to the offender's advantage after normalisation/baselines, so they "
        "never move anyone else's) or shared (added to the reward before, the old form).",
    )
    advantage_eps: float = _f(1e-4, "ε of (r − mean) / (std + ε).")
    rae: bool = _f(True, "Role-conditioned EMA baselines for performing advantages (off = raw rewards).")
    rae_alpha: float = _f(0.9, "RAE EMA factor α.")
    rae_init: str = _f(
        "first_batch",
        "RAE baselines before a role's first batch: first_batch (seeded with that batch's mean: no cold start) "
        "or zero (b_role = 0).",
    )
    perform_group_norm: bool = _f(
        False, "Also scale performing advantages by the std within replay_setup groups: A = (r − b_role)/(std_g + ε)."
    )
    # ------------------------------------------------------ stage controller
    stage_schedule: str = _f("adaptive", f"Stage switching: {SCHEDULES}.")
    start_stage: str = _f("detect", "First stage: detect or perform.")
    acc_high: float = _f(0.9, "detect → perform when EMA acc ≥ this ...")
    na_low: float = _f(0.1, "... and EMA N/A rate ≤ this.")
    err_high: float = _f(0.4, "perform → detect when 1 − EMA acc ≥ this ...")
    na_high: float = _f(0.5, "... or EMA N/A rate ≥ this.")
    k_min: int = _f(5, "Minimum iterations per stage (K_min).")
    stage_ema: float = _f(0.9, "EMA factor of acc and N/A for the controller.")
    # ----------------------------------------------------------- operations
    seed: int = _f(0, "Seed of everything (rollouts, sampling, shuffling).")
    checkpoint_every: int = _f(10, "Checkpoint every k iterations (and at the end).")
    keep_buffers: bool = _f(True, "Save each iteration's episode buffer (parquet).")
    heldout_fraction: float = _f(
        0.2, "Share of documents (by id hash) held out of training for evaluation; 0 trains on all."
    )
    eval_games: int = _f(0, "Held-out games for detection accuracy each eval_every iterations (0: off).")
    eval_every: int = _f(10, "Iterations between held-out evaluations.")
    report_to: list = _f(["jsonl"], "Metric sinks: jsonl, console, wandb, trackio, tensorboard.")  # noqa: RUF009
    progress: bool = _f(True, "Rich progress display.")

    def __post_init__(self) -> None:
        validate(self)  # raises ValueError naming the first bad field (trainers.validation)

    # ------------------------------------------------------------- helpers
    @property
    def epsilon_upper(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    def game_config(self):
        from spy_env.config import GameConfig

        # character limits follow the token budget (CHARS_PER_TOKEN each): a reply the model may write is not cut
        budget = {k: max(v, CHARS_PER_TOKEN * self.max_completion_tokens) for k, v in CHAR_LIMITS.items()}
        values = {**budget, **dict(self.game)}
        return GameConfig.from_dict(values)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        """Every field with its help as a comment; ``from_yaml`` reads it back to an equal config."""
        import yaml

        lines = []
        for f in fields(self):
            lines.append(f"# {f.metadata['help']}")
            lines.append(yaml.safe_dump({f.name: getattr(self, f.name)}, sort_keys=False, allow_unicode=True).rstrip())
        return "\n".join(lines) + "\n"

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SpyRLConfig:
        """Build from a mapping of field values; unknown keys are refused by name."""
        if unknown := sorted(set(values) - {f.name for f in fields(cls)}):
            raise ValueError(f"SpyRLConfig: unknown fields {unknown}")
        return cls(**coerce_floats(cls, values))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> SpyRLConfig:
        if not isinstance(name, str) or name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
        values = json.loads(json.dumps(PRESETS[name]))
        if not isinstance(overrides.get("game", {}), Mapping):
            raise ValueError(f"SpyRLConfig.game must be a mapping of GameConfig fields, got {overrides['game']!r}")
        game = {**values.pop("game", {}), **overrides.pop("game", {})}
        return cls.from_dict({**values, **overrides, "game": game})

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> SpyRLConfig:
        import yaml

        from spy_env.io import parse_yaml

        path = Path(path)
        if not path.is_file():
            raise ValueError(
                f"config file {str(path)!r} does not exist" if not path.exists() else f"{path} is not a file"
            )
        try:
            values = parse_yaml(path.read_text(encoding="utf-8"), f"config file {path}") or {}
        except UnicodeDecodeError as e:
            raise ValueError(f"config file {path} is not UTF-8 text") from e
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
            raise ValueError(f"config file {path} is not valid YAML{at}: {getattr(e, 'problem', None) or e}") from e
        if not isinstance(values, dict):
            raise ValueError(f"config file {path} must hold a mapping of field: value, got {type(values).__name__}")
        preset = values.pop("preset", None)
        values.update(overrides)
        return cls.preset(preset, **values) if preset else cls.from_dict(values)

    def with_overrides(self, assignments: list[str]) -> SpyRLConfig:
        """Apply ``key=value`` strings (values parsed as YAML; ``game.key=value`` for game fields)."""
        import yaml

        from spy_env.io import parse_yaml

        values = self.to_dict()
        for item in assignments:
            key, sep, raw = item.partition("=")
            if not sep:
                raise ValueError(f"override {item!r} must look like key=value")
            try:
                value = parse_yaml(raw, f"override {key}")
            except yaml.YAMLError as e:
                raise ValueError(f"override {item!r}: the value is not valid YAML ({getattr(e, 'problem', e)})") from e
            if _string_field(key) and isinstance(value, list) and all(isinstance(v, str) for v in value):
                value = raw  # a str field keeps its text: game.mask_placeholder=[…] is not a YAML list
            if key.startswith("game."):
                values["game"] = {**values["game"], key[5:]: value}
            else:
                values[key] = value
        return SpyRLConfig.from_dict(values)


def _string_field(key: str) -> bool:
    """Whether ``key`` (``name`` or ``game.name``) names a ``str`` field of SpyRLConfig or GameConfig."""
    from spy_env.config import GameConfig

    cls, name = (GameConfig, key[5:]) if key.startswith("game.") else (SpyRLConfig, key)
    return any(f.name == name and f.type in ("str", str) for f in fields(cls))
