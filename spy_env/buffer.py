"""The episode buffer: one row per (game, round, stage, player), saved as a ``datasets.Dataset``.

This is what the trainer consumes and what a user inspects (``spyrl replay FILE``). Rows carry
the prompt messages, the completion with its token ids and logprobs, every reward component,
violations, and the game's truth (spy seat, role) once the game is over.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from spy_env.io import atomic_path, check_json_depth
from spy_env.policy import token_problem

__all__ = ["COLUMNS", "EpisodeBuffer", "checked_row", "features", "read_dataset", "reset_args", "row_problem"]

# column -> (datasets feature spec, default)
COLUMNS: dict[str, tuple[Any, Any]] = {
    "run_id": ("string", ""),
    "game_id": ("int64", 0),
    "game_seed": ("int64", 0),
    "document_id": ("string", ""),
    "degrade_seed": ("int64", -1),  # with game_seed, document_id and spy_seat: the game's full reset options
    "degrade": ("string", ""),  # the operator that made the spy's copy (spy_env.degrade.DEGRADERS' name)
    "group_id": ("int64", 0),
    "round": ("int32", 0),
    "stage": ("string", ""),
    "seat": ("int32", 0),
    "agent": ("string", ""),
    "role": ("string", ""),
    "agent_name": ("string", ""),
    "policy_version": ("int64", 0),
    "prompt": ([{"role": "string", "content": "string"}], []),
    "completion": ("string", ""),
    "prompt_token_ids": (["int32"], []),
    "completion_token_ids": (["int32"], []),
    "logprobs": (["float32"], []),
    "completion_mask": (["int8"], []),  # 1 = chosen by the model, 0 = forced; empty = all chosen
    "vote_probs": (["float32"], []),  # P(vote for seat 1..n), then P(N/A); empty = unknown
    "choice_step": ("int32", -1),  # completion position of a vote's choice token; -1 = no choice
    "choice_token_ids": (["int32"], []),  # the token picking seat 1..n, then N/A (-1: not a choice); empty = none
    "finish_reason": ("string", ""),
    "error": ("string", ""),
    "violations": (["string"], []),
    "vote": ("int32", -1),
    "votes_received": ("int32", 0),
    "reward": ("float64", 0.0),
    "reward_detect": ("float64", 0.0),
    "reward_perform": ("float64", 0.0),
    "reward_penalty": ("float64", 0.0),
    "spy_seat": ("int32", -1),
    "spy_caught": ("bool", False),
    "trainable": ("bool", True),
}


def features():
    """The buffer's ``datasets.Features`` (fixed, so empty lists and None never change types)."""
    from datasets import Features, Sequence, Value

    def build(spec: Any):
        if isinstance(spec, str):
            return Value(spec)
        if isinstance(spec, list):
            inner = spec[0]
            if isinstance(inner, dict):
                return [{k: Value(v) for k, v in inner.items()}]
            return Sequence(Value(inner))
        raise TypeError(spec)

    return Features({name: build(spec) for name, (spec, _) in COLUMNS.items()})


# The integer columns a game can produce (GameConfig: 3..10 players, 1..10 rounds): a loaded row
# outside them is refused, so that no reader sizes a table by a seat of 2**31 - 1.
MAX_PLAYERS = 10
MAX_ROUNDS = 10
RANGES: dict[str, tuple[int, int]] = {
    "seat": (0, MAX_PLAYERS - 1),
    "spy_seat": (-1, MAX_PLAYERS - 1),
    "vote": (-1, MAX_PLAYERS - 1),
    "votes_received": (0, MAX_PLAYERS),
    "round": (0, MAX_ROUNDS - 1),
    "game_id": (0, 2**53),
    "choice_step": (-1, 2**31 - 1),
}
FINITE = ("reward", "reward_detect", "reward_perform", "reward_penalty")


def row_problem(row: Mapping[str, Any]) -> str | None:
    """Why a (normalised) row cannot come from a game, or ``None``.

    >>> row_problem({"seat": 2**31 - 1}), row_problem({"seat": 2, "vote": -1})
    ('seat 2147483647 is outside 0..9', None)
    >>> row_problem({"reward": float("nan")})
    'reward nan is not a finite number'
    >>> row_problem({"completion_token_ids": [1, 2, 3], "logprobs": [-0.5] * 7})
    'logprobs has 7 entries for 3 completion tokens'
    """
    for name, (low, high) in RANGES.items():
        value = row.get(name)
        if value is not None and not low <= value <= high:
            return f"{name} {value} is outside {low}..{high}"
    for name in FINITE:
        value = row.get(name)
        if value is not None and not math.isfinite(value):
            return f"{name} {value} is not a finite number"
    return token_problem(
        row.get("completion_token_ids") or [],
        row.get("logprobs") or [],
        row.get("completion_mask") or [],
        row.get("vote_probs") or [],
    )


def reset_args(row: Mapping[str, Any]) -> dict[str, Any]:
    """The ``reset`` arguments that re-create a row's game: ``env.reset(**reset_args(row))``.

    With the same :class:`~spy_env.GameConfig` the game's prompts come back exactly; replaying the
    recorded completions in seat order gives its later prompts too.

    >>> reset_args({"game_seed": 7, "document_id": "d", "spy_seat": 2, "degrade_seed": 11})
    {'seed': 7, 'options': {'document_id': 'd', 'spy_seat': 2, 'degrade_seed': 11}}
    """
    missing = [k for k in ("document_id", "spy_seat", "degrade_seed") if row.get(k) in (None, "", -1)]
    if missing:
        raise ValueError(f"row lacks {', '.join(missing)}: it predates exact replays and cannot be re-created")
    options = {
        "document_id": row["document_id"],
        "spy_seat": int(row["spy_seat"]),
        "degrade_seed": int(row["degrade_seed"]),
    }
    return {"seed": int(row["game_seed"]), "options": options}


def _normalise(row: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for name, (_, default) in COLUMNS.items():
        value = row.get(name)
        out[name] = (list(default) if isinstance(default, list) else default) if value is None else value
    return out


class EpisodeBuffer:
    """An append-only list of rows with the fixed :data:`COLUMNS` schema."""

    def __init__(self, rows: Iterable[Mapping[str, Any]] = ()) -> None:
        self.rows: list[dict[str, Any]] = [_normalise(r) for r in rows]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def append(self, row: Mapping[str, Any]) -> None:
        self.rows.append(_normalise(row))

    def extend(self, other: EpisodeBuffer | Iterable[Mapping[str, Any]]) -> None:
        for row in other:
            self.append(row)

    def games(self) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """Rows grouped by ``(run_id, game_id)``, in insertion order."""
        out: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for row in self.rows:
            out.setdefault((row["run_id"], row["game_id"]), []).append(row)
        return out

    def to_dataset(self):
        from datasets import Dataset

        if not self.rows:
            return Dataset.from_dict({name: [] for name in COLUMNS}, features=features())
        return Dataset.from_list(self.rows, features=features())

    @classmethod
    def from_dataset(cls, dataset) -> EpisodeBuffer:
        return cls(dataset.to_list())

    def save(self, path: str | os.PathLike) -> Path:
        """Write to ``.parquet`` or ``.jsonl`` (by suffix), atomically: a crash leaves the old file."""
        path = Path(path)
        kind = _kind(path)
        with atomic_path(path) as tmp:
            dataset = self.to_dataset()
            if kind == "parquet":
                dataset.to_parquet(str(tmp))
            else:
                dataset.to_json(str(tmp), lines=True, force_ascii=False)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> EpisodeBuffer:
        """Read a buffer written by :meth:`save` (:func:`read_dataset`); every row is range-checked."""
        rows = []
        for number, row in enumerate(read_dataset(path).to_list(), 1):
            rows.append(checked_row(row, path, number))
        return cls(rows)


def checked_row(row: Mapping[str, Any], path: str | os.PathLike, number: int) -> dict[str, Any]:
    """``row`` of file ``path`` normalised, or a ``ValueError`` naming the file, the row and the field."""
    row = _normalise(row)
    problem = row_problem(row)
    if problem:
        raise ValueError(f"episode buffer {str(path)!r}, row {number}: {problem}; not a buffer of this game")
    return row


def read_dataset(path: str | os.PathLike):
    """The buffer file at ``path`` as a ``datasets.Dataset``, read from its content every time.

    ``datasets`` caches a file under a key of its path and modification time, so a buffer replaced
    by another with the same mtime (``cp -p``, unzip) would show the old rows: the cache here is a
    temporary folder of this call, and the rows are kept in memory. A file that is not a readable
    buffer, or JSON lines nested deeper than :data:`spy_env.io.MAX_DEPTH`, is a ``ValueError``
    naming it.
    """
    from datasets import load_dataset

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"episode buffer {str(path)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"episode buffer {str(path)!r} is not a file")
    if path.stat().st_size == 0:
        raise ValueError(f"episode buffer {str(path)!r} is empty")
    builder = "parquet" if _kind(path) == "parquet" else "json"
    if builder == "json":  # pyarrow's JSON reader recurses in C: 10,000 levels are a segfault, not an error
        check_json_depth(path.read_bytes(), f"episode buffer {str(path)!r}")
    try:
        with tempfile.TemporaryDirectory(prefix="spyrl-buffer-") as cache, _quiet("datasets"):
            # its own log line would repeat the error below
            return load_dataset(
                builder, data_files=str(path), split="train", features=features(), cache_dir=cache, keep_in_memory=True
            )
    except Exception as e:  # whatever the parser throws, the file is the problem, not the caller
        cause = e.__cause__ or e
        reason = " ".join(f"{type(cause).__name__}: {cause}".split())[:300]
        raise ValueError(f"episode buffer {str(path)!r} is not a readable {builder} file ({reason})") from e


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    log = logging.getLogger(name)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    raise ValueError(f"episode buffer path must end in .parquet or .jsonl, got {str(path)!r}")
