"""Atomic file writes: a crash or an exception leaves the previous file (or none), never half of one."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["atomic_path", "pid_alive", "remove_stale_temporaries", "save_figure", "write_text"]


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
