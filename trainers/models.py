"""The trained model and its frozen reference: loading, what trains (LoRA, top layers), memory options."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from trainers.logprobs import sequence_logps
from trainers.sections import ModelConfig

__all__ = [
    "freeze_below",
    "prepare_for_training",
    "reference_logps",
    "trainable_model",
]


def prepare_for_training(model: Any, config: ModelConfig) -> Any:
    """Gradient checkpointing, then LoRA adapters (the returned model wraps ``model``) or frozen bottom layers."""
    if config.gradient_checkpointing:
        # non-reentrant checkpointing with input grads enabled, so frozen embeddings (LoRA) still
        # pass gradients through the checkpointed blocks; the new name since transformers 5
        enable = getattr(model, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
    if config.lora_r:
        return with_lora(model, config)
    if config.train_top_layers:
        freeze_below(model, config.train_top_layers)
    return model


def with_lora(model: Any, config: ModelConfig) -> Any:
    """``model`` with peft LoRA adapters from the config's ``lora_*`` fields (only they train)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ImportError("LoRA needs peft: pip install 'spyrl[train]'") from e
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.lora_target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def freeze_below(model: Any, top_layers: int) -> None:
    """Train only the last ``top_layers`` decoder blocks and the final norm; freeze the rest.

    The frozen bottom then runs without building a graph, and the backward pass stops at the first
    trainable block: on long prompts with a short scored answer (votes) most of the update's cost
    goes away. Embeddings (and a tied output layer) stay frozen.
    """
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None or not 0 < top_layers <= len(layers):
        raise ValueError(f"SpyRLConfig.model.train_top_layers must be in [1, {len(layers or [])}], got {top_layers}")
    model.requires_grad_(False)
    for block in list(layers)[-top_layers:]:
        block.requires_grad_(True)
    norm = getattr(model.get_decoder(), "norm", None)
    if norm is not None:
        norm.requires_grad_(True)


def trainable_model(model: Any, config: ModelConfig, beta: float) -> tuple[Any, Any | None]:
    """``model`` ready to train (:func:`prepare_for_training`) and its frozen reference for the KL term: a
    copy of the initial weights, taken first; None without KL (``beta`` 0) or with LoRA (the base model
    with its adapters disabled is the reference)."""
    reference = None
    if beta and not config.lora_r:
        reference = copy.deepcopy(model).eval().requires_grad_(False)
    return prepare_for_training(model, config), reference


def reference_logps(
    ref_model: Any | None,
    model: Any,
    unwrapped: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float,
    choices: Sequence[Any] | None = None,
) -> tuple[torch.Tensor, list]:
    """(B, T) log-probs of the completions under the reference: ``ref_model``, or ``model`` with the
    LoRA adapters of its ``unwrapped`` self disabled; and the rows' choice log-probs (``choices``)."""
    with torch.no_grad():
        if ref_model is not None:
            out = sequence_logps(ref_model, prompts, completions, pad_id, temperature, choices=choices)
            return out.logps, out.choices
        with unwrapped.disable_adapter():
            out = sequence_logps(model, prompts, completions, pad_id, temperature, choices=choices)
            return out.logps, out.choices
