"""The episode buffer: one row per (game, round, stage, player), saved as a ``datasets.Dataset``.

This is what the trainer consumes and what a user inspects (``spyrl replay FILE``). Rows carry
the prompt messages, the completion with its token ids and logprobs, every reward component,
violations, and the game's truth (spy seat, role) once the game is over.

A run too long to hold in memory is written game by game (:class:`BufferWriter`, ``spyrl rollout``) and
read back a batch at a time (:func:`stream_rows`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import signal
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from spy_env.io import atomic_path, check_json_depth, open_regular, parse_json, read_lines
from spy_env.policy import token_problem

__all__ = [
    "COLUMNS",
    "BufferWriter",
    "EpisodeBuffer",
    "checked_row",
    "features",
    "read_dataset",
    "reset_args",
    "row_problem",
    "stream_rows",
]

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

# Bytes a JSON line of a buffer may have: a row is a prompt (the document and the performances) with its
# token ids, tens of KB; a file of NUL bytes with no line end is refused after this much, not read whole.
MAX_ROW_BYTES = 64 << 20
# Rows a BufferWriter holds before it writes them out (one parquet row group, as Dataset.to_parquet makes).
ROWS_PER_FLUSH = 1000


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


def _or_default(name: str, value: Any) -> Any:
    """``value``, or the column ``name``'s default (a new list) where it is ``None``."""
    if value is not None:
        return value
    default = COLUMNS[name][1]
    return list(default) if isinstance(default, list) else default


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

    @staticmethod
    def writer(path: str | os.PathLike) -> BufferWriter:
        """A :class:`BufferWriter` of ``path``: :meth:`save` a game at a time, for runs too long to hold."""
        return BufferWriter(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> EpisodeBuffer:
        """Read a buffer written by :meth:`save` (:func:`read_dataset`); every row is range-checked."""
        rows = []
        for number, row in enumerate(read_dataset(path).to_list(), 1):
            rows.append(checked_row(row, path, number))
        return cls(rows)


def checked_row(
    row: Mapping[str, Any], path: str | os.PathLike, number: int, columns: Sequence[str] = ()
) -> dict[str, Any]:
    """``row`` of file ``path`` normalised (to ``columns`` alone, when given), or a ``ValueError`` naming the
    file, the row and the field."""
    row = {name: _or_default(name, row.get(name)) for name in columns} if columns else _normalise(row)
    problem = row_problem(row)
    if problem:
        raise ValueError(f"episode buffer {str(path)!r}, row {number}: {problem}; not a buffer of this game")
    return row


class BufferWriter:
    """Writes a buffer file a game at a time: what :meth:`EpisodeBuffer.save` writes, for a run of any length.

    ``with EpisodeBuffer.writer(path) as out: out.write(rows_of_a_game)``. The rows go to a temporary file
    beside ``path`` every :data:`ROWS_PER_FLUSH` rows (a parquet row group, or JSON lines appended), so memory
    holds that many rows, not the run; the schema is :func:`features`', and the file loads as a saved one does.
    When the block ends the file is completed and replaces ``path`` atomically (:func:`~spy_env.io.atomic_path`).
    When it ends in an exception (Ctrl-C, a crash) the games written so far are kept the same way, whole (a
    game is written with all its rows or not at all), and :attr:`kept` says how many; with none, or when
    writing the file itself failed, ``path`` is left as it was. A Ctrl-C during a write waits for its end.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        _kind(self.path)  # a wrong suffix is refused before any game is played
        self.kept = 0  # games at ``path`` once the block ended
        self._written = [0, 0]  # games, rows in the temporary file
        self._pending: list[list[dict[str, Any]]] = []  # whole games, not yet written
        self._files = contextlib.ExitStack()
        self._sink: _ParquetSink | _JsonLinesSink | None = None
        self._broken = False  # a write failed: the temporary file may hold part of it

    @property
    def games(self) -> int:
        """Games handed to :meth:`write` so far."""
        return self._written[0] + len(self._pending)

    @property
    def rows(self) -> int:
        """Rows handed to :meth:`write` so far."""
        return self._written[1] + sum(len(game) for game in self._pending)

    def __enter__(self) -> BufferWriter:
        tmp = self._files.enter_context(atomic_path(self.path))
        self._sink = _ParquetSink(tmp) if _kind(self.path) == "parquet" else _JsonLinesSink(tmp)
        return self

    def write(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Add one finished game: all its rows."""
        if self._broken:
            raise _failed_before(self.path)
        self._pending.append([_normalise(r) for r in rows])  # one step: an interrupt adds the game or not
        if sum(len(game) for game in self._pending) >= ROWS_PER_FLUSH:
            self.flush()

    def write_games(self, games: Iterable[list[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
        """:meth:`write` each game of ``games`` as it comes and pass its rows on (to a summary of the run)."""
        for rows in games:
            self.write(rows)
            yield from rows

    def flush(self) -> None:
        """Write the games added since the last flush to the temporary file."""
        if not self._pending:
            return
        with _interrupts_held():  # the dataset too: a KeyboardInterrupt inside its __del__ would be lost
            dataset = _dataset([row for game in self._pending for row in game])
            try:
                self._sink.write(dataset)
            except BaseException:
                self._broken = True
                raise
            finally:
                del dataset
            self._written = [self.games, self.rows]
            self._pending = []

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> bool:
        failure = None
        if self._broken and error is None:  # the block went on after a failed write
            failure = _failed_before(self.path)
            kind, error, traceback = OSError, failure, None
        try:
            with _interrupts_held():  # a Ctrl-C now takes effect once the file is at path, or is gone
                self._complete()
                if self._broken or (error is not None and not self._written[0]):
                    self._files.__exit__(kind, error, traceback)  # removes the temporary file: path stays as it was
                else:
                    self._files.close()  # the temporary file replaces path
                    self.kept = self._written[0]
        except BaseException as e:
            self._files.__exit__(type(e), e, e.__traceback__)  # nothing left to do once the file is at path
            raise
        if failure is not None:
            raise failure
        return False

    def _complete(self) -> None:
        """Write the games still held and complete the temporary file (a broken one is only closed)."""
        if self._broken:
            with contextlib.suppress(Exception):
                self._sink.close()
            return
        self.flush()
        self._sink.close()


def _failed_before(path: Path) -> OSError:
    return OSError(errno.EIO, "an earlier write to it failed", str(path))


class _ParquetSink:
    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq

        self._writer = pq.ParquetWriter(str(path), schema=features().arrow_schema)

    def write(self, dataset: Any) -> None:
        self._writer.write_table(dataset.data.table)

    def close(self) -> None:
        self._writer.close()


class _JsonLinesSink:
    def __init__(self, path: Path) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()

    def write(self, dataset: Any) -> None:
        import datasets

        shown = not datasets.are_progress_bars_disabled()
        datasets.disable_progress_bars()  # one bar per flush would flood a long run's output
        try:
            dataset.to_json(self._file, lines=True, force_ascii=False)
        finally:
            if shown:
                datasets.enable_progress_bars()
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _dataset(rows: list[dict[str, Any]]) -> Any:
    from datasets import Dataset

    return Dataset.from_list(rows, features=features())


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C during the block takes effect when it ends: a file is written whole or not at all.

    Only where Python's own SIGINT handler is in place (the main thread of a command; a program with a
    handler of its own keeps it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    held: list[int] = []
    signal.signal(signal.SIGINT, lambda number, frame: held.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


def read_dataset(path: str | os.PathLike):
    """The buffer file at ``path`` as a ``datasets.Dataset``, read from its content every time.

    ``datasets`` caches a file under a key of its path and modification time, so a buffer replaced
    by another with the same mtime (``cp -p``, unzip) would show the old rows: the cache here is a
    temporary folder of this call, and the rows are kept in memory. The file is read once, through
    :func:`_checked_lines`, into a copy in that folder that ``datasets`` parses: a path that is not a regular
    file, a JSON line longer than :data:`MAX_ROW_BYTES` or nested deeper than :data:`spy_env.io.MAX_DEPTH`, or a
    file that is not a readable buffer is a ``ValueError`` naming it.
    """
    from datasets import load_dataset

    path = _existing(path)
    builder = _builder(path)
    with tempfile.TemporaryDirectory(prefix="spyrl-buffer-") as cache:
        copy = Path(cache) / f"buffer.{builder}"
        with open(copy, "wb") as out:
            for chunk in _checked_lines(path, builder):
                out.write(chunk)
        if copy.stat().st_size == 0:
            raise ValueError(f"episode buffer {str(path)!r} is empty")
        with _unreadable(path, builder), _quiet("datasets"):  # its own log line would repeat the error
            return load_dataset(
                builder, data_files=str(copy), split="train", features=features(), cache_dir=cache, keep_in_memory=True
            )


def stream_rows(path: str | os.PathLike, columns: Sequence[str] = ()) -> Iterator[dict[str, Any]]:
    """The rows of the buffer file at ``path``, read :data:`ROWS_PER_FLUSH` at a time: memory holds a batch, not
    the file (the summary of a ``spyrl rollout`` of any length). ``columns``, when given, are the columns each
    row has (a parquet file's others are not read). Typed by :func:`features` and checked as
    :meth:`EpisodeBuffer.load` checks them; a JSON line longer than :data:`MAX_ROW_BYTES` or nested deeper
    than :data:`~spy_env.io.MAX_DEPTH` is a ``ValueError`` naming the file and the line."""
    path = _existing(path)
    names = list(columns or COLUMNS)
    number = 0
    for table in _typed_batches(path, names):
        for row in table.to_pylist():
            number += 1
            yield checked_row(row, path, number, columns)


def _typed_batches(path: Path, names: list[str]) -> Iterator[Any]:
    """The columns ``names`` of the buffer file ``path`` as ``pyarrow`` tables of :func:`features`' types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([features().arrow_schema.field(name) for name in names])
    builder = _builder(path)
    if builder == "parquet":
        with open_regular(path, "episode buffer") as f, _unreadable(path, builder):
            for batch in pq.ParquetFile(f).iter_batches(batch_size=ROWS_PER_FLUSH, columns=names):
                yield pa.Table.from_batches([batch]).cast(schema)
        return
    rows: list[dict[str, Any]] = []
    number = 0
    for number, line in read_lines(path, "episode buffer", max_line_bytes=MAX_ROW_BYTES):
        row = parse_json(line, f"episode buffer {str(path)!r} line {number}")
        if not isinstance(row, dict):
            raise ValueError(f"episode buffer {str(path)!r} line {number} is not a JSON object")
        rows.append({name: row.get(name) for name in names})
        if len(rows) == ROWS_PER_FLUSH:
            with _unreadable(path, builder):
                table = pa.Table.from_pylist(rows, schema=schema)
            yield table
            rows = []
    if not number:
        raise ValueError(f"episode buffer {str(path)!r} is empty")
    with _unreadable(path, builder):
        table = pa.Table.from_pylist(rows, schema=schema)
    yield table


def _existing(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"episode buffer {str(path)!r} does not exist")
    return path


def _builder(path: Path) -> str:
    """The ``datasets`` builder that reads ``path``."""
    return "parquet" if _kind(path) == "parquet" else "json"


def _checked_lines(path: Path, builder: str) -> Iterator[bytes]:
    """The bytes of the regular file ``path`` (:func:`~spy_env.io.open_regular`: a FIFO or a device is a
    ``ValueError``, not a hang), in pieces of bounded size: a JSON buffer's lines, each at most
    :data:`MAX_ROW_BYTES` and nested at most :data:`~spy_env.io.MAX_DEPTH` deep (pyarrow's JSON reader
    recurses in C: 10,000 levels are a segfault, not an error); a parquet file's blocks."""
    what = "episode buffer"
    if builder == "parquet":
        with open_regular(path, what) as f:
            yield from iter(lambda: f.read(1 << 20), b"")
        return
    for number, line in read_lines(path, what, max_line_bytes=MAX_ROW_BYTES):
        try:
            check_json_depth(line, f"{what} {str(path)!r}")
        except ValueError as e:
            raise ValueError(f"{e} (line {number})") from None
        yield line if line.endswith(b"\n") else line + b"\n"


@contextlib.contextmanager
def _unreadable(path: Path, builder: str) -> Iterator[None]:
    """Whatever the parser throws in the block is the file's problem, not the caller's: a ``ValueError`` naming it."""
    try:
        yield
    except Exception as e:
        raise ValueError(f"episode buffer {str(path)!r} is not a readable {builder} file ({_reason(e)})") from e


def _reason(e: BaseException) -> str:
    cause = e.__cause__ or e
    return " ".join(f"{type(cause).__name__}: {cause}".split())[:300]


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
