"""Per-token log-probabilities of completions under a causal LM: what the loss's ratios are made of."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agents.tensors import left_pad, right_pad

__all__ = ["pad_to", "selective_logps", "sequence_logps"]


def sequence_logps(
    model: Any,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs of each completion given its prompt.

    Prompts are left-padded and completions right-padded so every completion starts at the same
    column; position ids follow the attention mask (as in generation). Returns ``(logps, mask,
    entropy)`` of shape (B, T).
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
    logps, entropy = selective_logps(logits, input_ids[:, width:], temperature, with_entropy)
    mask = attention[:, width:].to(logps.dtype)
    return logps * mask, mask, entropy


def selective_logps(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0, with_entropy: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log softmax(logits / τ)[target]`` per position (fp32), and the entropy if asked.

    Computed one sequence at a time as ``logit[target] − logsumexp(logits)``, so neither an fp32
    copy of the whole (B, T, V) logits nor a (B, T, V) log-softmax is ever materialised at once
    (with a 150k vocabulary and 4k-token responses those are tens of GB).
    """
    logps, entropies = [], []
    for row_logits, row_targets in zip(logits, targets, strict=True):
        row = row_logits.float() / temperature  # (T, V)
        lse = torch.logsumexp(row, dim=-1)
        logps.append(row.gather(-1, row_targets.unsqueeze(-1)).squeeze(-1) - lse)
        if with_entropy:
            with torch.no_grad():  # H = lse − Σ p·z
                entropies.append(lse - (torch.softmax(row, dim=-1) * row).sum(-1))
    return torch.stack(logps), torch.stack(entropies) if with_entropy else None


def pad_to(values: torch.Tensor, width: int) -> torch.Tensor:
    """A (T_i,) row zero-padded (or cut) to ``width``.

    >>> pad_to(torch.tensor([1.0, 2.0]), 3).tolist(), pad_to(torch.tensor([1.0, 2.0]), 1).tolist()
    ([1.0, 2.0, 0.0], [1.0])
    """
    out = values.new_zeros(width)
    n = min(width, values.shape[0])
    out[:n] = values[:n]
    return out
