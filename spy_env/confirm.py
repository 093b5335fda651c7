"""The sealed ``confirm`` split: documents scored only under a pre-registration committed to git.

The held-out split is looked at again and again while a method is developed (the evaluation ledger,
:mod:`spy_env.ledger`, counts the looks), so a number on it is exploratory. A confirmatory number needs
documents nobody tuned on and a plan fixed before the look. ``spy_env/data/confirm.jsonl`` holds such
documents (the schema of ``spy_env/data/corpus.jsonl``). They never enter training or play: they are
not part of the embedded corpus and no ``--documents`` choice of ``play``, ``rollout`` or ``train``
offers them. :func:`confirm_documents` loads them only for a pre-registration file that git shows
committed: tracked, with no change since its last commit, and that commit dated in the past.

A pre-registration is a JSON object (``spyrl`` reads no YAML without its ``train`` extra):

- ``recipe`` (string): the training recipe under test (a config, a commit, a ledger recipe hash);
- ``seeds`` (non-empty list of integers): the training seeds whose models are scored;
- ``primary_metric`` (string): the one metric the claim is about, e.g. ``detection_accuracy``;
- ``test`` (string): the statistical test, e.g. ``paired bootstrap over games, one-sided``;
- ``alpha`` (number in (0, 0.5)): its significance level;
- optional ``hypothesis`` (string) and ``sets`` (list of strings, e.g. ``["confirm-detect"]``).

Any other field is refused (a misspelt ``primary_metrics`` must not pass as a plan without one). git
runs as a list of arguments (never through a shell) in the file's folder, with literal pathspecs.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from spy_env.corpus import CorpusFilter, Document, load_local
from spy_env.io import parse_json, read_regular

__all__ = [
    "CONFIRM_FILE",
    "Preregistration",
    "check_preregistration",
    "confirm_documents",
    "confirm_path",
    "open_confirm",
]

CONFIRM_FILE = "confirm.jsonl"
MAX_PREREGISTRATION_BYTES = 1 << 20
# What each field must be, in words, for the refusals.
REQUIRED = {
    "recipe": "a non-empty string",
    "seeds": "a non-empty list of integers",
    "primary_metric": "a non-empty string",
    "test": "a non-empty string (the statistical test)",
    "alpha": "a number in (0, 0.5)",
}
OPTIONAL = {"hypothesis": "a string", "sets": "a list of strings"}
# Variables that would point git at another repository than the file's.
_REPOSITORY_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR")


@dataclass(frozen=True)
class Preregistration:
    """A checked pre-registration: its fields, and where git has it (path in the repository, commit)."""

    path: Path  # the file, resolved
    repo_path: str  # its path inside its repository
    commit: str
    committed_at: int  # the commit's time, seconds since the epoch
    recipe: str
    seeds: tuple[int, ...]
    primary_metric: str
    test: str
    alpha: float
    hypothesis: str | None = None
    sets: tuple[str, ...] | None = None

    def record(self) -> dict[str, str]:
        """What a result and the ledger keep: ``{"path", "commit"}`` (``git show COMMIT:PATH`` is the plan)."""
        return {"path": self.repo_path, "commit": self.commit}


def confirm_path() -> Path:
    """The shipped confirm split, inside the installed ``spy_env`` package."""
    return Path(str(resources.files("spy_env") / "data" / CONFIRM_FILE))


def check_preregistration(path: str | os.PathLike) -> Preregistration:
    """The pre-registration at ``path``, checked: its fields, then git (tracked, committed, unchanged
    since, the commit dated in the past). Every refusal is a ``ValueError`` saying what is missing."""
    given = Path(path)
    text = read_regular(given, "pre-registration", max_bytes=MAX_PREREGISTRATION_BYTES)
    fields = _fields(parse_json(text, f"pre-registration {str(given)!r}"), given)
    resolved = given.resolve()
    repo_path, commit, committed_at = _committed(resolved, given)
    return Preregistration(resolved, repo_path, commit, committed_at, **fields)


def _fields(raw: Any, path: Path) -> dict[str, Any]:
    where = f"pre-registration {str(path)!r}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where} must be a JSON object with {', '.join(REQUIRED)}")
    if unknown := sorted(set(raw) - set(REQUIRED) - set(OPTIONAL)):
        raise ValueError(f"{where}: unknown fields {unknown}; known: {[*REQUIRED, *OPTIONAL]}")
    for name, what in REQUIRED.items():
        if name not in raw:
            raise ValueError(f"{where} is missing the field {name!r} ({what})")
    for name, what in {**REQUIRED, **OPTIONAL}.items():
        if name in raw and not _valid(name, raw[name]):
            raise ValueError(f"{where}: field {name!r} must be {what}, got {raw[name]!r:.80}")
    return {
        **{name: raw[name] for name in ("recipe", "primary_metric", "test", "hypothesis") if name in raw},
        "seeds": tuple(raw["seeds"]),
        "alpha": float(raw["alpha"]),
        **({"sets": tuple(raw["sets"])} if "sets" in raw else {}),
    }


def _valid(name: str, value: Any) -> bool:
    if name in ("recipe", "primary_metric", "test"):
        return isinstance(value, str) and bool(value.strip())
    if name == "seeds":
        return isinstance(value, list) and bool(value) and all(_is_int(v) for v in value)
    if name == "alpha":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 0.5
    if name == "hypothesis":
        return isinstance(value, str)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)  # sets


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _git(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPOSITORY_VARIABLES}
    try:
        return subprocess.run(
            ["git", "--literal-pathspecs", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=60
        )
    except FileNotFoundError as e:
        raise ValueError("checking a pre-registration needs git, which is not installed") from e


def _committed(file: Path, given: Path) -> tuple[str, str, int]:
    """``(path in the repository, commit, commit time)`` of ``file``; ``ValueError`` unless it is committed
    and unchanged since, in a commit dated in the past."""
    where, folder, name = f"pre-registration {str(given)!r}", file.parent, file.name
    top = _git(folder, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        reason = (top.stderr.strip().splitlines() or ["git found no repository"])[0]
        raise ValueError(f"{where} is not in a git repository ({reason}); commit it to one before the run")
    tracked = _git(folder, "ls-files", "--full-name", "--error-unmatch", "--", name)
    if tracked.returncode != 0:
        raise ValueError(f"{where} is not committed: git does not track it; commit it before the run")
    last = _git(folder, "log", "-1", "--format=%H %ct", "--", name).stdout.split()
    if len(last) != 2:
        raise ValueError(f"{where} is not committed: it is staged but has no commit yet; commit it before the run")
    commit, committed_at = last[0], int(last[1])
    changes = _git(folder, "status", "--porcelain", "--", name).stdout.strip()
    if changes:
        raise ValueError(
            f"{where} was modified since its commit {commit[:12]} ({changes.splitlines()[0]}); a plan changed after "
            "its commit is not a pre-registration: commit the change (before the run) or restore the file"
        )
    if committed_at > time.time():
        raise ValueError(
            f"{where}: its commit {commit[:12]} is dated in the future; a pre-registration predates its run"
        )
    return tracked.stdout.strip(), commit, committed_at


def open_confirm(
    preregistration: str | os.PathLike, *, path: str | os.PathLike | None = None, filt: CorpusFilter | None = None
) -> tuple[Preregistration, list[Document]]:
    """The checked pre-registration (:func:`check_preregistration`) and the confirm split's documents
    (``path``: a documents file in ``corpus.jsonl``'s schema, default :func:`confirm_path`; ``filt``: how
    they are filtered and truncated, as a corpus is). Nothing is read from the split unless the
    pre-registration passes."""
    registered = check_preregistration(preregistration)
    source = Path(path) if path is not None else confirm_path()
    if not source.is_file():
        raise ValueError(f"the confirm split {str(source)!r} does not exist")
    return registered, load_local(source, filt)


def confirm_documents(
    preregistration: str | os.PathLike, *, path: str | os.PathLike | None = None, filt: CorpusFilter | None = None
) -> list[Document]:
    """The confirm split's documents, loaded only under a committed pre-registration (:func:`open_confirm`)."""
    return open_confirm(preregistration, path=path, filt=filt)[1]
