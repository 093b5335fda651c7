"""Files in and out: atomic writes (a crash or an exception leaves the previous file, or none,
never half of one) and the checks on files read from inside an input folder.

A folder a user hands over (a tournament result, a training run) may come from someone else: a
``chart.png`` in it that links to ``~/.ssh/id_rsa`` must not end up embedded in a page. Files
inside such a folder are read only through :func:`folder_file` / :func:`read_folder_file`: a
regular file reached without following a symbolic link (nor a hard link to a file elsewhere), of
bounded size. The path the user typed may itself be a link (that is their choice).

Every JSON or YAML text that comes from a file, a server or a command line is read by the bounded
readers here (:func:`parse_json`, :func:`check_json_depth`, :func:`parse_yaml`): nesting deeper
than :data:`MAX_DEPTH` levels, and YAML whose aliases expand to more than :data:`MAX_YAML_SIZE`
values and characters, is a ``ValueError`` naming the text before any parser that recurses in C
(pyarrow's JSON reader, ``datasets``) or any code that walks the value sees it.

A run folder is written by one process at a time: :func:`lock_run`. Outputs are written by
:func:`atomic_path` / :func:`write_text` / :func:`atomic_folder`, which never write through a link
planted at the output path, leave nothing half-written behind and name the output when a write fails
(a full disk); a file appended to is opened by :func:`open_append`, never through a link. ``--overwrite``
replaces a folder only when it is what the command writes (:func:`refuse_existing_folder`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

__all__ = [
    "MAX_DEPTH",
    "MAX_YAML_CHARS",
    "MAX_YAML_SIZE",
    "SAVED_MODEL",
    "FolderKind",
    "RunLock",
    "atomic_folder",
    "atomic_path",
    "check_json_depth",
    "check_output_file",
    "check_tree",
    "folder_file",
    "honour_umask",
    "lock_run",
    "open_append",
    "open_regular",
    "parse_json",
    "parse_yaml",
    "pid_alive",
    "read_folder_file",
    "read_json",
    "read_lines",
    "read_regular",
    "refuse_existing",
    "refuse_existing_folder",
    "refuse_existing_outputs",
    "refuse_links",
    "remove_stale_temporaries",
    "save_figure",
    "save_pretrained",
    "write_text",
    "writing",
]

# Nesting a JSON or YAML value may have. Everything spyrl reads is at most 5 deep (a buffer row's
# prompt: row > list > message > text); parsers that recurse in C crash the process near 10,000.
MAX_DEPTH = 64
# Values plus characters of its strings a YAML text may stand for once its aliases are expanded
# (a config is about 10,000; a config whose game.corpus lists its documents, about its length).
MAX_YAML_SIZE = 4_000_000
# Characters of a YAML text (a full config is about 10 KB).
MAX_YAML_CHARS = 1 << 20


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; it replaces ``path`` only if the block succeeds.

    The file gets the permissions a plain ``open`` would give (``0o666`` less the umask), and
    temporary files left beside ``path`` by a writer that was killed are removed first. A write that
    fails (a full disk) leaves no temporary file and is an ``OSError`` naming ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path, suffix)
    # the writer's pid in the name tells a later write whether the file is still being written
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        with writing(path, tmp):
            yield Path(tmp)
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def writing(path: str | os.PathLike, *written: str | os.PathLike) -> Iterator[None]:
    """A block that writes ``path``: an ``OSError`` in it that names no file, or one of the files
    ``written`` on the way (a temporary file, a file in a staging folder), becomes one naming ``path``,
    so a write that fails for want of space says which output it was, not ``[Errno 28]`` alone. An
    error about another file is left as it is, and so is every other error but a Rust library's I/O
    error (safetensors, tokenizers), which becomes an ``OSError`` naming ``path`` too."""
    try:
        yield
    except OSError as e:
        if e.filename is not None and not any(_inside(e.filename, w) for w in written):
            raise
        if e.errno is None:  # a library's own error (pyarrow's): its message, and the path
            raise OSError(f"cannot write {str(path)!r}: {e}") from e
        raise OSError(e.errno, e.strerror or str(e), str(path)) from e
    except Exception as e:
        # Rust's std::io::Error, which those libraries wrap in their own exception, is only text
        found = _RUST_IO_ERROR.search(str(e))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from e


_RUST_IO_ERROR = re.compile(r"\(os error (\d+)\)")


def _inside(name: str | os.PathLike, written: str | os.PathLike) -> bool:
    """Whether the file ``name`` is ``written`` or inside it (a file of a staging folder)."""
    name, written = os.fspath(name), os.fspath(written)
    return name == written or name.startswith(written.rstrip(os.sep) + os.sep)


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


def refuse_existing(path: str | os.PathLike, what: str = "output") -> None:
    """``ValueError`` if anything (a file, a folder, a link, even a dangling one) is at ``path``."""
    if os.path.lexists(path):
        raise ValueError(f"{what} {str(path)!r} exists; pass --overwrite to replace it")


@dataclass(frozen=True)
class FolderKind:
    """What one kind of :func:`atomic_folder` write puts in its folder, so that ``--overwrite`` replaces
    such a folder and nothing else: a folder every entry of which is a file named by ``files``, one of
    them among ``required`` (or an empty folder)."""

    name: str  # what such a folder is, in a message
    files: re.Pattern[str]
    required: tuple[str, ...]

    def problem(self, folder: Path) -> str | None:
        """Why ``folder`` is not one of these, in words (``None`` if it is)."""
        if folder.is_symlink():
            return "is a symbolic link"
        if not folder.is_dir():
            return "is not a folder"
        names = sorted(os.listdir(folder))
        for name in names:
            if (folder / name).is_dir() and not (folder / name).is_symlink():
                return f"holds the folder {name!r}"
            if not self.files.fullmatch(name):
                return f"holds {name!r}"
        if names and not set(names) & set(self.required):
            return f"holds none of {', '.join(self.required)}"
        return None


# What transformers' and peft's ``save_pretrained`` write into a model folder (config, weights or their
# shards and index, tokenizer, chat template, adapter, model card); a link among them is removed with
# the folder, never followed.
SAVED_MODEL = FolderKind(
    "a model folder written by save_pretrained",
    re.compile(
        r"(adapter_)?config\.json|generation_config\.json|(adapter_)?model(-\d+-of-\d+)?\.safetensors"
        r"|model\.safetensors\.index\.json|tokenizer(_config)?\.json|special_tokens_map\.json"
        r"|added_tokens\.json|vocab\.json|merges\.txt|tokenizer\.model|chat_template\.(jinja|json)|README\.md"
    ),
    ("config.json", "adapter_config.json"),
)


def refuse_existing_folder(
    path: str | os.PathLike, *, overwrite: bool, kind: FolderKind = SAVED_MODEL, what: str = "output folder"
) -> None:
    """``ValueError`` naming ``path`` if anything is there, unless ``overwrite`` and it is a folder of
    ``kind``: ``--overwrite`` replaces what such a command wrote before, never a folder of someone's
    own files (a thesis), a link or a file."""
    path = Path(path)
    if not os.path.lexists(path):
        return
    if not overwrite:
        refuse_existing(path, what)
    problem = kind.problem(path)
    if problem is not None:
        raise ValueError(
            f"{what} {str(path)!r} {problem}; --overwrite replaces only {kind.name}: move it away or choose "
            "another folder"
        )


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` atomically (:func:`atomic_path`); a link at ``path`` is replaced, never followed."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def check_output_file(path: str | os.PathLike, what: str) -> None:
    """``ValueError`` naming ``path`` when what is there must not be written on: a symbolic link
    (dangling or not: the write would land outside the output's folder), a folder, a FIFO, a device, or
    a file with other hard links (the write would change it under its other names too). Nothing there
    is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    _refuse_foreign_output(Path(path), st, what)


def refuse_links(folder: str | os.PathLike, names: Iterable[str]) -> None:
    """``ValueError`` naming the first of ``folder/NAME`` that is a symbolic link (dangling or not) or,
    when it is a folder, holds one: a command that writes ``names`` into ``folder`` would write through
    it, or replace or stumble on a link it did not make."""
    for name in names:
        path = Path(folder) / name
        entries = sorted(path.iterdir()) if path.is_dir() and not path.is_symlink() else []
        for entry in (path, *entries):
            if entry.is_symlink():
                raise ValueError(_linked_output(entry, "output"))


def open_append(path: str | os.PathLike, what: str) -> BinaryIO:
    """``path`` opened to append to, created if missing (``0o666`` less the umask), never through a link:
    :func:`check_output_file`'s refusals, made on the descriptor, so a link swapped in after a check is
    not followed either, and a FIFO does not hang the open."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise ValueError(_linked_output(Path(path), what)) from e
        if e.errno == errno.ENXIO:  # a FIFO nobody reads
            raise ValueError(f"{what} {str(path)!r} is not a regular file") from e
        raise
    try:
        _refuse_foreign_output(Path(path), os.fstat(fd), what)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab")


def _refuse_foreign_output(path: Path, st: os.stat_result, what: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise ValueError(_linked_output(path, what))
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} {str(path)!r} is not a regular file")
    if st.st_nlink > 1:
        raise ValueError(
            f"{what} {str(path)!r} has {st.st_nlink} hard links; spyrl writes only into a file of its own, "
            "not one linked from elsewhere"
        )


def _linked_output(path: Path, what: str) -> str:
    return (
        f"{what} {str(path)!r} is a symbolic link; spyrl writes its outputs into their folder, never through "
        "a link: remove it"
    )


@contextlib.contextmanager
def atomic_folder(
    path: str | os.PathLike, *, overwrite: bool = False, kind: FolderKind = SAVED_MODEL
) -> Iterator[Path]:
    """Yield a new, empty folder beside ``path``; it becomes ``path`` only if the block succeeds.

    Whatever the block writes (``save_pretrained``) lands in a folder this call created, so a
    ``config.json`` linked to another file in an old folder at ``path`` is never written through;
    an exception or Ctrl-C removes the half-written folder, and a write that fails is an ``OSError``
    naming ``path``. An existing ``path`` is refused unless ``overwrite`` and it is a folder of
    ``kind`` (:func:`refuse_existing_folder`, checked before the block and again after it); then it
    is replaced whole, after the block succeeded.
    """
    path = Path(path)
    refuse_existing_folder(path, overwrite=overwrite, kind=kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmpdir", dir=path.parent))
    old = None
    try:
        with writing(path, tmp):
            yield tmp
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700 folders
            honour_umask(tmp)
            if os.path.lexists(path):  # what another writer put there during the block is checked too
                refuse_existing_folder(path, overwrite=overwrite, kind=kind)
                old = path.parent / f".{path.name}.{os.getpid()}.old.tmpdir"
                os.rename(path, old)
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not os.path.lexists(path):
            os.rename(old, path)
            old = None
        raise
    finally:
        if old is not None:  # removed, its links not followed (one swapped in after the check: unlinked)
            if old.is_symlink() or not old.is_dir():
                old.unlink()
            else:
                shutil.rmtree(old, ignore_errors=True)


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
    _refuse_hard_link(path, path.lstat())
    return path


def _refuse_hard_link(path: Path, st: os.stat_result) -> None:
    if st.st_nlink > 1:  # the same file under another name, possibly outside the folder
        raise ValueError(
            f"{str(path)!r} has {st.st_nlink} hard links; files inside an input folder are read only when "
            "they are not linked from elsewhere"
        )


def read_folder_file(folder: str | os.PathLike, relative: str | os.PathLike, *, max_bytes: int) -> bytes | None:
    """The bytes of :func:`folder_file` (``None`` if it does not exist); ``ValueError`` beyond ``max_bytes``."""
    path = folder_file(folder, relative)
    if path is None:
        return None
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # a link swapped in after the check
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{str(path)!r} is not a regular file")
        _refuse_hard_link(path, st)
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{str(path)!r} is larger than {max_bytes} bytes")
    return data


def open_regular(path: str | os.PathLike, what: str) -> BinaryIO:
    """``path`` opened for reading if it is a regular file; ``ValueError`` naming the ``what`` otherwise.

    A user's path may be a link (their choice), but what it reaches must be a regular file: a FIFO
    would hang the reader, ``/dev/zero`` or ``/dev/urandom`` would never end. The file is opened
    without blocking (a FIFO with no writer does not hang the open) and checked on the descriptor, so a
    file swapped in after a check is checked too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError as e:
        raise ValueError(f"{what} {str(path)!r} does not exist") from e
    except IsADirectoryError as e:
        raise ValueError(f"{what} {str(path)!r} is a folder, not a file") from e
    except OSError as e:
        raise ValueError(f"{what} {str(path)!r} cannot be read ({e.strerror})") from e
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device or socket"
        raise ValueError(f"{what} {str(path)!r} is {kind}, not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike, what: str, *, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`); ``ValueError`` beyond ``max_bytes``
    (read no further than that: a sparse file of many gigabytes costs ``max_bytes`` at most)."""
    with open_regular(path, what) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{what} {str(path)!r} is larger than {max_bytes:,} bytes")
    return data


def read_lines(path: str | os.PathLike, what: str, *, max_line_bytes: int) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` of the regular file ``path`` as they are read, blank lines left out; a line
    longer than ``max_line_bytes`` is a ``ValueError`` naming the file and the line, found after reading
    ``max_line_bytes`` of it (a file of NUL bytes with no line end is refused, not held in memory). A
    reader that stops early (``--max-documents``) reads no further."""
    with open_regular(path, what) as f:
        for number, line in enumerate(iter(lambda: f.readline(max_line_bytes + 1), b""), start=1):
            if len(line) > max_line_bytes and not line.endswith(b"\n"):  # readline stopped inside the line
                raise ValueError(f"{what} {str(path)!r} line {number} is longer than {max_line_bytes:,} bytes")
            if line.strip():
                yield number, line


# a JSON string literal (no raw newline inside one), and what is not a bracket or a line end
_JSON_STRING = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}\n]+")
_EMPTY_PAIR = re.compile(r"\[\]|\{\}")


def check_json_depth(text: str | bytes, where: str, max_depth: int = MAX_DEPTH) -> None:
    """``ValueError`` naming ``where`` when a JSON (or JSON lines) text nests deeper than
    ``max_depth`` levels; malformed text is left to the parser to report.

    Linear and in C (regular expressions): strings are dropped, then innermost ``[]``/``{}``
    pairs are removed ``max_depth`` times; what remains is nested deeper, or unbalanced.

    >>> check_json_depth('{"a": [[1], "[[["]}', "x", max_depth=3)
    >>> check_json_depth("[[[[]]]]", "x", max_depth=3)
    Traceback (most recent call last):
    ...
    ValueError: x is nested more than 3 levels deep
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    too_deep = ValueError(f"{where} is nested more than {max_depth} levels deep")
    for _ in range(max_depth):
        shorter = _EMPTY_PAIR.sub("", brackets)
        if len(shorter) == len(brackets):
            break
        brackets = shorter
    else:
        if _EMPTY_PAIR.search(brackets):  # a pair that outlived max_depth removals of inner pairs
            raise too_deep
    depth = 0
    for char in brackets.strip("\n"):  # what is left of broken lines: unclosed "[[[[..." is too deep too
        depth = 0 if char == "\n" else depth + 1 if char in "[{" else max(depth - 1, 0)
        if depth > max_depth:
            raise too_deep


def parse_json(text: str | bytes, where: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)``; malformed JSON, or JSON nested deeper than ``max_depth``, is a
    ``ValueError`` naming ``where``."""
    check_json_depth(text, where, max_depth)
    try:
        return json.loads(text)
    except RecursionError as e:  # not reached after the check; kept as the last line of defence
        raise ValueError(f"{where} is nested too deeply to be read") from e
    except ValueError as e:
        raise ValueError(f"{where} is not JSON ({e})") from e


def read_json(path: str | os.PathLike, what: str) -> Any:
    """The JSON value of the file ``path`` (a ``what``); errors are a ``ValueError`` naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what} {str(path)!r} is not UTF-8 text") from e
    if not text.strip():  # a command reserves its output empty before the work and writes it whole after
        raise ValueError(f"{what} {str(path)!r} is empty: the command writing it has not finished, or it stopped")
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


def parse_yaml(text: str, where: str, *, max_depth: int = MAX_DEPTH, max_size: int = MAX_YAML_SIZE) -> Any:
    """``yaml.safe_load(text)``, bounded: more than :data:`MAX_YAML_CHARS` characters, more than
    ``max_depth`` levels of nesting, a text that stands for more than ``max_size`` values and
    string characters once its aliases are expanded (an alias bomb: 9 levels of 9 anchors are 387
    million strings) or an alias to a value that contains it is a ``ValueError`` naming
    ``where``, raised while composing, before any value is built. Malformed YAML raises
    ``yaml.YAMLError``.

    >>> parse_yaml("a: [1, {b: 2}]", "x")
    {'a': [1, {'b': 2}]}
    >>> parse_yaml("a: &a [1, 2]\\nb: [*a, *a, *a]", "x", max_size=15)
    Traceback (most recent call last):
    ...
    ValueError: x stands for more than 15 values and characters once its aliases are expanded
    """
    import yaml

    if len(text) > MAX_YAML_CHARS:
        raise ValueError(f"{where} is longer than {MAX_YAML_CHARS} characters")
    loader = _bounded_loader(yaml)(text)
    loader.where, loader.max_depth, loader.max_size = where, max_depth, max_size
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _bounded_loader(yaml: Any) -> type:
    class BoundedLoader(yaml.SafeLoader):
        """Counts the depth of the node being composed and the expanded size of every node."""

        depth = 0
        sizes: dict[int, int]

        def compose_document(self) -> Any:
            self.sizes = {}
            return super().compose_document()

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.depth >= self.max_depth:
                raise ValueError(f"{self.where} is nested more than {self.max_depth} levels deep")
            alias = self.check_event(yaml.AliasEvent)
            self.depth += 1
            try:
                node = super().compose_node(parent, index)
            finally:
                self.depth -= 1
            if alias:  # a node composed before, with its size, unless it is still being composed
                if id(node) not in self.sizes:
                    raise ValueError(f"{self.where} holds an alias to a value that contains it")
                size = self.sizes[id(node)]
            elif isinstance(node, yaml.ScalarNode):
                size = 1 + len(node.value)
            else:
                children = (
                    [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
                )
                size = 1 + sum(self.sizes[id(c)] for c in children)
            self.sizes[id(node)] = size
            if size > self.max_size:
                raise ValueError(
                    f"{self.where} stands for more than {self.max_size} values and characters once its aliases "
                    "are expanded"
                )
            return node

    return BoundedLoader


def refuse_existing_outputs(paths: Iterable[str | os.PathLike], *, overwrite: bool) -> None:
    """Before a long job: ``ValueError`` for the first of ``paths`` that exists, unless ``overwrite``."""
    if not overwrite:
        for path in paths:
            refuse_existing(path)


class Pretrained(Protocol):
    """A transformers object that saves itself into a folder (a model, a tokenizer)."""

    def save_pretrained(self, folder: Any) -> Any: ...


def save_pretrained(folder: str | os.PathLike, *objects: Pretrained, overwrite: bool = False) -> Path:
    """``obj.save_pretrained`` of each of ``objects`` into ``folder``, as one :func:`atomic_folder`:
    a new folder, never written through a link, whole or absent after an exception or Ctrl-C;
    ``overwrite`` replaces a model folder (:data:`SAVED_MODEL`), nothing else."""
    with atomic_folder(folder, overwrite=overwrite, kind=SAVED_MODEL) as tmp:
        for obj in objects:
            obj.save_pretrained(tmp)
    return Path(folder)


# ----------------------------------------------------------------------------- run lock
_HELD: dict[tuple[int, int], list[int]] = {}  # (device, inode) of a locked folder -> [fd, holders]


@dataclass
class RunLock:
    """This process's hold on a run folder (see :func:`lock_run`); :meth:`release` ends it."""

    folder: Path
    key: tuple[int, int]
    released: bool = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        held = _HELD.get(self.key)
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del _HELD[self.key]
            os.close(held[0])  # closing the descriptor drops the flock


def lock_run(folder: str | os.PathLike) -> RunLock:
    """Take the run folder ``folder`` (an existing folder) for this process.

    Every writer of a run folder (a fresh run and ``--resume`` alike) takes it before it reads a
    checkpoint or writes anything, so two processes never write one run: the second is a
    ``ValueError`` naming the process that holds it. The lock is an ``flock`` on the folder
    itself (nothing is written into it), dropped by the kernel when its process ends, however it
    ends. One process may take the same folder again (a trainer resumed in the process that trained).
    """
    import fcntl

    folder = Path(folder)
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    if key in _HELD:
        os.close(fd)
        _HELD[key][1] += 1
        return RunLock(folder, key)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = _flock_holder(st)
        raise ValueError(
            f"run folder {str(folder)!r} is being written by another process{f' (pid {holder})' if holder else ''}; "
            "wait for it to end or choose another folder"
        ) from None
    except BaseException:
        os.close(fd)
        raise
    _HELD[key] = [fd, 1]
    return RunLock(folder, key)


def _flock_holder(st: os.stat_result) -> int | None:
    """The pid holding an ``flock`` on the file of ``st``, from Linux's ``/proc/locks`` (else ``None``)."""
    where = f" {os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino} "
    with contextlib.suppress(OSError, ValueError, IndexError), open("/proc/locks", encoding="ascii") as f:
        for line in f:
            if "FLOCK" in line and where in line:
                return int(line.split(where)[0].split()[-1])
    return None
