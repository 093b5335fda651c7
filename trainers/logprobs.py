"""Per-token log-probabilities of completions under a causal LM: what the loss's ratios are made of.

A token chosen among a few allowed ones (a vote's seat, :class:`trainers.choices.Choice`) was drawn
from the model's distribution *renormalised over those tokens*, so that is the log-probability it
gets here: scoring it under the whole vocabulary would add ``∇log P(allowed)`` to its gradient
(SmolLM2 puts only ~35% of its mass on the legal seats after ``<vote>``) and move its ratio with
the mass of tokens that could never be drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from agents.tensors import left_pad, right_pad

if TYPE_CHECKING:
    from trainers.choices import Choice

__all__ = ["SequenceLogps", "pad_to", "selective_logps", "sequence_logps"]


class SequenceLogps(NamedTuple):
    logps: torch.Tensor  # (B, T) per-token log-probs, 0 on padding
    mask: torch.Tensor  # (B, T) 1 on completion tokens
    entropy: torch.Tensor | None  # (B, T) with_entropy
    choices: list[torch.Tensor | None]  # per row: (C,) log-probs of its choices (renormalised), or None


def sequence_logps(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    choices: Sequence[Choice | None] | None = None,
) -> SequenceLogps:
    """Per-token log-probs of each completion given its prompt.

    Prompts are left-padded and completions right-padded so every completion starts at the same
    column; position ids follow the attention mask (as in generation). Returns ``(logps, mask,
    entropy, choices)``, the first three of shape (B, T): at a row's ``choices`` step the
    log-prob is renormalised over the allowed tokens, whose log-probs ``choices`` also returns.
    """
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = left_pad(prompts, pad_id)  # (B, W)
    completion_ids, completion_mask = right_pad(completions, pad_id)  # (B, T)
    width, length = prompt_ids.shape[1], completion_ids.shape[1]
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask, completion_mask], dim=1)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    input_ids, attention, position_ids = (
        input_ids.to(device),
        attention.to(device),
        position_ids.to(device),
    )
    out = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids,
        logits_to_keep=length + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1, :]  # (B, T, V): position t predicts completion token t
    choices = list(choices) if choices is not None else [None] * len(prompts)
    logps, entropy, choice_logps = selective_logps(
        logits, input_ids[:, width:], temperature, with_entropy, choices=choices
    )
    mask = attention[:, width:].to(logps.dtype)
    return SequenceLogps(logps * mask, mask, entropy, choice_logps)


def selective_logps(
    logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    choices: Sequence[Choice | None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, list[torch.Tensor | None]]:
    """``log softmax(logits / τ)[target]`` per position (fp32), the entropy if asked, and each row's
    choice log-probs (its ``choices`` entry: the allowed tokens at one step, renormalised there).

    Computed one sequence at a time as ``logit[target] − logsumexp(logits)``, so neither an fp32
    copy of the whole (B, T, V) logits nor a (B, T, V) log-softmax is ever materialised at once
    (with a 150k vocabulary and 4k-token responses those are tens of GB).
    """
    logps, entropies, choice_logps = [], [], []
    choices = choices if choices is not None else [None] * len(logits)
    for row_logits, row_targets, choice in zip(logits, targets, choices, strict=True):
        row = row_logits.float() / temperature  # (T, V)
        lse = torch.logsumexp(row, dim=-1)
        picked = row.gather(-1, row_targets.unsqueeze(-1)).squeeze(-1) - lse  # (T,)
        allowed = None
        if choice is not None:  # the choice was drawn among its allowed tokens: renormalise over them
            allowed = torch.log_softmax(row[choice.step, list(choice.tokens)], dim=-1)  # (C,)
            at = torch.zeros_like(picked).index_fill(0, torch.tensor([choice.step], device=row.device), 1.0)
            picked = picked * (1 - at) + at * allowed[choice.taken]
        logps.append(picked)
        choice_logps.append(allowed)
        if with_entropy:
            with torch.no_grad():  # H = lse − Σ p·z
                entropies.append(lse - (torch.softmax(row, dim=-1) * row).sum(-1))
    return torch.stack(logps), torch.stack(entropies) if with_entropy else None, choice_logps


def pad_to(values: torch.Tensor, width: int) -> torch.Tensor:
    """A (T_i,) row zero-padded (or cut) to ``width``.

    >>> pad_to(torch.tensor([1.0, 2.0]), 3).tolist(), pad_to(torch.tensor([1.0, 2.0]), 1).tolist()
    ([1.0, 2.0, 0.0], [1.0])
    """
    out = values.new_zeros(width)
    n = min(width, values.shape[0])
    out[:n] = values[:n]
    return out
