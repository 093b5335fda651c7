"""Padding token-id rows into batch tensors, the one way every generation and scoring pass does it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["left_pad", "right_pad"]


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, width: int | None = None) -> tuple[Any, Any]:
    """Rows flush right, padded on their left: ``(ids, mask)``, both (B, W) ``torch.long``.

    ``mask`` is 1 on the rows' own tokens and 0 on padding; ``W`` is ``width`` or the longest row.

    >>> ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6, 7], [0, 0, 8]], [[1, 1, 1], [0, 0, 1]])
    """
    return _pad(rows, pad_id, width, left=True)


def right_pad(rows: Sequence[Sequence[int]], pad_id: int, width: int | None = None) -> tuple[Any, Any]:
    """Rows flush left, padded on their right: ``(ids, mask)``, both (B, W) ``torch.long``.

    >>> ids, mask = right_pad([[5, 6, 7], [8]], pad_id=0, width=4)
    >>> ids.tolist(), mask.tolist()
    ([[5, 6, 7, 0], [8, 0, 0, 0]], [[1, 1, 1, 0], [1, 0, 0, 0]])
    """
    return _pad(rows, pad_id, width, left=False)


def _pad(rows: Sequence[Sequence[int]], pad_id: int, width: int | None, *, left: bool) -> tuple[Any, Any]:
    try:
        import torch
    except ImportError as e:
        raise ImportError("padding token rows needs torch: pip install 'spyrl[hf]'") from e
    width = max((len(row) for row in rows), default=0) if width is None else width
    if any(len(row) > width for row in rows):
        raise ValueError(f"a row of {max(len(row) for row in rows)} tokens does not fit in width {width}")
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if not row:
            continue
        columns = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, columns] = torch.tensor(list(row), dtype=torch.long)
        mask[i, columns] = 1
    return ids, mask
