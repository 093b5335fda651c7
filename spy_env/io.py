"""Files in and out: atomic writes (a crash or an exception leaves the previous file, or none,
never half of one) and the checks on files read from inside an input folder.

A folder a user hands over (a tournament result, a training run) may come from someone else: a
``chart.png`` in it that links to ``~/.ssh/id_rsa`` must not end up embedded in a page. Files
inside such a folder are read only through :func:`folder_file` / :func:`read_folder_file`: a
regular file reached without following a symbolic link, of bounded size. The path the user typed
may itself be a link (that is their choice).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_path",
    "check_tree",
    "folder_file",
    "honour_umask",
    "parse_json",
    "pid_alive",
    "read_folder_file",
    "read_json",
    "remove_stale_temporaries",
    "save_figure",
    "write_text",
]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; it replaces ``path`` only if the block succeeds.

    The file gets the permissions a plain ``open`` would give (``0o666`` less the umask), and
    temporary files left beside ``path`` by a writer that was killed are removed first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path, suffix)
    # the writer's pid in the name tells a later write whether the file is still being written
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_stale_temporaries(path: str | os.PathLike, suffix: str = ".tmp") -> list[Path]:
    """Remove ``.NAME.PID.*SUFFIX`` files beside ``path`` whose writer process is gone."""
    path = Path(path)
    prefix = f".{path.name}."
    removed = []
    with contextlib.suppress(OSError):
        for entry in path.parent.iterdir():
            name = entry.name
            if not (name.startswith(prefix) and name.endswith(suffix)):
                continue
            pid = name[len(prefix) :].split(".", 1)[0]
            if pid.isdigit() and not pid_alive(int(pid)) and entry.is_file():
                entry.unlink(missing_ok=True)
                removed.append(entry)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):  # someone else's process, or not a pid
        return pid > 0
    return True


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask is process-wide and not thread-safe)
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 100) -> Path:
    """Save a matplotlib figure atomically as PNG and close it."""
    import matplotlib.pyplot as plt

    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    return Path(path)


def folder_file(folder: str | os.PathLike, relative: str | os.PathLike) -> Path | None:
    """``folder/relative`` if it is a regular file reached without a symbolic link, ``None`` if it
    does not exist; ``ValueError`` naming it when it, or a folder on the way, is a link or it is
    not a regular file (a FIFO, a device, a folder)."""
    path = Path(folder)
    for part in Path(relative).parts:
        path = path / part
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(mode):
            raise ValueError(
                f"{str(path)!r} is a symbolic link; files inside an input folder are read only when they are "
                "regular files in it"
            )
    if not stat.S_ISREG(mode):
        raise ValueError(f"{str(path)!r} is not a regular file")
    return path


def read_folder_file(folder: str | os.PathLike, relative: str | os.PathLike, *, max_bytes: int) -> bytes | None:
    """The bytes of :func:`folder_file` (``None`` if it does not exist); ``ValueError`` beyond ``max_bytes``."""
    path = folder_file(folder, relative)
    if path is None:
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # a link swapped in after the check
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{str(path)!r} is not a regular file")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{str(path)!r} is larger than {max_bytes} bytes")
    return data


def parse_json(text: str, where: str) -> Any:
    """``json.loads(text)``; malformed or absurdly nested JSON is a ``ValueError`` naming ``where``."""
    try:
        return json.loads(text)
    except RecursionError as e:  # "[[[[..." 50k deep: the decoder recurses per level
        raise ValueError(f"{where} is nested too deeply to be read") from e
    except ValueError as e:
        raise ValueError(f"{where} is not JSON ({e})") from e


def read_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON value of the file ``path`` (a ``what``); errors are a ``ValueError`` naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text") from e
    return parse_json(text, f"{what} {str(path)!r}")


def honour_umask(folder: str | os.PathLike) -> None:
    """Give every file under ``folder`` the permissions a plain ``open`` would (``0o666`` less the
    umask): libraries that write through ``mkstemp`` (safetensors) leave ``0600``."""
    mode = 0o666 & ~_umask()
    for path in Path(folder).rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.chmod(path, mode)


def check_tree(folder: str | os.PathLike, suffixes: frozenset[str], *, free: str | None = None) -> None:
    """Every entry under ``folder`` is a folder or a regular file whose suffix is in ``suffixes``
    (files under the subfolder ``free`` may have any suffix); a symbolic link, to a file or a
    folder, or anything else is a ``ValueError`` naming it."""
    folder = Path(folder)
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(dirpath)
        any_suffix = free is not None and here.relative_to(folder).parts[:1] == (free,)
        for name in [*dirnames, *filenames]:
            path = here / name
            if path.is_symlink():
                raise ValueError(f"{path} is a symbolic link; only regular files are read")
            if name in filenames and not path.is_file():
                raise ValueError(f"{path} is not a regular file")
            if name in filenames and not any_suffix and path.suffix.lower() not in suffixes:
                raise ValueError(f"{path} is not a data file (allowed: {', '.join(sorted(suffixes))})")
