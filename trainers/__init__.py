"""trainers: SpyRL's GRPO over episode buffers (DESIGN §6).

>>> from trainers import SpyRLConfig
>>> SpyRLConfig.preset("qwen3-4b-paper").beta
0.001
"""

from __future__ import annotations

from trainers.config import SpyRLConfig
from trainers.presets import PRESETS

__all__ = ["PRESETS", "SpyRLConfig", "SpyRLTrainer"]


def __getattr__(name: str):
    if name == "SpyRLTrainer":  # torch and transformers load only when the trainer is used
        from trainers.grpo import SpyRLTrainer

        return SpyRLTrainer
    raise AttributeError(name)
