"""What a training run will import, read from its config before the first iteration.

``spyrl train`` and :class:`trainers.SpyRLTrainer` check these first, so a missing package is a
one-line error in the first seconds, not a failure after the run's work (the chart, a tracker's
first log, the first LoRA update).

>>> from trainers.sections import ModelConfig
>>> [extra.module for extra in training_extras(ModelConfig(name_or_path="tiny"), ["jsonl", "wandb"])]
['torch', 'transformers', 'accelerate', 'safetensors', 'wandb']
"""

from __future__ import annotations

from collections.abc import Sequence

from spy_env.extras import Extra, require
from trainers.sections import ModelConfig

__all__ = ["PLOTS", "require_training_extras", "training_extras"]

TRAIN = "spyrl[train]"
# The training curves (``spyrl train`` draws them when the run ends; ``spyrl plot`` on request).
PLOTS = Extra("matplotlib", TRAIN, "the training curves")
SINKS = {
    "wandb": Extra("wandb", "wandb", "report_to wandb"),
    "trackio": Extra("trackio", "trackio", "report_to trackio"),
    "tensorboard": Extra("tensorboard", "tensorboard", "report_to tensorboard"),
}


def training_extras(config: ModelConfig, report_to: Sequence[str] = (), *, plots: bool = False) -> list[Extra]:
    """The optional packages a run imports for its model (``config``) and metric sinks (``report_to``);
    ``plots`` adds the curves' matplotlib.

    vLLM and TRL are not listed: a vLLM ``generation`` checks them itself when the trainer builds its
    engine (:func:`trainers.vllm_generation.make_vllm_generation`, also before the first iteration), where a
    test can stand in for the engine."""
    needs = [
        Extra("torch", TRAIN, "training"),
        Extra("transformers", TRAIN, "training"),
        Extra("accelerate", TRAIN, "training"),
        Extra("safetensors", TRAIN, "checkpoints"),
    ]
    if config.name_or_path == "smollm2":
        needs.append(Extra("gguf", "spyrl[hf]", "converting the smollm2 model"))
    if config.lora_r:
        needs.append(Extra("peft", TRAIN, f"lora_r={config.lora_r}"))
    needs.extend(SINKS[sink] for sink in report_to if sink in SINKS)
    if plots:
        needs.append(PLOTS)
    return needs


def require_training_extras(config: ModelConfig, report_to: Sequence[str] = (), *, plots: bool = False) -> None:
    """Raise one ``ImportError`` naming every package of :func:`training_extras` that is missing."""
    needs = training_extras(config, report_to, plots=plots)
    require(needs)
