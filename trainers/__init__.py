"""trainers: SpyRL's GRPO over episode buffers (docs/TRAINING.md).

One job per module: ``grpo`` (the trainer and its loop), ``samples`` (which rows train and their
advantages), ``algorithm`` (Eq. 5, RAE, the stage controller), ``update`` (micro-batches and the
update's pieces), ``loss`` (Eq. 7), ``logprobs``, ``policies`` (who plays the rollouts), ``models``
(what trains, the reference), ``documents``, ``seeds``, ``metrics``, ``processes`` (several
processes), ``checkpoint``, ``config`` (the whole config) / ``sections`` (its sections) / ``validation`` /
``presets``, ``engines`` (the rollout engines), ``vllm_engine``, ``sinks``; ``perform_rewards``, ``choices``,
``groups`` and ``mini_batch_units`` hold strategies.

>>> from trainers import SpyRLConfig
>>> SpyRLConfig.preset("qwen3-4b-paper").loss.beta
0.001
"""

from __future__ import annotations

import importlib

from trainers.config import SpyRLConfig
from trainers.presets import PRESETS

# Built-in strategies registered outside the module of their registry register on import (a setting
# naming them is checked against the registry): perform_reward "expected".
importlib.import_module("trainers.perform_rewards")

__all__ = ["PRESETS", "SpyRLConfig", "SpyRLTrainer"]


def __getattr__(name: str):
    if name == "SpyRLTrainer":  # torch and transformers load only when the trainer is used
        from trainers.grpo import SpyRLTrainer

        return SpyRLTrainer
    raise AttributeError(name)
