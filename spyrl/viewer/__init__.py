"""``spyrl view``: one self-contained, offline HTML page for reading games.

Inputs (detected by :func:`~spyrl.viewer.payload.input_kind`):

- an **episode buffer** (``.parquet``/``.jsonl`` from ``spyrl rollout``, ``play --out``, ...);
- a **training run** folder (``metrics.jsonl``, ``buffers/iter_*.parquet``): curves, stage
  timeline with switch points, held-out evaluation, and the first games of every iteration;
- a **tournament** result (its folder or ``summary.json``): ratings, per-agent metrics, games.

The page lists games with filters (spy caught, violations, agent, degradation, iteration,
document id) and pages of 25; a game is rendered only when opened: the source with what the
spy's copy lost, every performance side by side (the spy marked only after "Reveal the spy"),
who voted whom, every reward component, violations, and per-token log-probs as a heat strip.
See :mod:`spyrl.viewer.payload` for what is reconstructed and :mod:`spyrl.viewer.page` for how
untrusted text is kept inert.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from spy_env.io import write_text
from spyrl.viewer.page import embed_json, render_page
from spyrl.viewer.payload import (
    buffer_payload,
    input_kind,
    load_tokenizer,
    run_payload,
    tournament_payload,
)

__all__ = ["build_payload", "embed_json", "input_kind", "render_page", "write_page"]


def build_payload(
    path: str | os.PathLike,
    *,
    tokenizer: str | os.PathLike | None = None,
    max_games: int | None = None,
    games_per_iteration: int = 6,
) -> dict[str, Any]:
    """The page data for a buffer, run folder or tournament result at ``path``."""
    kind = input_kind(path)
    decode = load_tokenizer(tokenizer) if tokenizer else None
    if kind == "buffer":
        return buffer_payload(path, decode=decode, max_games=max_games)
    if kind == "run":
        return run_payload(path, decode=decode, games_per_iteration=games_per_iteration)
    return tournament_payload(path, decode=decode)


def write_page(
    path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    tokenizer: str | os.PathLike | None = None,
    max_games: int | None = None,
    games_per_iteration: int = 6,
) -> Path:
    """Write the page for ``path`` to ``out`` (atomically) and return ``out``."""
    payload = build_payload(path, tokenizer=tokenizer, max_games=max_games, games_per_iteration=games_per_iteration)
    return write_text(out, render_page(payload))
