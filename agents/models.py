"""Models named by a word instead of a path: ``tiny`` and ``smollm2``, both made locally (no download).

:func:`resolve_model_path` is the one place such a name becomes a folder, for the ``smollm2``
backend and for a trainer's ``model`` alike.
"""

from __future__ import annotations

import os

__all__ = ["LOCAL_MODELS", "resolve_model_path"]

LOCAL_MODELS = ("tiny", "smollm2")  # agents.tiny builds the first, agents.smollm2 converts the second


def resolve_model_path(model: str, *, tiny_dir: str | os.PathLike | None = None, seed: int = 0) -> str:
    """The folder (or hub id) a model name stands for; names not in :data:`LOCAL_MODELS` pass through.

    ``tiny`` is built in ``tiny_dir`` with ``seed`` unless it is already there; ``smollm2`` is
    converted on first use (about 20 s) and cached.

    >>> resolve_model_path("Qwen/Qwen3-4B-Instruct-2507")
    'Qwen/Qwen3-4B-Instruct-2507'
    """
    if model == "tiny":
        if tiny_dir is None:
            raise ValueError("the 'tiny' model is built in a folder: pass tiny_dir")
        from agents.tiny import build_tiny_model

        return str(build_tiny_model(tiny_dir, seed=seed))
    if model == "smollm2":
        from agents import smollm2

        return str(smollm2.converted_path())
    return model
