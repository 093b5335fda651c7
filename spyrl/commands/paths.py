"""The paths a command reads and writes, checked before its work: an output is refused (a folder, a wrong
suffix, an input, an existing file without ``--overwrite``, a parent that cannot be written) or created
empty at once so that two commands never both write it; an input must exist.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spy_env.extras import Extra, require

__all__ = [
    "BUFFER_SUFFIXES",
    "TOURNAMENT_FILES",
    "check_input",
    "check_output",
    "check_output_dir",
    "read_results",
    "release_reservations",
    "require_matplotlib",
]

BUFFER_SUFFIXES = (".parquet", ".jsonl", ".json")
TOURNAMENT_FILES = ("games.parquet", "summary.json", "chart.png")  # what TournamentResult.save writes


# Outputs this command created empty (O_EXCL) before its work, so that a second command writing
# to the same path is refused at once instead of both reporting success; removed at the end if
# still empty (the command failed before writing them).
_RESERVED: list[tuple[Path, int, int]] = []


def _reserve(path: Path, flag: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError as e:
        raise ValueError(
            f"{flag} {path} exists (another command is writing it?); pass --overwrite to replace it"
        ) from e
    st = os.fstat(fd)
    os.close(fd)
    _RESERVED.append((path, st.st_dev, st.st_ino))


def release_reservations() -> None:
    """Remove the outputs this process reserved that are still empty (its command failed before writing them)."""
    while _RESERVED:
        path, dev, ino = _RESERVED.pop()
        try:
            st = path.lstat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (dev, ino) and st.st_size == 0:
            path.unlink(missing_ok=True)


def check_output(
    path: str | os.PathLike,
    *,
    overwrite: bool,
    suffixes: Sequence[str] = (),
    flag: str = "--out",
    inputs: Sequence[str | os.PathLike] = (),
) -> Path:
    """Refuse an output path before any work starts: a folder, a wrong suffix, one of the command's
    ``inputs`` (even with ``overwrite``), an existing file (unless ``overwrite``), or a parent that
    cannot be created or written. A new output is created empty and exclusively now (see
    :data:`_RESERVED`), so two commands never both write it."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a folder; give a file name")
    if path.is_symlink() and not path.exists():
        raise ValueError(f"{flag} {path} is a link to nothing; spyrl does not write through links: remove it")
    if suffixes and path.suffix.lower() not in suffixes:
        raise ValueError(f"{flag} {path} must end in {' or '.join(suffixes)}")
    for source in inputs:
        if path.exists() and Path(source).exists() and os.path.samefile(path, source):
            raise ValueError(f"{flag} {path} is the input {source}; write the output to another file")
    if path.exists() and not overwrite:
        raise ValueError(f"{flag} {path} exists; pass --overwrite to replace it")
    _check_parent(path.parent, flag, path)
    if not path.exists():
        _reserve(path, flag)
    return path


def check_output_dir(folder: str | os.PathLike, names: Sequence[str], *, overwrite: bool, flag: str) -> Path:
    """Like :func:`check_output` for a folder that receives the files ``names``."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {folder} is a file, not a folder")
    if not overwrite:
        taken = [name for name in names if (folder / name).exists()]
        if taken:
            raise ValueError(f"{flag} {folder} already holds {', '.join(taken)}; pass --overwrite")
    _check_parent(folder, flag, folder)
    for name in names:
        if not (folder / name).exists():
            _reserve(folder / name, flag)
    return folder


def _check_parent(parent: Path, flag: str, path: Path) -> None:
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{flag} {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path}: folder {existing} is not writable")


def require_matplotlib(what: str, extra: str = "spyrl[tournament]") -> None:
    """Fail before the work, not after it, when the output needs matplotlib."""
    require([Extra("matplotlib", extra, what)])


def check_input(path: str | os.PathLike, what: str) -> Path:
    """``path``, which must exist (``what`` names it in the error)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{what} {path} does not exist")
    return path


def read_results(path: str) -> dict[str, Any]:
    """A saved ``spyrl eval`` or ``spyrl leaderboard`` results file, checked to hold scored results."""
    from spy_env.io import read_json

    results = read_json(check_input(path, "results file"), "results file")
    entries = results.get("results") if isinstance(results, dict) else None
    if not isinstance(entries, dict) or not all(
        isinstance(r, dict) and all(isinstance(r.get(k), (int, float)) for k in ("accuracy", "n", "k"))
        for r in entries.values()
    ):
        raise ValueError(f"results file {path} is not a saved `spyrl eval` result (no results of accuracy, n, k)")
    return results
