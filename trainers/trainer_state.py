"""A checkpoint's trainer state as data, never a pickle: ``trainer_state.json`` (iteration, scheduler,
stage controller, RAE baselines, Python and NumPy RNG states as lists of ints, the config, the
optimizer's skeleton) and ``trainer_state.safetensors`` (the optimizer's tensors and torch's RNG
states). :mod:`trainers.checkpoint` writes and reads them inside a checkpoint folder.

A checkpoint's files are checked against its manifest before they are read, but whoever forges a
checkpoint can write its manifest too. So every field of the JSON is checked for what it must hold
when it is read, and a field that cannot be restored is a :class:`CheckpointError` naming the file
and the field: never an error from deep in a library (``expected non-negative integer`` from the seed
of a forged ``iteration``) or a traceback.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spy_env.io import parse_json

__all__ = ["FORMAT", "STATE_FILE", "TENSORS_FILE", "CheckpointError", "read_state", "restoring", "write_state"]

STATE_FILE = "trainer_state.json"
TENSORS_FILE = "trainer_state.safetensors"
FORMAT = 2  # 1: trainer_state.pt (pickle), no longer read


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: missing, altered, corrupted or non-finite."""


def _jsonable(value: Any) -> Any:
    """JSON-safe copy: tuples → lists, NumPy scalars → Python numbers (floats round-trip exactly)."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value


def write_state(folder: Path, state: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    (folder / STATE_FILE).write_text(json.dumps(_jsonable(state), indent=1), encoding="utf-8")
    save_file(dict(tensors), str(folder / TENSORS_FILE))


def read_state(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The JSON state and the tensors of a verified checkpoint (no pickle anywhere), each field of the
    JSON of the kind it must be (:data:`FIELDS`)."""
    from safetensors.torch import load_file

    path = folder / STATE_FILE
    try:
        state = parse_json(path.read_text(encoding="utf-8"), str(path))
        tensors = load_file(str(folder / TENSORS_FILE))
    except FileNotFoundError as e:
        raise CheckpointError(f"{e.filename} is missing; refusing to resume from {folder}") from e
    except Exception as e:  # any parse failure of these files means a corrupt checkpoint
        raise CheckpointError(f"{path} or {TENSORS_FILE} cannot be read ({e})") from e
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a spyrl checkpoint state (format {FORMAT})")
    for field, (kind, valid) in FIELDS.items():
        if not valid(state.get(field)):
            raise CheckpointError(f"{path}: field {field!r} must be {kind}, got {repr(state.get(field))[:60]}")
    return state, tensors


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


# What each field of trainer_state.json holds (the parts' own ``load_state_dict`` check their insides)
FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "iteration": ("a non-negative integer", _count),
    "metrics_rows": ("a non-negative integer", _count),
    "distributed": ("true or false", lambda value: isinstance(value, bool)),
    "optimizer": ("an object or null", lambda value: value is None or isinstance(value, dict)),
    **{
        name: ("an object", lambda value: isinstance(value, dict)) for name in ("scheduler", "controller", "rae", "rng")
    },
}


@contextlib.contextmanager
def restoring(path: Path, field: str) -> Iterator[None]:
    """The block restores ``field`` of the state file ``path``: what it cannot restore (a forged value a
    library refuses) is a :class:`CheckpointError` naming the file and the field."""
    try:
        yield
    except (KeyError, TypeError, ValueError, OverflowError, IndexError, RuntimeError) as e:
        raise CheckpointError(f"{path}: field {field!r} cannot be restored ({type(e).__name__}: {e})") from e
