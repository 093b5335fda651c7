"""The evaluation ledger: one JSON line for every scoring of a model on an evaluation set.

A held-out set that is scored again and again while a method is tuned stops being held out: the
number that gets reported is the best of many looks. The ledger makes the looks a record instead of
a memory. Every scoring path appends one line (``spyrl.evaluation.leaderboard.run_leaderboard``,
:func:`spy_env.heldout.evaluate_heldout` and through it the trainer's periodic held-out evaluation,
``spyrl eval``'s math benchmarks), and ``spyrl ledger`` counts the looks per set. A caller says who
looks and where it is written down with one :class:`Look` record (``look=``).

One line (a :class:`LedgerEntry`)::

    {"time": "2025-05-01T12:00:00+00:00", "set": "detect-v1", "set_sha256": "9cbe...",
     "model": "hf:runs/a/checkpoints/iter_00010/model", "recipe": "5f1c0a...",
     "result": {"metric": "detection_accuracy", "mean": 0.41, "low": 0.32, "high": 0.5, "n": 100},
     "command": ["spyrl", "leaderboard", "detect", ...], "preregistration": null}

- ``set_sha256`` fingerprints what was scored: a leaderboard set's file; held-out games, the sorted
  document ids, the number of games, the seed and the game config (:func:`fingerprint` of them); a
  math benchmark, its items.
- ``recipe`` (:func:`recipe_hash`): the first 16 hex digits of the SHA-256 of the training config a
  trained model carries (the ``config`` of a checkpoint's ``trainer_state.json``, found from the
  checkpoint folder or its ``model/`` folder), else of the model spec itself.
- ``command``: the command line, when the scoring ran from one; ``preregistration``: the
  pre-registration's path in its repository and commit (:mod:`spy_env.confirm`), or null.

Where (:func:`ledger_path`): an explicit ``ledger=`` path (``--ledger PATH``), else the environment
variable ``SPYRL_LEDGER``, else ``ledger.jsonl`` in the spyrl cache folder (``$SPYRL_CACHE``, else
``$XDG_CACHE_HOME/spyrl``, else ``~/.cache/spyrl``). ``SPYRL_LEDGER=off``, ``--ledger off`` or
``ledger=False`` turns it off. A line is appended whole and flushed (:func:`spy_env.io.open_append`:
never through a link; a FIFO or a folder is refused like any other output).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from spy_env.io import check_output_file, open_append, parse_json, read_folder_file, read_lines

__all__ = [
    "LEDGER_ENV",
    "Ledger",
    "LedgerEntry",
    "Look",
    "SetLooks",
    "append_entry",
    "cache_dir",
    "fingerprint",
    "headline",
    "ledger_path",
    "looks",
    "read_ledger",
    "recipe_hash",
    "set_looks",
    "training_config",
]

LEDGER_ENV = "SPYRL_LEDGER"
OFF = "off"
LEDGER_FILE = "ledger.jsonl"
MAX_LINE_BYTES = 1 << 20  # a line is a few hundred bytes; a long command line stays far below this
MAX_TRAINER_STATE_BYTES = 64 << 20  # trainer_state.json: iteration, scheduler, config (tensors live beside it)
TRAINER_STATE = "trainer_state.json"  # what trainers.checkpoint writes into every checkpoint

# Where a scoring writes: a path, False (off) or None (SPYRL_LEDGER, else the cache folder's ledger).
Ledger = str | os.PathLike | bool | None


def cache_dir() -> Path:
    """spyrl's cache folder: ``$SPYRL_CACHE``, else ``$XDG_CACHE_HOME/spyrl``, else ``~/.cache/spyrl``."""
    root = os.environ.get("SPYRL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "spyrl"
    )
    return Path(root)


def ledger_path(ledger: Ledger = None, *, check: bool = True) -> Path | None:
    """The ledger file a scoring appends to, or ``None`` when the ledger is off.

    ``ledger``: a path; ``False`` or ``"off"`` for none; ``None`` (or ``True``) for ``$SPYRL_LEDGER``
    (``off`` there turns it off too), else ``ledger.jsonl`` in :func:`cache_dir`. With ``check``, a
    ledger that is a link, a folder, a FIFO or a device is a ``ValueError`` naming it (a scoring checks
    before its work, so a ledger it cannot write never costs the work).
    """
    if ledger is False:
        return None
    chosen = os.environ.get(LEDGER_ENV, "") if ledger is None or ledger is True else os.fspath(ledger)
    if chosen.strip().lower() == OFF:
        return None
    path = Path(os.path.expanduser(chosen)) if chosen.strip() else cache_dir() / LEDGER_FILE
    if check:
        check_output_file(path, "ledger")
    return path


# ----------------------------------------------------------------------- hashes
def canonical_json(value: Any) -> str:
    """``value`` as JSON with sorted keys and no spaces: equal values give equal text.

    >>> canonical_json({"b": (1, 2), "a": "é"})
    '{"a":"é","b":[1,2]}'
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def fingerprint(value: Any) -> str:
    """The SHA-256 (hex) of :func:`canonical_json` of ``value``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def recipe_hash(model: str | Mapping[str, Any]) -> str:
    """The first 16 hex digits of the SHA-256 of a training recipe: a training config given as a
    mapping, or the one the trained folder named by the spec ``model`` carries (:func:`training_config`),
    else the spec string itself. A checkpoint evaluated later gives the hash its run's periodic
    evaluations recorded (the same config).

    >>> recipe_hash("heuristic") == recipe_hash("heuristic") != recipe_hash("random")
    True
    """
    if isinstance(model, Mapping):
        return fingerprint(model)[:16]
    config = training_config(model)
    text = canonical_json(config) if config is not None else model
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def training_config(spec: str) -> dict[str, Any] | None:
    """The training config of the trained model a spec names (``hf:PATH``, ``vllm:PATH`` or a path):
    the ``config`` of the ``trainer_state.json`` in the folder (a checkpoint) or beside it (a
    checkpoint's ``model/`` folder); ``None`` when the spec names no such folder, or its
    ``trainer_state.json`` holds no ``config`` mapping (another trainer's). The file is read as any file
    of a user's folder (:func:`spy_env.io.read_folder_file`: no link, bounded); one that is not JSON is a
    ``ValueError`` naming it."""
    for candidate in dict.fromkeys((spec, spec.partition(":")[2])):
        if not candidate or not os.path.isdir(candidate):
            continue
        for folder in (Path(candidate), Path(candidate).parent):
            data = read_folder_file(folder, TRAINER_STATE, max_bytes=MAX_TRAINER_STATE_BYTES)
            if data is None:
                continue
            state = parse_json(data, f"{folder / TRAINER_STATE}")
            config = state.get("config") if isinstance(state, dict) else None
            if isinstance(config, dict):  # else another trainer's file (transformers' Trainer writes one too)
                return config
    return None


# ------------------------------------------------------------------------ write
def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def headline(metric: str, mean: float, low: float, high: float, n: int) -> dict[str, Any]:
    """A look's ``result``: the headline metric's name, mean and interval over ``n`` units (NaN as null).

    >>> headline("detection_accuracy", 0.5, float("nan"), 0.75, 4)
    {'metric': 'detection_accuracy', 'mean': 0.5, 'low': None, 'high': 0.75, 'n': 4}
    """
    return {"metric": metric, "mean": _finite(mean), "low": _finite(low), "high": _finite(high), "n": int(n)}


@dataclass(frozen=True)
class LedgerEntry:
    """One line of the ledger: one scoring of a model on an evaluation set (see the module docstring)."""

    set: str
    set_sha256: str
    model: str
    recipe: str
    result: Mapping[str, Any]  # :func:`headline`
    command: Sequence[str] | None = None
    preregistration: Mapping[str, str] | None = None
    time: str = field(default_factory=_now)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["result"], out["command"] = dict(self.result), None if self.command is None else list(self.command)
        out["preregistration"] = None if self.preregistration is None else dict(self.preregistration)
        return {"time": out.pop("time"), **out}


def append_entry(entry: LedgerEntry, ledger: Ledger = None) -> Path | None:
    """Append ``entry`` to the ledger (:func:`ledger_path`) as one flushed line; returns the file, or
    ``None`` when the ledger is off."""
    path = ledger_path(ledger)
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(entry.to_dict(), ensure_ascii=False, allow_nan=False) + "\n"
    with open_append(path, "ledger") as f:
        f.write(line.encode("utf-8"))  # one write of the whole line: lines of concurrent writers never interleave
        f.flush()
    return path


@dataclass(frozen=True)
class Look:
    """Who looks and where it is written down: how a scoring is recorded, passed whole to every scoring
    path (``look=``). Every field has a default, so ``Look()`` records under the scoring's own name for the
    model in the default ledger."""

    model: str | None = None  # the model's name in the ledger (default: the scoring's: a spec, the policies' names)
    recipe: Mapping[str, Any] | None = None  # its training config, when the caller holds it (else found from model)
    ledger: Ledger = None  # where: a path, False (off) or None (SPYRL_LEDGER, else the cache's): ledger_path
    command: Sequence[str] | None = None  # the command line that ran the scoring

    def check(self, model: str) -> None:
        """Before the work: ``ValueError`` for a ledger that cannot be written or a trained folder whose
        recipe cannot be read (``model``: the scoring's name for the model)."""
        if ledger_path(self.ledger) is not None:
            self.recipe_of(model)

    def recipe_of(self, model: str) -> str:
        """:func:`recipe_hash` of the training config, else of the model's name."""
        return recipe_hash(self.recipe if self.recipe is not None else self.model or model)

    def record(
        self,
        set_name: str,
        set_sha256: str,
        model: str,
        result: Mapping[str, Any],
        preregistration: Mapping[str, str] | None = None,
    ) -> Path | None:
        """Append this look at ``set_name`` (fingerprint ``set_sha256``) by ``model`` (the scoring's name for
        it; :attr:`model` wins) scoring ``result`` (:func:`headline`); returns the file, or ``None`` when off."""
        name = self.model or model
        entry = LedgerEntry(set_name, set_sha256, name, self.recipe_of(name), result, self.command, preregistration)
        return append_entry(entry, self.ledger)


# ------------------------------------------------------------------------- read
_FIELDS = {"time": str, "set": str, "model": str}


def read_ledger(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The looks of a ledger file, in order. A line longer than :data:`MAX_LINE_BYTES`, one that is not
    JSON, or one that is not a look (an object with ``time``, ``set`` and ``model`` strings) is a
    ``ValueError`` naming the file and the line."""
    entries = []
    for number, line in read_lines(path, "ledger", max_line_bytes=MAX_LINE_BYTES):
        where = f"ledger {str(path)!r} line {number}"
        entry = parse_json(line, where)
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), t) for k, t in _FIELDS.items()):
            raise ValueError(f"{where} is not a look (an object with time, set and model strings)")
        entries.append(entry)
    return entries


@dataclass(frozen=True)
class SetLooks:
    """How often one set was looked at: looks, distinct models, and the first and last look's time."""

    set: str
    looks: int
    models: int
    first: str
    last: str


def set_looks(entries: Iterable[Mapping[str, Any]]) -> list[SetLooks]:
    """One :class:`SetLooks` per set of ``entries`` (looks read by :func:`read_ledger`), in the order
    each set was first looked at."""
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for entry in entries:
        grouped.setdefault(entry["set"], []).append(entry)
    return [
        SetLooks(
            name,
            len(group),
            len({e["model"] for e in group}),
            min(e["time"] for e in group),
            max(e["time"] for e in group),
        )
        for name, group in grouped.items()
    ]


def looks(entries: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{set: number of looks}``.

    >>> looks([{"set": "detect-v1", "model": "a", "time": "t"}] * 2 + [{"set": "gsm8k", "model": "a", "time": "t"}])
    {'detect-v1': 2, 'gsm8k': 1}
    """
    return {s.set: s.looks for s in set_looks(entries)}
