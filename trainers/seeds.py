"""Named seed streams: everything random in training derives from ``(seed, step, stream)``.

That is what makes a resumed run identical to an uninterrupted one: an iteration's games, its
sampling and its mini-batch order depend on the run's seed and the iteration alone.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

__all__ = ["SeedStream", "seed_for"]


class SeedStream(IntEnum):
    """What a derived seed is for (the value enters the seed, so it never changes)."""

    GAMES = 0  # the runner's games of an iteration: documents, spy seats, masks
    SAMPLING = 1  # the rollout policy's sampling in an iteration
    SHUFFLE = 2  # the mini-batch order of an iteration's update
    EPOCH = 3  # the document order of an epoch (``document_order="epoch"``; the step is the epoch)
    FIXED = 4  # the sampling of the fixed LLM agents (``performer``/``voter``/``civilians``) in an iteration


def seed_for(seed: int, step: int, stream: SeedStream, rank: int = 0) -> int:
    """A 32-bit seed for ``stream`` at ``step`` (an iteration or an epoch) on process ``rank``.

    Rank 0 adds nothing to the entropy: a single process draws what rank 0 of several does.

    >>> seed_for(0, 1, SeedStream.GAMES) == seed_for(0, 1, SeedStream.GAMES, rank=0)
    True
    >>> seed_for(0, 1, SeedStream.GAMES) != seed_for(0, 1, SeedStream.SAMPLING)
    True
    """
    entropy = [seed, step, int(stream)] + ([rank] if rank else [])
    return int(np.random.SeedSequence(entropy).generate_state(1)[0])
