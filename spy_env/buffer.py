"""The episode buffer: one row per (game, round, stage, player), saved as a ``datasets.Dataset``.

This is what the trainer consumes and what a user inspects (``spyrl replay FILE``). Rows carry
the prompt messages, the completion with its token ids and logprobs, every reward component,
violations, and the game's truth (spy seat, role) once the game is over.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from spy_env.io import atomic_path

__all__ = ["COLUMNS", "EpisodeBuffer", "features"]

# column -> (datasets feature spec, default)
COLUMNS: dict[str, tuple[Any, Any]] = {
    "run_id": ("string", ""),
    "game_id": ("int64", 0),
    "game_seed": ("int64", 0),
    "document_id": ("string", ""),
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
        """Read a buffer written by :meth:`save` (through ``datasets``)."""
        from datasets import load_dataset

        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"episode buffer {str(path)!r} does not exist")
        if not path.is_file():
            raise ValueError(f"episode buffer {str(path)!r} is not a file")
        if path.stat().st_size == 0:
            raise ValueError(f"episode buffer {str(path)!r} is empty")
        builder = "parquet" if _kind(path) == "parquet" else "json"
        try:
            with _quiet("datasets"):  # its own log line would repeat the error below
                dataset = load_dataset(builder, data_files=str(path), split="train", features=features())
        except Exception as e:  # whatever the parser throws, the file is the problem, not the caller
            cause = e.__cause__ or e
            reason = " ".join(f"{type(cause).__name__}: {cause}".split())[:300]
            raise ValueError(f"episode buffer {str(path)!r} is not a readable {builder} file ({reason})") from e
        return cls.from_dataset(dataset)


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
