"""What a :class:`~trainers.SpyRLConfig` may hold: the allowed values, and one check per topic.

Each check raises ``ValueError("SpyRLConfig.<field> must be <allowed>, got <value>")`` for the first
bad field. Nothing here builds a model or an agent: agent specs are checked by their form alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from agents.registry import spec_problem
from spy_env.config import GameConfig, check_types
from trainers.choices import VOTE_GRADIENTS, vote_gradient_of
from trainers.loss import AGGREGATIONS
from trainers.samples import ADVANTAGE_GROUPINGS, grouping_of

__all__ = ["GENERATION", "KL_ESTIMATORS", "LEVELS", "LOSS_TYPES", "SCHEDULES", "validate"]

LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "bnpo")  # the built-in aggregations (trainers.loss.AGGREGATIONS holds all)
LEVELS = ("token", "sequence", "action")
SCHEDULES = ("adaptive", "alternate", "detect", "perform")
GENERATION = ("hf", "vllm-colocate", "vllm-server")
KL_ESTIMATORS = ("k3", "low_var_kl")
SINKS = ("jsonl", "console", "wandb", "trackio", "tensorboard")

POSITIVE_INTS = (
    "documents_per_iteration", "games_per_document", "iterations", "mini_batch_size", "micro_batch_size",
    "epochs", "max_prompt_tokens", "max_completion_tokens", "generation_batch_size", "k_min",
    "checkpoint_every", "eval_every", "think_tokens", "answer_tokens",
)  # fmt: skip
POSITIVE_NUMBERS = ("learning_rate", "epsilon", "temperature")
NON_NEGATIVE_NUMBERS = ("beta", "weight_decay", "max_grad_norm", "advantage_eps")
FRACTIONS = ("top_p", "rae_alpha", "stage_ema", "acc_high", "na_low", "err_high", "na_high")
CHOICES = {
    "loss_type": AGGREGATIONS,  # read when checked: a registered aggregation is a choice
    "perform_ratio_level": LEVELS,
    "detect_ratio_level": LEVELS,
    "detect_advantage_groups": ADVANTAGE_GROUPINGS,  # read when checked, as loss_type
    "vote_gradient": VOTE_GRADIENTS,  # read when checked, as loss_type
    "mini_batch_unit": ("samples", "documents"),
    "document_order": ("random", "epoch"),
    "kl_estimator": KL_ESTIMATORS,
    "penalty_advantage": ("own", "shared"),
    "rae_init": ("first_batch", "zero"),
    "stage_schedule": SCHEDULES,
    "start_stage": ("detect", "perform"),
    "generation": GENERATION,
    "dtype": ("auto", "fast", "float32", "bfloat16", "float16"),
    "vote_mode": ("free", "constrained", "think-then-vote"),
    "answer": ("free", "boxed"),
}


def validate(config: Any) -> None:
    """Raise ``ValueError`` naming the first bad field of ``config`` (types first: nothing after sees a
    str where an int belongs)."""
    check_types(config)
    for check in (_numbers, _choices, _batching, _votes, _counts, _device_and_seed, _seats, _vllm, _game):
        check(config)


def _bad(config: Any, name: str, allowed: str) -> ValueError:
    return ValueError(f"SpyRLConfig.{name} must be {allowed}, got {getattr(config, name)!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))


def _numbers(config: Any) -> None:
    for name in POSITIVE_INTS:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _bad(config, name, "an integer >= 1")
    for name in POSITIVE_NUMBERS:
        value = getattr(config, name)
        if not _is_number(value) or not math.isfinite(value) or value <= 0:
            raise _bad(config, name, "a finite number > 0")
    for name in NON_NEGATIVE_NUMBERS:
        value = getattr(config, name)
        if not _is_number(value) or not math.isfinite(value) or value < 0:
            raise _bad(config, name, "a finite number >= 0")
    if config.epsilon_high is not None and not (_is_number(config.epsilon_high) and config.epsilon_high > 0):
        raise _bad(config, "epsilon_high", "None or a number > 0")
    for name in FRACTIONS:
        value = getattr(config, name)
        if not _is_number(value) or not 0 <= value <= 1:
            raise _bad(config, name, "a number in [0, 1]")
    if config.rae_alpha >= 1:
        raise _bad(config, "rae_alpha", "in [0, 1)")


def _choices(config: Any) -> None:
    for name, allowed in CHOICES.items():
        if getattr(config, name) not in allowed:
            raise _bad(config, name, f"one of {tuple(allowed)}")


def _batching(config: Any) -> None:
    if config.mini_batch_unit == "samples" and config.mini_batch_size % config.micro_batch_size:
        raise _bad(config, "mini_batch_size", f"a multiple of micro_batch_size ({config.micro_batch_size})")
    needs_replays = grouping_of(config.detect_advantage_groups).needs_replayed_setups
    if needs_replays and (not config.replay_setup or config.games_per_document < 2):
        # without replayed setups every vote prompt is unique: one-member groups, every advantage 0
        raise _bad(config, "detect_advantage_groups", "'game' unless replay_setup is on and games_per_document >= 2")


def _votes(config: Any) -> None:
    gradient = vote_gradient_of(config.vote_gradient)
    if gradient.scores_choices and (config.vote_mode == "free" or config.generation != "hf"):
        # a free vote has no choice step, and vLLM rollouts do not record which tokens were allowed
        raise _bad(
            config, "vote_gradient", "'sampled' unless vote_mode is constrained or think-then-vote with generation hf"
        )
    if gradient.exact_distribution and (config.temperature != 1 or config.top_p < 1):
        # the choice distributions q are recorded at temperature 1 over every legal seat: the votes must be
        # drawn from that q for Σ_k q_k ... to be their expectation and for q to be the behaviour policy
        raise _bad(config, "vote_gradient", "'sampled' or 'supervised' unless temperature is 1 and top_p 1")
    if config.forward_votes and (config.vote_mode != "constrained" or config.generation != "hf" or config.top_p < 1):
        raise _bad(config, "forward_votes", "False unless vote_mode is 'constrained', generation 'hf' and top_p 1")


def _counts(config: Any) -> None:
    if config.lora_r < 0:
        raise _bad(config, "lora_r", "an integer >= 0")
    if not isinstance(config.train_top_layers, int) or config.train_top_layers < 0:
        raise _bad(config, "train_top_layers", "an integer >= 0")
    if not _is_number(config.heldout_fraction) or not 0 <= config.heldout_fraction < 1:
        raise _bad(config, "heldout_fraction", "a number in [0, 1)")
    if not isinstance(config.updates_per_iteration, int) or config.updates_per_iteration < 0:
        raise _bad(config, "updates_per_iteration", "an integer >= 0")
    if (
        not isinstance(config.report_to, list)
        or not all(isinstance(sink, str) for sink in config.report_to)
        or not set(config.report_to) <= set(SINKS)
    ):
        raise _bad(config, "report_to", f"a list drawn from {sorted(SINKS)}")


def _device_and_seed(config: Any) -> None:
    # checked here, before any output is written, not by torch once the model is loaded
    if not isinstance(config.device, str) or not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", config.device):
        raise _bad(config, "device", "auto, cpu, mps, cuda or cuda:N")
    if not isinstance(config.seed, int) or isinstance(config.seed, bool) or not 0 <= config.seed < 2**32:
        raise _bad(config, "seed", "an integer in [0, 2**32)")


def _seats(config: Any) -> None:
    for name in ("performer", "voter"):
        spec = getattr(config, name)
        problem = None if spec == "self" else spec_problem(spec)
        if problem is not None:
            raise _bad(config, name, f"'self' or an agent spec ({problem})")
    if config.eval_games < 0:
        raise _bad(config, "eval_games", "an integer >= 0")


def _vllm(config: Any) -> None:
    if not 0 < config.vllm_gpu_memory_utilization <= 1:
        raise _bad(config, "vllm_gpu_memory_utilization", "in (0, 1]")
    if not isinstance(config.vllm_tensor_parallel_size, int) or config.vllm_tensor_parallel_size < 1:
        raise _bad(config, "vllm_tensor_parallel_size", "an integer >= 1")
    if not isinstance(config.vllm_group_port, int) or not 0 < config.vllm_group_port < 65536:
        raise _bad(config, "vllm_group_port", "a port number in [1, 65535]")
    if config.vllm_max_model_length is not None and (
        not isinstance(config.vllm_max_model_length, int) or config.vllm_max_model_length < 2
    ):
        raise _bad(config, "vllm_max_model_length", "None or an integer >= 2")
    if not config.vllm_server_timeout > 0:
        raise _bad(config, "vllm_server_timeout", "a number of seconds > 0")
    if config.answer != "free" and config.generation != "hf":  # vLLM rollouts send one pattern per call
        raise _bad(config, "answer", f"'free' with generation={config.generation!r} (boxed needs generation 'hf')")
    try:
        url = urlsplit(config.vllm_server_url)
        url.port  # noqa: B018 - parses the port, raising ValueError when it is not a number
    except ValueError as e:
        raise _bad(config, "vllm_server_url", f"an http(s):// URL ({e})") from e
    if url.scheme not in ("http", "https") or not url.hostname:
        raise _bad(config, "vllm_server_url", "an http(s):// URL with a host")


def _game(config: Any) -> None:
    if not isinstance(config.game, Mapping):
        raise _bad(config, "game", "a mapping of GameConfig fields")
    GameConfig.from_dict(dict(config.game))  # raises ValueError naming a bad game field
