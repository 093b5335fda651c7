"""Shared prompt prefixes, encoded once: a batch's prompts grouped by common prefix, each prefix prefilled once.

In a game every civilian holds the same copy and reads the same performances, and the built-in
templates put what differs between seats last (:mod:`spy_env.prompts`). So a vote batch of one
5-player game is two long prefixes (a civilian's, the spy's) followed by short tails, and the
prefill, which dominates a CPU rollout, need not be paid once per seat.

:func:`prefix_groups` partitions a batch into groups whose prompts share a prefix (optimal among
partitions into runs of the prompts in sorted order). :func:`prefill` encodes each group's prefix
once at batch size 1, repeats its keys and values for the group's rows, encodes the rows' own
tokens, and merges the groups into one left-padded batch whose cache covers every prompt token but
the last, ready for ``model.generate``. :func:`grouped_logits` is the same forward for a batch that
only needs its last positions' logits (one-forward votes), with gradients when asked.

Rows laid out as ``[padding][group prefix][padding][own tokens]``: the attention mask hides both
paddings, positions count only real tokens, so each row sees exactly its own prompt.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Sequence
from typing import Any

import torch

from agents.tensors import left_pad

__all__ = ["cache_argument", "grouped_logits", "output_cache", "prefill", "prefix_groups", "reserve"]

# the cost of one more group (its own forward call), in prompt tokens not recomputed
GROUP_COST = 32


def cache_argument(model: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``model``'s forward and ``generate``: ``cache`` from transformers 5,
    ``past_key_values`` before (the old name still works in 5 but logs a deprecation once)."""
    return {"cache" if _reads_cache(type(model)) else "past_key_values": cache}


@functools.cache
def _reads_cache(model_type: type) -> bool:
    """Whether ``model_type.forward`` names its KV cache ``cache`` (once per class: it is on every forward)."""
    try:
        return "cache" in inspect.signature(model_type.forward).parameters
    except (AttributeError, TypeError, ValueError):  # not introspectable: the name every version still accepts
        return False


def output_cache(output: Any) -> Any:
    """The KV cache a forward returned: ``output.cache`` in transformers 5, ``past_key_values`` before."""
    cache = getattr(output, "cache", None)
    return output.past_key_values if cache is None else cache


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def prefix_groups(
    prompts: Sequence[Sequence[int]], *, keep: int = 1, min_shared: int = 16
) -> list[tuple[list[int], int]]:
    """``[(rows, shared), ...]``: a partition of the prompts into groups whose ``shared`` first tokens
    are equal, leaving each prompt at least ``keep`` tokens of its own.

    Prompts are sorted; a dynamic programme over runs of the sorted order maximises the prompt
    tokens not recomputed, minus :data:`GROUP_COST` per group. A prompt sharing under
    ``min_shared`` tokens with its neighbours is a group of its own (``shared`` = all but ``keep``).

    >>> prefix_groups([[1] * 20 + [2, 3], [9] * 5, [1] * 20 + [4]])
    [([0, 2], 20), ([1], 4)]
    """
    if any(len(p) <= keep for p in prompts):
        raise ValueError(f"every prompt needs more than keep={keep} tokens")
    order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))
    own = [len(prompts[i]) - keep for i in order]  # the most a row may share
    adjacent = [_lcp(prompts[a], prompts[b]) for a, b in itertools.pairwise(order)]
    n = len(order)
    best = [0.0] + [float("-inf")] * n
    start = [0] * (n + 1)
    for end in range(1, n + 1):
        shared = own[end - 1]
        for begin in range(end - 1, -1, -1):  # the run order[begin:end]
            if begin < end - 1:
                shared = min(shared, adjacent[begin], own[begin])
                if shared < min_shared:
                    break
            saved = (end - begin - 1) * shared - GROUP_COST
            if best[begin] + saved > best[end]:
                best[end], start[end] = best[begin] + saved, begin
    groups = []
    end = n
    while end > 0:
        begin = start[end]
        rows = [order[k] for k in range(begin, end)]
        groups.append((sorted(rows), _shared(prompts, rows, keep)))
        end = begin
    return sorted(groups)


def _shared(prompts: Sequence[Sequence[int]], rows: list[int], keep: int) -> int:
    first = prompts[rows[0]]
    return min(min(_lcp(first, prompts[r]) for r in rows), min(len(prompts[r]) - keep for r in rows))


def _group_forward(model: Any, prompts: list[Sequence[int]], shared: int, pad_id: int, *, cut: int, **kwargs: Any):
    """The group's prefix at batch 1, repeated, then its rows' own tokens (all but the last ``cut``).

    Returns ``(ids, mask, cache, output)``: the group's (n, W) ids and mask, its cache (covering
    all but the last ``cut`` columns) and the second forward's output (None when it had no tokens).
    """
    device = next(model.parameters()).device
    n = len(prompts)
    prefix = torch.tensor([list(prompts[0][:shared])], dtype=torch.long)
    cache = output_cache(model(input_ids=prefix.to(device), use_cache=True))
    cache.batch_repeat_interleave(n)
    rest_ids, rest_mask = left_pad([p[shared:] for p in prompts], pad_id)
    ids = torch.cat([prefix.expand(n, shared), rest_ids], dim=1)
    mask = torch.cat([torch.ones(n, shared, dtype=rest_mask.dtype), rest_mask], dim=1)
    width = rest_ids.shape[1] - cut
    output = None
    if width > 0:
        positions = (shared + rest_mask[:, :width].cumsum(-1) - 1).masked_fill(rest_mask[:, :width] == 0, 1)
        output = model(
            input_ids=rest_ids[:, :width].to(device),
            attention_mask=mask[:, : shared + width].to(device),
            position_ids=positions.to(device),
            use_cache=True,
            **cache_argument(model, cache),
            **kwargs,
        )
    return ids, mask, cache, output


class _Reserved:
    """A cache layer's keys or values in a buffer with room to append: a step writes in place
    instead of copying the whole cache (``DynamicLayer`` concatenates). ``buffer[..., :length, :]``
    holds the cached positions."""

    def __init__(self, buffer: torch.Tensor, length: int) -> None:
        self.buffer, self.length = buffer, length

    @classmethod
    def holding(cls, tensor: torch.Tensor, capacity: int) -> _Reserved:
        shape = (*tensor.shape[:-2], max(capacity, tensor.shape[-2]), tensor.shape[-1])
        buffer = tensor.new_zeros(shape)
        buffer[..., : tensor.shape[-2], :] = tensor
        return cls(buffer, tensor.shape[-2])

    def append(self, new: torch.Tensor) -> torch.Tensor:
        end = self.length + new.shape[-2]
        if end > self.buffer.shape[-2]:  # out of room: double it
            grown = self.buffer.new_zeros((*self.buffer.shape[:-2], 2 * end, self.buffer.shape[-1]))
            grown[..., : self.length, :] = self.buffer[..., : self.length, :]
            self.buffer = grown
        self.buffer[..., self.length : end, :] = new
        self.length = end
        return self.buffer[..., :end, :]


def _adopt(layer: Any, keys: _Reserved, values: _Reserved) -> None:
    """Make ``layer`` hold ``keys``/``values`` and append to them in place."""
    if not layer.is_initialized:
        layer.lazy_initialization(keys.buffer, values.buffer)
    layer.keys, layer.values = keys.buffer[..., : keys.length, :], values.buffer[..., : values.length, :]

    def update(key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        layer.keys, layer.values = keys.append(key_states), values.append(value_states)
        return layer.keys, layer.values

    layer.update = update


def reserve(layer: Any, capacity: int) -> None:
    """Make a ``DynamicLayer`` append in place (its ``keys``/``values`` become views of a reserved buffer).

    For sampling and greedy decoding, which only append: cropping or reordering the layer's batch
    afterwards (beam search, assisted decoding) is not supported.
    """
    _adopt(layer, _Reserved.holding(layer.keys, capacity), _Reserved.holding(layer.values, capacity))


def _zeros(like: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """A (batch, heads, length, head_dim) zero buffer in the dtype and device of ``like``."""
    return like.new_zeros((batch, like.shape[1], length, like.shape[-1]))


def prefill(
    model: Any, prompts: Sequence[Sequence[int]], pad_id: int, groups: list[tuple[list[int], int]], *, room: int = 0
) -> tuple[list[int], Any, Any, Any]:
    """``(rows, input_ids, attention_mask, cache)`` for ``model.generate``: the batch in the order
    ``rows`` (the groups one after another), its cache covering every column but the last, with
    ``room`` more positions reserved (the tokens to generate) so that decoding appends in place.

    Each group's keys and values are written once, right-aligned, into the batch's buffers as soon
    as the group is encoded, so at most one group's own cache exists beside them.
    """
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    width = max(shared + max(len(prompts[r]) - shared for r in group) for group, shared in groups)
    rows: list[int] = []
    ids_parts, mask_parts = [], []
    buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
    for group, shared in groups:
        ids, mask, cache, _ = _group_forward(model, [prompts[r] for r in group], shared, pad_id, cut=1)
        if not buffers:  # per layer, zero (masked) wherever a row is padded
            size = width - 1 + room
            buffers = [(_zeros(x.keys, len(prompts), size), _zeros(x.values, len(prompts), size)) for x in cache.layers]
        start, stop = len(rows), len(rows) + len(group)
        for (keys, values), layer in zip(buffers, cache.layers, strict=True):
            begin = width - 1 - layer.keys.shape[-2]
            keys[start:stop, :, begin : width - 1] = layer.keys
            values[start:stop, :, begin : width - 1] = layer.values
        rows += group
        ids_parts.append(torch.nn.functional.pad(ids, (width - ids.shape[1], 0), value=pad_id))
        mask_parts.append(torch.nn.functional.pad(mask, (width - mask.shape[1], 0), value=0))
    merged = DynamicCache(config=model.config)
    for layer, (keys, values) in zip(merged.layers, buffers, strict=True):
        if type(layer) is DynamicLayer:
            _adopt(layer, _Reserved(keys, width - 1), _Reserved(values, width - 1))
        else:  # a sliding-window layer keeps its own update
            layer.update(keys[..., : width - 1, :], values[..., : width - 1, :])
    return rows, torch.cat(ids_parts), torch.cat(mask_parts), merged


def grouped_logits(
    model: Any, prompts: Sequence[Sequence[int]], pad_id: int, groups: list[tuple[list[int], int]], keep: int
) -> torch.Tensor:
    """(B, keep, V) logits of each prompt's last ``keep`` positions, rows in the prompts' order.

    Runs under the caller's grad mode: with gradients, each group's prefix is one graph that
    every row of the group backpropagates into.
    """
    out: list[Any] = [None] * len(prompts)
    for group, shared in groups:
        _, _, _, output = _group_forward(model, [prompts[r] for r in group], shared, pad_id, cut=0, logits_to_keep=keep)
        for k, r in enumerate(group):
            out[r] = output.logits[k]
    return torch.stack(out)
