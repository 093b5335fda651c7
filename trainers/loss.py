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

**One decision, one weight** (``action`` level, the votes' default): a vote is one action with one
ratio, so it is one term ``v_i = ℓ_i + β Σ_t k3_t`` (the KL of the whole action, the sum of its
tokens' KLs) whatever its length — never ``ℓ_i`` repeated over its ``T_i`` tokens (that gave a
10-token vote 5× a 2-token vote's gradient and the vote's KL an effective ``β/T``). Votes are then
averaged: ``dapo`` over the votes of the whole mini-batch (every process), the others over the
micro-batch's votes / G. A constrained vote's choice-token loss (``vote_gradient`` expected or
supervised) is added to its term once.

For ``token`` and ``sequence`` levels this is numerically TRL 1.16's ``GRPOTrainer._compute_loss``
(a test checks it on the same tensors).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from agents.registry import Registry
from trainers.choices import Choice, vote_gradient_of

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "ChoiceTerms",
    "LossOutput",
    "LossScale",
    "Objective",
    "choice_terms",
    "clipped_policy_loss",
    "loss_items",
    "register_aggregation",
]


@dataclass(frozen=True)
class Aggregation:
    """A ``loss_type``: how a micro-batch's losses become the one scalar it backpropagates.

    ``tokens(masked, mask, length)``: from per-token losses (B, T) already multiplied by their mask
    (``length``: dr_grpo's L, ``max_completion_length`` or the batch width). ``actions(terms,
    decisions)``: from one term per sequence (B,) at the ``action`` level, zero where ``decisions``
    (B,) is 0. Either is divided by the mini-batch's micro-batches afterwards, unless
    ``whole_mini_batch``: then neither is called, and the sum is divided by the whole mini-batch's
    count (tokens, or decisions at the ``action`` level: :func:`loss_items`), as verl's token-mean.
    """

    tokens: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor] | None = None
    actions: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    whole_mini_batch: bool = False


AGGREGATIONS: Registry[Aggregation] = Registry("loss_type")


def register_aggregation(name: str, aggregation: Aggregation) -> Aggregation:
    """Make ``aggregation`` the ``loss_type`` called ``name`` (``SpyRLConfig`` field ``loss.loss_type``)."""
    if not aggregation.whole_mini_batch and (aggregation.tokens is None or aggregation.actions is None):
        raise ValueError(f"aggregation {name!r} needs tokens and actions, or whole_mini_batch=True")
    return AGGREGATIONS.register(name, aggregation)


def _grpo(masked: torch.Tensor, mask: torch.Tensor, length: int) -> torch.Tensor:
    """TRL's ``grpo``: the mean over sequences of each sequence's token mean."""
    return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def _bnpo(masked: torch.Tensor, mask: torch.Tensor, length: int) -> torch.Tensor:
    """TRL's ``bnpo``: the token mean of the micro-batch."""
    return masked.sum() / mask.sum().clamp(min=1.0)


def _dr_grpo(masked: torch.Tensor, mask: torch.Tensor, length: int) -> torch.Tensor:
    """TRL's ``dr_grpo``: the token sum / (B · L), L the completion budget."""
    return masked.sum() / (masked.shape[0] * length)


def _decision_mean(terms: torch.Tensor, decisions: torch.Tensor) -> torch.Tensor:
    """One term per decision (``action`` level), averaged over the micro-batch's decisions."""
    return terms.sum() / decisions.sum().clamp(min=1.0)


register_aggregation("grpo", Aggregation(_grpo, _decision_mean))
register_aggregation("bnpo", Aggregation(_bnpo, _decision_mean))
register_aggregation("dr_grpo", Aggregation(_dr_grpo, _decision_mean))
register_aggregation("dapo", Aggregation(whole_mini_batch=True))  # verl's token-mean: the whole mini-batch's count


@dataclass(frozen=True)
class Objective:
    """Everything one call of Eq. 7 needs (from :meth:`LossConfig.objective`; ``level`` per stage)."""

    level: str = "token"  # importance ratio: token, sequence or action (one term per sequence)
    loss_type: str = "grpo"  # aggregation: a name in AGGREGATIONS
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    beta: float = 0.0
    kl_estimator: str = "k3"
    kl_bias_correction: bool = True
    max_completion_length: int | None = None  # dr_grpo's L (None: the batch width)
    vote_gradient: str = "sampled"  # a vote's choice-token loss (trainers.choices.VOTE_GRADIENTS)

    def at(self, level: str) -> Objective:
        return replace(self, level=level)


@dataclass(frozen=True)
class LossScale:
    """How a micro-batch's loss is scaled inside its mini-batch."""

    num_items_in_batch: float | None = None  # dapo's denominator: see :func:`loss_items` (None: this micro-batch's)
    accumulation_steps: int = 1  # micro-batches in the mini-batch (not dapo)


@dataclass(frozen=True)
class ChoiceTerms:
    """``vote_gradient`` expected/supervised: each vote's loss at its choice token, and where it is."""

    losses: torch.Tensor  # (B,)
    mask: torch.Tensor  # (B, T) 1 at the choice token those losses replace


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar, ready for backward (already divided for accumulation)
    policy_loss: float  # the same loss before the accumulation division, detached
    kl: float  # masked mean of the (possibly weighted) k3 term
    clip_fraction: float  # share of masked tokens/sequences whose ratio was clipped
    ratio_mean: float


def choice_terms(
    choice_logps: Sequence[torch.Tensor | None],
    choices: Sequence[Choice | None],
    coefficients: Sequence[torch.Tensor | None],
    old_choices: Sequence[torch.Tensor | None],
    objective: Objective,
    logps: torch.Tensor,
) -> ChoiceTerms | None:
    """``vote_gradient`` expected/supervised: each vote's loss at its choice token (B,) and where that
    token is (B, T), from its current (C,) ``choice_logps``, its ``coefficients`` and its behaviour
    ``old_choices`` (None: on-policy, the current ones); None when every row trains by its sampled choice."""
    loss = vote_gradient_of(objective.vote_gradient).loss
    if loss is None or not any(c is not None for c in coefficients):  # the sampled choice: a token as any
        return None
    losses, at = [], torch.zeros_like(logps, dtype=torch.float32)  # (B, T)
    for k, (choice, logq, weights) in enumerate(zip(choices, choice_logps, coefficients, strict=True)):
        if choice is None or logq is None or weights is None:
            losses.append(torch.zeros((), dtype=torch.float32, device=logps.device))
            continue
        old = old_choices[k] if old_choices and old_choices[k] is not None else logq.detach()
        losses.append(loss(logq, old.to(logq), weights.to(logq), objective.epsilon_low, objective.epsilon_high))
        at[k, choice.step] = 1.0
    return ChoiceTerms(torch.stack([x.float() for x in losses]), at)


def loss_items(scored: Sequence[torch.Tensor], level: str) -> int:
    """dapo's denominator for rows whose scored-token masks are ``scored``: their tokens, or at the
    ``action`` level the number of rows with a scored token (one term per decision)."""
    if level == "action":
        return sum(int(s.sum().item() > 0) for s in scored)
    return int(sum(s.sum().item() for s in scored))


def clipped_policy_loss(
    logps: torch.Tensor,  # (B, T) current per-token log-probs of the completion tokens
    old_logps: torch.Tensor,  # (B, T) behaviour log-probs
    advantages: torch.Tensor,  # (B,)
    mask: torch.Tensor,  # (B, T) 1 for real completion tokens
    config: Objective,
    *,
    ref_logps: torch.Tensor | None = None,  # (B, T), needed when config.beta > 0
    scale: LossScale = LossScale(),
    choice: ChoiceTerms | None = None,
) -> LossOutput:
    """Eq. 7, the clipped objective for one micro-batch (see the module docstring).

    ``J(θ) = E[ agg_t min(w_t A_i, clip(w_t, 1 − ε_low, 1 + ε_high) A_i) ] − β D_KL`` with
    ``w_t = π_θ(o_t | q, o_<t) / π_old(o_t | q, o_<t)`` (``config.level`` chooses token, sequence or
    action ratios) and ``agg`` the ``loss_type`` aggregation; returns the loss ``−J`` to minimise.
    With ``choice``, the choice tokens take those losses instead and stay out of the sequence ratio.
    """
    c = config
    mask = mask.to(logps.dtype)
    advantages = advantages.to(logps.dtype).unsqueeze(1)  # (B, 1)
    at = None if choice is None else choice.mask.to(mask) * mask  # (B, T) the scored choice tokens
    ratio_mask = mask if at is None else mask * (1 - at)
    ratio = torch.exp(importance_log_weights(logps - old_logps, ratio_mask, c.level))  # (B, T) or (B, 1)
    clipped = torch.clamp(ratio, 1 - c.epsilon_low, 1 + c.epsilon_high)
    surrogate = -torch.min(ratio * advantages, clipped * advantages)  # (B, T) or (B, 1)
    per_token_kl, kl_value = None, 0.0
    if c.beta != 0.0:
        if ref_logps is None:
            raise ValueError("beta > 0 needs ref_logps")
        per_token_kl = kl_penalty(ref_logps - logps, ratio, c.kl_estimator, c.kl_bias_correction)  # (B, T)
        kl_value = ((per_token_kl * mask).sum() / mask.sum().clamp(min=1.0)).item()
    if c.level == "action":
        loss, policy_loss = _per_action(surrogate, per_token_kl, mask, ratio_mask, c, scale, choice)
    else:
        per_token_loss = surrogate.expand_as(mask)
        if at is not None:
            per_token_loss = per_token_loss * (1 - at) + at * choice.losses.to(logps.dtype).unsqueeze(1)
        if per_token_kl is not None:
            per_token_loss = per_token_loss + c.beta * per_token_kl
        loss, policy_loss = _aggregate_tokens(per_token_loss * mask, mask, c, scale)
    clip_fraction, ratio_mean = clip_stats(ratio, advantages, mask, c.epsilon_low, c.epsilon_high)
    return LossOutput(loss, float(policy_loss), kl_value, clip_fraction, ratio_mean)


def _per_action(
    surrogate: torch.Tensor,
    per_token_kl: torch.Tensor | None,
    mask: torch.Tensor,
    ratio_mask: torch.Tensor,
    config: Objective,
    scale: LossScale,
    choice: ChoiceTerms | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One term per sequence, ``v_i = ℓ_i + choice_i + β Σ_t k3_t``, averaged over decisions (module docstring)."""
    has_ratio = (ratio_mask.sum(-1) > 0).to(mask)  # (B,) a sequence ratio exists (not only the choice token)
    terms = surrogate.squeeze(1) * has_ratio  # (B,)
    if choice is not None:
        terms = terms + choice.losses.to(mask) * (choice.mask.to(mask) * mask).sum(-1).clamp(max=1.0)
    if per_token_kl is not None:
        terms = terms + config.beta * (per_token_kl * mask).sum(-1)
    decisions = (mask.sum(-1) > 0).to(mask)  # (B,) rows that train
    aggregation = aggregation_of(config.loss_type)
    if aggregation.whole_mini_batch:  # the whole mini-batch's decisions: no accumulation division
        items = decisions.sum() if scale.num_items_in_batch is None else torch.as_tensor(scale.num_items_in_batch)
        loss = (terms * decisions).sum() / items.to(mask).clamp(min=1.0)
        return loss, loss.detach()
    loss = aggregation.actions(terms * decisions, decisions)
    return loss / scale.accumulation_steps, loss.detach()


def _aggregate_tokens(
    masked: torch.Tensor, mask: torch.Tensor, config: Objective, scale: LossScale
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, policy_loss)`` of per-token losses (B, T) under ``config.loss_type``."""
    aggregation = aggregation_of(config.loss_type)
    if aggregation.whole_mini_batch:  # one denominator for the whole mini-batch: no accumulation division
        items = mask.sum() if scale.num_items_in_batch is None else torch.as_tensor(scale.num_items_in_batch)
        loss = masked.sum() / items.to(masked).clamp(min=1.0)
        return loss, loss.detach()
    loss = aggregation.tokens(masked, mask, config.max_completion_length or masked.shape[1])
    return loss / scale.accumulation_steps, loss.detach()


def aggregation_of(loss_type: str) -> Aggregation:
    return AGGREGATIONS.of(loss_type)


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
