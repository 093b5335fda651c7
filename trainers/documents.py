"""Which documents training plays: the held-out split, and the documents of each iteration."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spy_env.config import GameConfig
from spy_env.corpus import CorpusFilter, Document, load_corpus, split_documents
from trainers.seeds import SeedStream, seed_for

__all__ = ["epoch_documents", "training_documents"]


def training_documents(
    game: GameConfig, heldout_fraction: float, eval_games: int
) -> tuple[tuple[Document, ...], tuple[Document, ...]]:
    """The corpus of ``game`` split into training and held-out documents (by id hash, so a held-out
    document is never played in training, whatever the run); raises ``ValueError`` naming the field
    when a split is empty but needed."""
    documents = load_corpus(
        game.source.corpus,
        CorpusFilter(truncate=game.limits.max_document_chars),
        max_documents=game.source.max_documents,
    )
    train, heldout = split_documents(documents, heldout_fraction)
    if not train:
        raise ValueError(f"SpyRLConfig.heldout_fraction={heldout_fraction} leaves no training document")
    if eval_games and not heldout:
        raise ValueError("SpyRLConfig.eval_games > 0 needs held-out documents: raise heldout_fraction")
    return tuple(train), tuple(heldout)


def epoch_documents(documents: Sequence[Any], per_step: int, step: int, seed: int) -> list[Any]:
    """The ``per_step`` documents of step ``step`` when steps walk seeded epochs of ``documents``.

    Like a shuffled data loader (verl's): every document is played once per epoch before any
    repeats; epoch ``e`` is a permutation seeded by ``(seed, e)``, so a resumed run draws the same.

    >>> steps = [epoch_documents("abcd", 2, k, seed=0) for k in range(4)]
    >>> sorted(steps[0] + steps[1]), sorted(steps[2] + steps[3])
    (['a', 'b', 'c', 'd'], ['a', 'b', 'c', 'd'])
    """
    n = len(documents)
    out = []
    for position in range(step * per_step, (step + 1) * per_step):
        epoch, index = divmod(position, n)
        order = np.random.default_rng(seed_for(seed, epoch, SeedStream.EPOCH)).permutation(n)
        out.append(documents[int(order[index])])
    return out
