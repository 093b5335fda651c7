"""``GameConfig``: every knob of a game in one validated dataclass."""

from __future__ import annotations

import contextlib
import math
import os
import reprlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from spy_env.degrade import DEGRADERS, needs_neighbors
from spy_env.prompts import validate_templates
from spy_env.tasks import TASKS

__all__ = ["GameConfig", "coerce_floats"]


def coerce_floats(cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` with strings in ``cls``'s float fields read as numbers (YAML 1.1 reads ``1e-6``,
    without a dot, as a string); anything else is left for validation to name."""
    floats = {f.name for f in fields(cls) if "float" in str(f.type)}
    out = dict(values)
    for name in floats & set(out):
        if isinstance(out[name], str):
            with contextlib.suppress(ValueError):  # not a number: validation names the field
                out[name] = float(out[name])
    return out


_TYPE_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "float": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "dict": ("a mapping", lambda v: isinstance(v, Mapping)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "None": ("None", lambda v: v is None),
}


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 200, 200


def shown(value: Any) -> str:
    """``repr(value)`` bounded in depth and length, for error messages about untrusted values (a
    YAML alias bomb's full ``repr`` is exponential)."""
    text = _SHOWN.repr(value)
    return text if len(text) <= 300 else text[:300] + "..."


def check_types(config: Any) -> None:
    """Raise ``ValueError`` naming the first field whose value does not have its annotated type.

    Runs before range checks, so ``"abc"``, ``1.5`` or ``True`` for an ``int`` field, or a list for
    a ``str`` field, is refused by name instead of failing later (after side effects). Annotations
    this does not understand (``Mapping[str, str]``, ...) are left to the field's own validation.
    """
    for f in fields(config):
        parts = [part.strip() for part in str(f.type).split("|")]
        if not all(part in _TYPE_CHECKS for part in parts):
            continue
        value = getattr(config, f.name)
        if not any(_TYPE_CHECKS[part][1](value) for part in parts):
            expected = " or ".join(_TYPE_CHECKS[part][0] for part in parts)
            raise ValueError(f"{type(config).__name__}.{f.name} must be {expected}, got {shown(value)}")


@dataclass(frozen=True)
class GameConfig:
    """Configuration of a Who-Is-the-Spy game (docs/GUIDE.md). Defaults are the paper's.

    Bad values raise ``ValueError`` naming the field and the allowed range.
    """

    task: str = field(default="math", metadata={"help": f"Target task, one of {sorted(TASKS)}."})
    n_players: int = field(default=5, metadata={"help": "Players per game, 3..10."})
    rounds: int = field(
        default=1,
        metadata={"help": "Maximum rounds, 1..10. Rounds > 1 eliminate by plurality (ties: nobody)."},
    )
    degrade: str | None = field(default=None, metadata={"help": "Degradation operator g; None = the task's default."})
    mask_ratio: float | None = field(
        default=None,
        metadata={"help": "Share of the text g removes/changes, in (0, 1); None = task default."},
    )
    mask_placeholder: str = field(
        default="[…]",
        metadata={"help": "Shown where mask_spans removed text; '' removes silently."},
    )
    relevant_spans_first: bool = field(
        default=True, metadata={"help": "mask_spans masks sentences with numbers/LaTeX first."}
    )
    vote_gap_weight: float = field(
        default=1.0, metadata={"help": "β > 0: weight of the spy-vs-civilians vote gap in the performing reward."}
    )
    lam: float = field(default=1.0, metadata={"help": "λ > 0: weight of a civilian's own suspicion."})
    weight_detect: float = field(default=1.0, metadata={"help": "Weight of r^D in the scalar reward."})
    weight_perform: float = field(default=1.0, metadata={"help": "Weight of r^P in the scalar reward."})
    weight_penalty: float = field(default=1.0, metadata={"help": "Weight of penalties in the scalar reward."})
    penalty_no_answer: float = field(
        default=-0.1,
        metadata={"help": "Performance without a \\boxed{} answer (tasks that need one), <= 0."},
    )
    penalty_copy: float = field(
        default=-0.5,
        metadata={"help": "Performance copying >= copy_min_words source words verbatim, <= 0."},
    )
    penalty_overlength: float = field(
        default=-0.1, metadata={"help": "Output longer than its limit (it is truncated), <= 0."}
    )
    penalty_invalid_vote: float = field(
        default=-0.1, metadata={"help": "Missing, unparseable, out-of-range or illegal vote, <= 0."}
    )
    copy_min_words: int = field(
        default=20,
        metadata={"help": "k of the anti-leak rule: a verbatim run of k source words, >= 5."},
    )
    max_performance_chars: int = field(
        default=8_000,
        metadata={"help": "Performances are truncated (and flagged) past this, >= 100."},
    )
    max_vote_chars: int = field(
        default=4_000,
        metadata={"help": "Vote replies are truncated (and flagged) past this, >= 100."},
    )
    max_document_chars: int = field(
        default=12_000,
        metadata={"help": "Source documents are truncated to this many chars, >= 200."},
    )
    allow_self_vote: bool = field(
        default=False,
        metadata={"help": "Whether a player may vote for itself (else: invalid vote)."},
    )
    train_spy_vote: bool = field(
        default=False,
        metadata={"help": "Whether the spy's own vote is a training sample (buffer flag)."},
    )
    corpus: Any = field(
        default="embedded",
        metadata={"help": "'embedded', 'nemotron[:CONFIG]', 'hf:ID[:CONFIG]', a path, or a list of rows."},
    )
    max_documents: int | None = field(
        default=None, metadata={"help": "Keep at most this many corpus documents (None: all)."}
    )
    prompts: Mapping[str, str] = field(
        default_factory=dict, metadata={"help": "Template overrides: keys system, perform, vote."}
    )

    def __post_init__(self) -> None:
        def bad(name: str, allowed: str) -> ValueError:
            return ValueError(f"GameConfig.{name} must be {allowed}, got {shown(getattr(self, name))}")

        check_types(self)
        if self.task not in TASKS:
            raise bad("task", f"one of {sorted(TASKS)}")
        unknown = [c.penalty for c in TASKS[self.task].checks if c.penalty not in self.__dataclass_fields__]
        if unknown:
            raise bad("task", f"a task whose checks charge GameConfig fields (unknown: {unknown})")
        if not _is_int(self.n_players) or not 3 <= self.n_players <= 10:
            raise bad("n_players", "an integer in 3..10")
        if not _is_int(self.rounds) or not 1 <= self.rounds <= 10:
            raise bad("rounds", "an integer in 1..10")
        if self.degrade is not None and self.degrade not in DEGRADERS:
            raise bad("degrade", f"None or one of {sorted(DEGRADERS)}")
        if self.mask_ratio is not None and not (_is_real(self.mask_ratio) and 0 < self.mask_ratio < 1):
            raise bad("mask_ratio", "None or a number in (0, 1)")
        if not isinstance(self.mask_placeholder, str):
            raise bad("mask_placeholder", "a string")
        for name in ("vote_gap_weight", "lam"):
            value = getattr(self, name)
            if not (_is_real(value) and value > 0):
                raise bad(name, "a finite number > 0")
        for name in ("weight_detect", "weight_perform", "weight_penalty"):
            if not _is_real(getattr(self, name)):
                raise bad(name, "a finite number")
        for name in (
            "penalty_no_answer",
            "penalty_copy",
            "penalty_overlength",
            "penalty_invalid_vote",
        ):
            value = getattr(self, name)
            if not (_is_real(value) and value <= 0):
                raise bad(name, "a finite number <= 0")
        if not _is_int(self.copy_min_words) or self.copy_min_words < 5:
            raise bad("copy_min_words", "an integer >= 5")
        for name, low in (
            ("max_performance_chars", 100),
            ("max_vote_chars", 100),
            ("max_document_chars", 200),
        ):
            value = getattr(self, name)
            if not _is_int(value) or value < low:
                raise bad(name, f"an integer >= {low}")
        if self.max_documents is not None and (not _is_int(self.max_documents) or self.max_documents < 1):
            raise bad("max_documents", "None or an integer >= 1")
        if not isinstance(self.prompts, Mapping):
            raise bad("prompts", "a mapping of template name to format string")
        validate_templates(self.prompts)
        if not _is_corpus(self.corpus):
            raise bad(
                "corpus",
                "'embedded', 'nemotron[:CONFIG]', 'hf:ID[:CONFIG]', a path, or a list of rows (documents, or "
                "mappings of strings, numbers and flat lists or mappings of them)",
            )
        if needs_neighbors(self.resolved_degrade) and isinstance(self.corpus, (list, tuple)) and len(self.corpus) < 2:
            raise bad("corpus", f"a corpus of at least 2 documents for degrade={self.resolved_degrade!r}")

    @property
    def resolved_degrade(self) -> str:
        return self.degrade or TASKS[self.task].default_degrade

    @property
    def resolved_ratio(self) -> float:
        return self.mask_ratio if self.mask_ratio is not None else TASKS[self.task].default_ratio

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> GameConfig:
        """Build from a mapping, rejecting unknown keys with the list of known ones."""
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"GameConfig: unknown fields {sorted(unknown)}; known: {sorted(known)}")
        return cls(**coerce_floats(cls, values))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not isinstance(self.corpus, str):
            out["corpus"] = f"<{len(self.corpus)} rows>" if hasattr(self.corpus, "__len__") else "<rows>"
        out["prompts"] = dict(self.prompts)
        return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_SCALARS = (str, int, float, bool, type(None))


def _is_corpus(corpus: Any) -> bool:
    """A spec, a path or a list of flat rows. Checked in one pass over the rows, never recursively:
    a YAML alias bomb (lists of lists sharing one object, exponential once walked) is refused here
    before anything walks it.

    >>> _is_corpus("embedded"), _is_corpus([{"id": "a", "text": "b", "metadata": {"n": 1}}]), _is_corpus([[1]])
    (True, True, False)
    """
    from spy_env.corpus import Document

    if isinstance(corpus, (str, os.PathLike)):
        return True
    if not isinstance(corpus, (list, tuple)):
        return False
    for row in corpus:
        if isinstance(row, Document):
            continue
        if not isinstance(row, Mapping):
            return False
        for value in row.values():
            inner = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else (value,)
            if not all(isinstance(v, _SCALARS) for v in inner):
                return False
    return True
