"""The clipped policy objective of SpyRL's GRPO, with TRL's loss aggregations.

For sample ``i`` with completion tokens ``t`` (mask ``m``), current log-probs ``logp``, behaviour
log-probs ``old``, reference log-probs ``ref`` and advantage ``A_i``:

- importance weight ``w = exp(log_ratio)`` with ``log_ratio = logp − old`` per token (``token``),
  its masked mean per sequence (``sequence``, GSPO), or its masked *sum* per sequence
  (``action``: the ratio of whole-sequence probabilities, the paper's one ratio per vote);
- clipped surrogate ``ℓ = −min(w A, clip(w, 1 − ε_low, 1 + ε_high) A)``;
- KL to the reference (Eq. 7's ``β D_KL(π_θ ‖ π_ref)``) with the k3 estimator
  ``k3 = exp(ref − logp) − (ref − logp) − 1``: ``kl_estimator="k3"`` optionally weights it by
  ``w`` (TRL 1.16's default bias correction); ``"low_var_kl"`` is verl's form, never weighted,
  ``ref − logp`` clamped to ±20 and ``k3`` to ±10; added per token as ``β k3``;
- aggregation over a mini-batch split into ``G`` micro-batches, named as in TRL:
  ``grpo`` (mean over sequences of the per-sequence token mean, / G), ``bnpo`` (token mean of the
  micro-batch, / G), ``dr_grpo`` (token sum / (B · L_max), / G) and ``dapo`` (token sum / the
  number of completion tokens in the whole mini-batch).

For ``token`` and ``sequence`` levels this is numerically TRL 1.16's ``GRPOTrainer._compute_loss``
(a test checks it on the same tensors).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["LossOutput", "clipped_policy_loss"]


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar, ready for backward (already divided for accumulation)
    policy_loss: float  # the same loss before the accumulation division, detached
    kl: float  # masked mean of the (possibly weighted) k3 term
    clip_fraction: float  # share of masked tokens/sequences whose ratio was clipped
    ratio_mean: float


def clipped_policy_loss(
    logps: torch.Tensor,  # (B, T) current per-token log-probs of the completion tokens
    old_logps: torch.Tensor,  # (B, T) behaviour log-probs
    advantages: torch.Tensor,  # (B,)
    mask: torch.Tensor,  # (B, T) 1 for real completion tokens
    *,
    ref_logps: torch.Tensor | None = None,  # (B, T), needed when beta > 0
    level: str = "token",
    loss_type: str = "grpo",
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    beta: float = 0.0,
    kl_bias_correction: bool = True,
    kl_estimator: str = "k3",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
    accumulation_steps: int = 1,
    choice_losses: torch.Tensor | None = None,  # (B,) a vote's loss at its choice token (trainers.choices)
    choice_mask: torch.Tensor | None = None,  # (B, T) 1 at the choice tokens those losses replace
) -> LossOutput:
    """Eq. 7, the clipped objective for one micro-batch (see the module docstring).

    ``J(θ) = E[ agg_t min(w_t A_i, clip(w_t, 1 − ε_low, 1 + ε_high) A_i) ] − β D_KL`` with
    ``w_t = π_θ(o_t | q, o_<t) / π_old(o_t | q, o_<t)`` (``level`` chooses token, sequence or
    action ratios) and ``agg`` the ``loss_type`` aggregation; returns the loss ``−J`` to minimise.
    With ``choice_losses``, the tokens of ``choice_mask`` take those losses instead (``vote_gradient``
    expected/supervised: :func:`trainers.choices.choice_loss`) and stay out of the sequence ratio.
    """
    mask = mask.to(logps.dtype)
    advantages = advantages.to(logps.dtype).unsqueeze(1)  # (B, 1)
    ratio_mask = mask if choice_mask is None else mask * (1 - choice_mask.to(mask))
    ratio = torch.exp(importance_log_weights(logps - old_logps, ratio_mask, level))  # (B, T) or (B, 1)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token_loss = -torch.min(ratio * advantages, clipped * advantages)  # (B, T) or (B, 1)
    if choice_losses is not None and choice_mask is not None:
        at = choice_mask.to(mask) * mask
        per_token_loss = per_token_loss.expand_as(mask) * (1 - at) + at * choice_losses.to(logps.dtype).unsqueeze(1)

    kl_value = 0.0
    if beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta > 0 needs ref_logps")
        per_token_kl = kl_penalty(ref_logps - logps, ratio, kl_estimator, kl_bias_correction)  # (B, T)
        per_token_loss = per_token_loss + beta * per_token_kl
        kl_value = ((per_token_kl * mask).sum() / mask.sum().clamp(min=1.0)).item()

    masked = per_token_loss * mask  # broadcasts (B, 1) over T
    if loss_type == "dapo":  # one denominator for the whole mini-batch: no accumulation division
        total = mask.sum() if num_items_in_batch is None else torch.as_tensor(num_items_in_batch, dtype=logps.dtype)
        loss = masked.sum() / total.clamp(min=1.0)
        policy_loss = loss.detach()
    else:
        length = max_completion_length or logps.shape[1]
        loss = aggregate(masked, mask, loss_type, logps.shape[0] * length)
        policy_loss, loss = loss.detach(), loss / accumulation_steps
    clip_fraction, ratio_mean = clip_stats(ratio, advantages, mask, epsilon_low, epsilon_high)
    return LossOutput(loss, float(policy_loss), kl_value, clip_fraction, ratio_mean)


def importance_log_weights(log_ratio: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """``log w`` from the per-token ``log_ratio`` (B, T): per token (B, T), or one per sequence (B, 1),
    the masked mean (``sequence``) or the masked sum (``action``) of the token log-ratios."""
    if level == "token":
        return log_ratio  # (B, T)
    if level == "sequence":
        return ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)  # (B, 1)
    if level == "action":
        return (log_ratio * mask).sum(-1).unsqueeze(-1)  # (B, 1)
    raise ValueError(f"unknown ratio level {level!r}; expected token, sequence or action")


def kl_penalty(delta: torch.Tensor, ratio: torch.Tensor, estimator: str, bias_correction: bool) -> torch.Tensor:
    """Per-token KL to the reference from ``delta = ref − logp`` (B, T): k3, or verl's ``low_var_kl``."""
    if estimator == "k3":
        per_token_kl = torch.exp(delta) - delta - 1  # (B, T), k3
        return per_token_kl * ratio if bias_correction else per_token_kl
    if estimator == "low_var_kl":  # verl's kl_penalty(..., "low_var_kl")
        delta = delta.clamp(-20.0, 20.0)
        return (torch.exp(delta) - delta - 1).clamp(-10.0, 10.0)  # (B, T)
    raise ValueError(f"unknown kl_estimator {estimator!r}; expected k3 or low_var_kl")


def aggregate(masked: torch.Tensor, mask: torch.Tensor, loss_type: str, dr_grpo_denominator: int) -> torch.Tensor:
    """A micro-batch's loss from its masked per-token losses (B, T), as TRL's ``grpo``, ``bnpo`` and
    ``dr_grpo`` aggregate it (``dapo`` needs the mini-batch's token count: see the caller)."""
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return masked.sum() / dr_grpo_denominator
    raise ValueError(f"unknown loss_type {loss_type!r}; expected grpo, bnpo, dr_grpo or dapo")


def clip_stats(
    ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, epsilon_low: float, epsilon_high: float
) -> tuple[float, float]:
    """``(clip_fraction, ratio_mean)`` over masked tokens, or over sequences for one ratio per sequence."""
    with torch.no_grad():
        is_clipped = ((ratio < 1 - epsilon_low) & (advantages < 0)) | ((ratio > 1 + epsilon_high) & (advantages > 0))
        if is_clipped.shape[1] == 1:
            return is_clipped.float().mean().item(), ratio.mean().item()
        clip_fraction = ((is_clipped.float() * mask).sum() / mask.sum().clamp(min=1.0)).item()
        ratio_mean = ((ratio * mask).sum() / mask.sum().clamp(min=1.0)).item()
    return clip_fraction, ratio_mean
