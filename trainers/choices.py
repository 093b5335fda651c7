"""Votes whose decision is one choice among the legal seats: how the trainer scores that choice.

With ``vote_mode`` ``constrained`` (or the forced vote after ``think-then-vote``) the model's
decision at the choice step is a draw ``k ~ q`` from its distribution renormalised over the allowed
tokens (the legal seats, and ``N/A`` with abstention). The env knows the reward of every choice,
``r_k = w_D·1[k = spy]`` (``N/A``: 0), so the trainer has three ways to turn a vote into a gradient
at that token (``SpyRLConfig.vote_gradient``):

- ``sampled`` (the paper's estimator): the clipped surrogate of the sampled choice with the vote's
  group-normalised advantage ``A``: ``E[A ∇log q(v)]``;
- ``expected``: the exact expectation of that surrogate over the choices,
  ``Σ_k q_old,k · min(ρ_k Â_k, clip(ρ_k, 1 − ε, 1 + ε) Â_k)`` with ``ρ_k = q_θ,k / q_old,k``; at
  ``θ = θ_old`` its gradient is ``Σ_k q_k Â_k ∇log q_k``, what ``sampled`` gives on average, without
  the noise of one draw; off-policy mini-batches keep PPO's clipping, choice by choice. ``Â_k =
  (r_k − μ_g) / (σ_g + ε)`` where ``μ_g`` and ``σ_g`` are the mean and std of the rewards of the
  group's votes under their recorded distributions (the mixture: what the sampled form's group
  mean and std estimate). Reasoning tokens before the choice (``think-then-vote``) train with the
  vote's expected reward ``Σ_k q_k r_k`` in place of the sampled one, normalised the same way.
  This is not the paper's estimator: it uses that the env can score choices that were not taken;
- ``supervised``: ``−log q(spy)``, a reference, not RL: what the labels alone teach.

:func:`choice_loss` is the per-vote loss at the choice token; the trainer puts it in the loss's
per-token matrix (:func:`trainers.loss.clipped_policy_loss`'s ``choice_losses``), so aggregation
and the KL term treat it as one token.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agents.registry import Registry

__all__ = [
    "VOTE_GRADIENTS",
    "Choice",
    "VoteGradient",
    "choice_loss",
    "choice_probs",
    "choice_rewards",
    "expected_advantages",
    "expected_moments",
    "register_vote_gradient",
    "supervised_targets",
    "vote_gradient_of",
]


@dataclass(frozen=True)
class Choice:
    """A vote's choice: its completion ``step``, the token picking each choice (``tokens``), the seat
    each choice names (``seats``, None for ``N/A``) and the index of the one taken."""

    step: int
    tokens: tuple[int, ...]
    seats: tuple[int | None, ...]
    taken: int

    @classmethod
    def of(cls, row: Mapping[str, Any], max_tokens: int | None = None) -> Choice | None:
        """The choice of a buffer row (``choice_step``, ``choice_token_ids``), or None: no recorded choice,
        the choice cut off by ``max_tokens``, or the token at the step not among the choices.

        >>> row = {"choice_step": 1, "choice_token_ids": [-1, 17, 18, -1], "completion_token_ids": [5, 18, 6]}
        >>> Choice.of(row)
        Choice(step=1, tokens=(17, 18), seats=(1, 2), taken=1)
        >>> Choice.of(row, max_tokens=1) is None
        True
        """
        step, ids = row.get("choice_step", -1), list(row.get("choice_token_ids") or [])
        completion = row["completion_token_ids"]
        if step is None or step < 0 or len(ids) < 2 or step >= min(len(completion), max_tokens or len(completion)):
            return None
        n = len(ids) - 1  # seats, then N/A
        picks = [(s if s < n else None, t) for s, t in enumerate(ids) if t >= 0]
        tokens = tuple(t for _, t in picks)
        if len(tokens) < 2 or len(set(tokens)) < len(tokens) or completion[step] not in tokens:
            return None
        return cls(int(step), tokens, tuple(s for s, _ in picks), tokens.index(completion[step]))


def choice_rewards(choice: Choice, spy_seat: int, weight_detect: float = 1.0) -> np.ndarray:
    """``r_k = w_D·1[k = spy]`` for each choice (``N/A``: 0): the detection reward Eq. 4 gives each.

    >>> choice_rewards(Choice(3, (17, 18, 40), (0, 2, None), 0), spy_seat=2).tolist()
    [0.0, 1.0, 0.0]
    """
    return np.array([weight_detect if s == spy_seat else 0.0 for s in choice.seats])


def choice_probs(row: Mapping[str, Any], choice: Choice) -> np.ndarray:
    """The recorded distribution over the row's choices (``vote_probs``), renormalised; uniform if unknown."""
    probs = list(row.get("vote_probs") or [])
    n = len(probs) - 1
    q = np.array([probs[n if s is None else s] if len(probs) > (n if s is None else s) else 0.0 for s in choice.seats])
    return q / q.sum() if q.sum() > 0 else np.full(len(choice.seats), 1.0 / len(choice.seats))


def _choice_distributions(
    rows: Sequence[Mapping[str, Any]], weight_detect: float
) -> tuple[list[Choice | None], list[np.ndarray], list[np.ndarray]]:
    """Per row: its choice, its recorded distribution ``q`` and each choice's reward ``r_k`` (a row without
    a choice: one certain outcome, its sampled reward)."""
    choices = [Choice.of(r) for r in rows]
    dists, rewards = [], []
    for row, choice in zip(rows, choices, strict=True):
        if choice is None:
            dists.append(np.ones(1))
            rewards.append(np.array([weight_detect * row["reward_detect"]]))
        else:
            dists.append(choice_probs(row, choice))
            rewards.append(choice_rewards(choice, row["spy_seat"], weight_detect))
    return choices, dists, rewards


def expected_moments(rows: Sequence[Mapping[str, Any]], weight_detect: float = 1.0) -> list[float]:
    """``[Σ_i q_i·r_i, Σ_i q_i·r_i², n]``: the moments of the rows' rewards under their recorded choice
    distributions, what processes add up for a group spread over them (:func:`trainers.algorithm.moments_stats`).

    >>> rows = [{"choice_step": 0, "choice_token_ids": [-1, 7, 8, -1], "completion_token_ids": [7],
    ...          "vote_probs": [0.0, 0.5, 0.5, 0.0], "spy_seat": 2, "reward_detect": 0.0}]
    >>> expected_moments(rows)
    [0.5, 0.5, 1]
    """
    _, dists, rewards = _choice_distributions(rows, weight_detect)
    first = float(sum(q @ r for q, r in zip(dists, rewards, strict=True)))  # Σ E_q[r]
    second = float(sum(q @ r**2 for q, r in zip(dists, rewards, strict=True)))  # Σ E_q[r²]
    return [first, second, len(rows)]


def expected_advantages(
    rows: Sequence[Mapping[str, Any]],
    groups: Sequence[Hashable],
    weight_detect: float = 1.0,
    eps: float = 1e-4,
    stats: Mapping[Hashable, tuple[float, float]] | None = None,
) -> tuple[list[np.ndarray | None], np.ndarray]:
    """``(choice_advantages, expected_rewards_normalised)`` of ``vote_gradient="expected"``.

    Per row: ``Â_k = (r_k − μ_g)/(σ_g + ε)`` over its choices (None without a choice), and the
    normalised expected reward ``(Σ_k q_k r_k − μ_g)/(σ_g + ε)`` for its reasoning tokens, with
    ``μ_g``, ``σ_g`` the mean and (population) std of the group's rewards under the rows' recorded
    choice distributions (rows without a choice enter with their sampled reward). ``stats``: a group's
    ``(μ_g, σ_g)`` when its members are not all here (the ``batch`` group over several processes).

    >>> rows = [{"choice_step": 0, "choice_token_ids": [-1, 7, 8, -1], "completion_token_ids": [7],
    ...          "vote_probs": [0.0, 0.5, 0.5, 0.0], "spy_seat": 2, "reward_detect": 0.0}] * 2
    >>> advantages, reasoning = expected_advantages(rows, [0, 0])
    >>> advantages[0].round(3).tolist(), reasoning.round(3).tolist()
    ([-1.0, 1.0], [0.0, 0.0])
    """
    choices, dists, rewards = _choice_distributions(rows, weight_detect)
    advantages: list[np.ndarray | None] = [None] * len(rows)
    reasoning = np.zeros(len(rows))
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    for g, idx in members.items():
        if stats and g in stats:
            mean, std = stats[g]
        else:
            mean = float(np.mean([dists[i] @ rewards[i] for i in idx]))
            std = float(np.sqrt(np.mean([dists[i] @ (rewards[i] - mean) ** 2 for i in idx])))
        scale = std + eps
        for i in idx:
            reasoning[i] = (dists[i] @ rewards[i] - mean) / scale
            if choices[i] is not None:
                advantages[i] = (rewards[i] - mean) / scale
    return advantages, reasoning


def supervised_targets(rows: Sequence[Mapping[str, Any]]) -> list[np.ndarray | None]:
    """``vote_gradient="supervised"``: weight 1 on the spy's choice (the loss is ``−log q(spy)``), None
    for rows without a choice or whose choices do not include the spy."""
    out: list[np.ndarray | None] = []
    for row in rows:
        choice = Choice.of(row)
        target = None if choice is None else choice_rewards(choice, row["spy_seat"])
        out.append(target if target is not None and target.sum() > 0 else None)
    return out


def _expected_loss(
    logq: torch.Tensor, old_logq: torch.Tensor, coefficients: torch.Tensor, epsilon_low: float, epsilon_high: float
) -> torch.Tensor:
    """The expectation over the choices of the clipped surrogate under the behaviour distribution."""
    ratio = torch.exp(logq - old_logq)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    return -(old_logq.exp() * torch.min(ratio * coefficients, clipped * coefficients)).sum()


def _supervised_loss(
    logq: torch.Tensor, old_logq: torch.Tensor, coefficients: torch.Tensor, epsilon_low: float, epsilon_high: float
) -> torch.Tensor:
    """``−Σ_k c_k log q_k`` (``c`` = 1 on the spy): the labels alone."""
    return -(coefficients * logq).sum()


def _supervised_weights(
    rows: Sequence[Mapping[str, Any]],
    groups: Sequence[Hashable],
    weight_detect: float,
    eps: float,
    stats: Mapping[Hashable, tuple[float, float]] | None,
) -> tuple[list[np.ndarray | None], np.ndarray]:
    """The spy's choice as the only target; nothing but the choice trains (no other token's advantage)."""
    return supervised_targets(rows), np.zeros(len(rows))


Weights = Callable[..., tuple[list[np.ndarray | None], np.ndarray]]  # (rows, groups, weight_detect, eps, stats)
ChoiceLoss = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, float], torch.Tensor]


@dataclass(frozen=True)
class VoteGradient:
    """A ``vote_gradient``: how a vote's choice becomes a gradient (the module docstring's three).

    ``weights(rows, groups, weight_detect, eps, stats)``: per vote the coefficients of its choices
    (None for a vote without a choice) and the advantage of its other tokens, normalised per group
    (``stats``: a group's global ``(mean, std)`` when its votes are spread over processes). ``loss(logq,
    old_logq, coefficients, epsilon_low, epsilon_high)``: the vote's loss at its choice token.
    ``moments(rows, weight_detect)``: ``[Σ m1, Σ m2, n]`` of the rewards that normalise a ``batch``
    group, when they are not the sampled rewards. ``weights`` and ``loss`` both None: the sampled
    choice trains like any other token with the vote's group-normalised advantage (the paper's
    estimator). ``exact_distribution``: the recorded distribution must be the one the vote was drawn
    from (temperature 1, top_p 1).
    """

    weights: Weights | None = None
    loss: ChoiceLoss | None = None
    moments: Callable[[Sequence[Mapping[str, Any]], float], list[float]] | None = None
    exact_distribution: bool = False

    @property
    def scores_choices(self) -> bool:
        """Whether it needs each vote's choice step and distribution (a constrained vote, ``hf`` rollouts)."""
        return self.loss is not None


VOTE_GRADIENTS: Registry[VoteGradient] = Registry("vote_gradient")


def register_vote_gradient(name: str, gradient: VoteGradient) -> VoteGradient:
    """Make ``gradient`` the ``vote_gradient`` called ``name`` (the ``SpyRLConfig`` field ``advantages.vote_gradient``)."""
    if (gradient.weights is None) != (gradient.loss is None):
        raise ValueError(f"vote gradient {name!r} needs both weights and loss, or neither (the sampled form)")
    return VOTE_GRADIENTS.register(name, gradient)


def vote_gradient_of(name: str) -> VoteGradient:
    return VOTE_GRADIENTS.of(name)


register_vote_gradient("sampled", VoteGradient())
register_vote_gradient(
    "expected", VoteGradient(expected_advantages, _expected_loss, expected_moments, exact_distribution=True)
)
register_vote_gradient("supervised", VoteGradient(_supervised_weights, _supervised_loss))


def choice_loss(
    logq: torch.Tensor,
    old_logq: torch.Tensor,
    coefficients: torch.Tensor,
    mode: str,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
) -> torch.Tensor:
    """The loss of one vote at its choice token (a scalar) under the vote gradient ``mode``: for
    ``expected``, the expectation over the choices of the clipped surrogate under the behaviour
    distribution ``exp(old_logq)``; for ``supervised``, ``−Σ_k c_k log q_k`` (``c`` = 1 on the spy).
    ``coefficients``: ``Â_k`` or the targets, (C,).

    >>> logq = torch.log(torch.tensor([0.25, 0.75]))
    >>> float(choice_loss(logq, logq, torch.tensor([-1.0, 1.0]), "expected"))
    -0.5
    """
    gradient = vote_gradient_of(mode)
    if gradient.loss is None:
        raise ValueError(f"vote_gradient {mode!r} has no choice loss: its sampled choice trains like any token")
    return gradient.loss(logq, old_logq, coefficients, epsilon_low, epsilon_high)
