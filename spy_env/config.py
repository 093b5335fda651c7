"""``GameConfig``: every knob of a game, in sections each validated where it is defined.

- ``rules`` (:class:`Rules`): the task, the players, the rounds, the degradation, the votes, the prompts;
- ``rewards`` (:class:`Rewards`): the weights of the rewards;
- ``penalties`` (:class:`Penalties`): what a format violation costs;
- ``limits`` (:class:`Limits`): how long a performance, a vote and a document may be;
- ``source`` (:class:`CorpusSource`): which documents are played.

Every setting also has a flat name, unique across sections (``n_players`` is ``rules.n_players``):
``GameConfig(n_players=4)``, ``dataclasses.replace(config, rounds=2)`` and ``GameConfig.from_dict``
read flat names as well as sections, and :meth:`GameConfig.to_dict` writes the flat form every buffer,
run config and leaderboard set records.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from spy_env.degrade import DEGRADERS, needs_neighbors
from spy_env.prompts import validate_templates
from spy_env.sections import (
    assemble,
    check_types,
    coerce_floats,
    flat_values,
    flatten,
    section,
    setting,
    shown,
    subsections,
)
from spy_env.tasks import TASKS

__all__ = ["CorpusSource", "GameConfig", "Limits", "Penalties", "Rewards", "Rules"]


def _bad(config: Any, name: str, allowed: str) -> ValueError:
    """The error of ``config.name``'s value, named by its place (``GameConfig.rules.n_players``)."""
    return ValueError(f"{config.PLACE}.{name} must be {allowed}, got {shown(getattr(config, name))}")


@dataclass(frozen=True)
class Rules:
    """``GameConfig.rules``: what is played, by how many, for how long, on which copy, and how players vote."""

    PLACE: ClassVar[str] = "GameConfig.rules"

    task: str = setting("math", f"Target task, one of {sorted(TASKS)}.")
    n_players: int = setting(5, "Players per game, 3..10.")
    rounds: int = setting(1, "Maximum rounds, 1..10. Rounds > 1 eliminate by plurality (ties: nobody).")
    degrade: str | None = setting(None, "Degradation operator g; None = the task's default.")
    mask_ratio: float | None = setting(None, "Share of the text g removes/changes, in (0, 1); None = task default.")
    mask_placeholder: str = setting("[…]", "Shown where mask_spans removed text; '' removes silently.")
    relevant_spans_first: bool = setting(True, "mask_spans masks sentences with numbers/LaTeX first.")
    allow_self_vote: bool = setting(False, "Whether a player may vote for itself (else: invalid vote).")
    train_spy_vote: bool = setting(False, "Whether the spy's own vote is a training sample (buffer flag).")
    prompts: Mapping[str, str] = setting({}, "Template overrides: keys system, perform, vote.")

    def __post_init__(self) -> None:
        check_types(self, self.PLACE)
        if self.task not in TASKS:
            raise _bad(self, "task", f"one of {sorted(TASKS)}")
        if not 3 <= self.n_players <= 10:
            raise _bad(self, "n_players", "an integer in 3..10")
        if not 1 <= self.rounds <= 10:
            raise _bad(self, "rounds", "an integer in 1..10")
        if self.degrade is not None and self.degrade not in DEGRADERS:
            raise _bad(self, "degrade", f"None or one of {sorted(DEGRADERS)}")
        if self.mask_ratio is not None and not (_is_real(self.mask_ratio) and 0 < self.mask_ratio < 1):
            raise _bad(self, "mask_ratio", "None or a number in (0, 1)")
        if not isinstance(self.prompts, Mapping):
            raise _bad(self, "prompts", "a mapping of template name to format string")
        validate_templates(self.prompts)

    @property
    def resolved_degrade(self) -> str:
        """The degradation played: ``degrade``, or the task's default."""
        return self.degrade or TASKS[self.task].default_degrade

    @property
    def resolved_ratio(self) -> float:
        """The share of the text the degradation changes: ``mask_ratio``, or the task's default."""
        return self.mask_ratio if self.mask_ratio is not None else TASKS[self.task].default_ratio


@dataclass(frozen=True)
class Rewards:
    """``GameConfig.rewards``: the weights of the performing reward and of the scalar reward's parts."""

    PLACE: ClassVar[str] = "GameConfig.rewards"

    vote_gap_weight: float = setting(1.0, "β > 0: weight of the spy-vs-civilians vote gap in the performing reward.")
    lam: float = setting(1.0, "λ > 0: weight of a civilian's own suspicion.")
    weight_detect: float = setting(1.0, "Weight of r^D in the scalar reward.")
    weight_perform: float = setting(1.0, "Weight of r^P in the scalar reward.")
    weight_penalty: float = setting(1.0, "Weight of penalties in the scalar reward.")

    def __post_init__(self) -> None:
        check_types(self, self.PLACE)
        for name in ("vote_gap_weight", "lam"):
            if not (_is_real(getattr(self, name)) and getattr(self, name) > 0):
                raise _bad(self, name, "a finite number > 0")
        for name in ("weight_detect", "weight_perform", "weight_penalty"):
            if not _is_real(getattr(self, name)):
                raise _bad(self, name, "a finite number")


@dataclass(frozen=True)
class Penalties:
    """``GameConfig.penalties``: what each format violation costs (a task's checks charge a ``penalty_*``
    field by name: :mod:`spy_env.tasks`)."""

    PLACE: ClassVar[str] = "GameConfig.penalties"

    penalty_no_answer: float = setting(-0.1, "Performance without a \\boxed{} answer (tasks that need one), <= 0.")
    penalty_copy: float = setting(-0.5, "Performance copying >= copy_min_words source words verbatim, <= 0.")
    penalty_overlength: float = setting(-0.1, "Output longer than its limit (it is truncated), <= 0.")
    penalty_invalid_vote: float = setting(-0.1, "Missing, unparseable, out-of-range or illegal vote, <= 0.")
    copy_min_words: int = setting(20, "k of the anti-leak rule: a verbatim run of k source words, >= 5.")

    def __post_init__(self) -> None:
        check_types(self, self.PLACE)
        for name in ("penalty_no_answer", "penalty_copy", "penalty_overlength", "penalty_invalid_vote"):
            if not (_is_real(getattr(self, name)) and getattr(self, name) <= 0):
                raise _bad(self, name, "a finite number <= 0")
        if self.copy_min_words < 5:
            raise _bad(self, "copy_min_words", "an integer >= 5")


@dataclass(frozen=True)
class Limits:
    """``GameConfig.limits``: how many characters a performance, a vote reply and a source document keep."""

    PLACE: ClassVar[str] = "GameConfig.limits"

    max_performance_chars: int = setting(8_000, "Performances are truncated (and flagged) past this, >= 100.")
    max_vote_chars: int = setting(4_000, "Vote replies are truncated (and flagged) past this, >= 100.")
    max_document_chars: int = setting(12_000, "Source documents are truncated to this many chars, >= 200.")

    def __post_init__(self) -> None:
        check_types(self, self.PLACE)
        for name, low in (("max_performance_chars", 100), ("max_vote_chars", 100), ("max_document_chars", 200)):
            if getattr(self, name) < low:
                raise _bad(self, name, f"an integer >= {low}")


@dataclass(frozen=True)
class CorpusSource:
    """``GameConfig.source``: the corpus the games' documents come from, and how many of them."""

    PLACE: ClassVar[str] = "GameConfig.source"

    corpus: Any = setting(  # noqa: RUF009
        "embedded", "'embedded', 'nemotron[:CONFIG]', 'hf:ID[:CONFIG]', a path, or a list of rows."
    )
    max_documents: int | None = setting(None, "Keep at most this many corpus documents (None: all).")

    def __post_init__(self) -> None:
        check_types(self, self.PLACE)
        if self.max_documents is not None and self.max_documents < 1:
            raise _bad(self, "max_documents", "None or an integer >= 1")
        if not _is_corpus(self.corpus):
            raise _bad(
                self,
                "corpus",
                "'embedded', 'nemotron[:CONFIG]', 'hf:ID[:CONFIG]', a path, or a list of rows (documents, or "
                "mappings of strings, numbers and flat lists or mappings of them)",
            )


# The flat form's order, as every buffer, run config and leaderboard set records it (a set's text, hashed,
# holds its config in this order).
_RECORDED = (
    *("task", "n_players", "rounds", "degrade", "mask_ratio", "mask_placeholder", "relevant_spans_first"),
    *("vote_gap_weight", "lam", "weight_detect", "weight_perform", "weight_penalty"),
    *("penalty_no_answer", "penalty_copy", "penalty_overlength", "penalty_invalid_vote", "copy_min_words"),
    *("max_performance_chars", "max_vote_chars", "max_document_chars", "allow_self_vote", "train_spy_vote"),
    *("corpus", "max_documents", "prompts"),
)


@dataclass(frozen=True, init=False)
class GameConfig:
    """Configuration of a Who-Is-the-Spy game (docs/GUIDE.md), in sections. Defaults are the paper's.

    Built from sections (``GameConfig(rules=Rules(n_players=4))``, or mappings of their fields), from
    settings by flat name (``GameConfig(n_players=4)``), or both: a setting named both ways takes the flat
    value, as ``dataclasses.replace(config, n_players=4)`` gives it. Bad values raise ``ValueError``
    naming the setting by its place and the allowed range (``GameConfig.rules.n_players must be ...``).
    """

    rules: Rules = section(Rules, "Task, players, rounds, degradation, votes and prompts.")  # noqa: RUF009
    rewards: Rewards = section(Rewards, "The weights of the performing reward and of the scalar reward.")  # noqa: RUF009
    penalties: Penalties = section(Penalties, "What each format violation costs.")  # noqa: RUF009
    limits: Limits = section(Limits, "How many characters performances, votes and documents keep.")  # noqa: RUF009
    source: CorpusSource = section(CorpusSource, "The corpus the documents come from.")  # noqa: RUF009

    def __init__(
        self,
        rules: Rules | Mapping[str, Any] | None = None,
        rewards: Rewards | Mapping[str, Any] | None = None,
        penalties: Penalties | Mapping[str, Any] | None = None,
        limits: Limits | Mapping[str, Any] | None = None,
        source: CorpusSource | Mapping[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        given = {"rules": rules, "rewards": rewards, "penalties": penalties, "limits": limits, "source": source}
        for name, value in assemble(type(self), given, settings, "GameConfig").items():
            object.__setattr__(self, name, value)
        self._check_across()

    def _check_across(self) -> None:
        """The rules that tie two sections together (each checked its own fields already)."""
        rules, corpus = self.rules, self.source.corpus
        penalties = {f.name for f in fields(Penalties)}
        if unknown := [c.penalty for c in TASKS[rules.task].checks if c.penalty not in penalties]:
            raise _bad(rules, "task", f"a task whose checks charge GameConfig.penalties fields (unknown: {unknown})")
        if needs_neighbors(rules.resolved_degrade) and isinstance(corpus, (list, tuple)) and len(corpus) < 2:
            raise _bad(
                self.source, "corpus", f"a corpus of at least 2 documents for degrade={rules.resolved_degrade!r}"
            )

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> GameConfig:
        """Build from a mapping of flat names (the recorded form: ``{"n_players": 4}``), sections
        (``{"rules": {"n_players": 4}}``) or dotted keys (``"rules.n_players"``), in any mix; an unknown
        key, or a setting given twice, is refused by name."""
        return cls(**coerce_floats(cls, flatten(cls, values, "GameConfig")))

    def to_dict(self, *, nested: bool = False) -> dict[str, Any]:
        """The settings by flat name, in the order buffers, run configs and leaderboard sets record them
        (``nested``: by section); a corpus given as rows is written as their count."""
        flat = flat_values(self)
        if not isinstance(self.source.corpus, str):
            rows = self.source.corpus
            flat["corpus"] = f"<{len(rows)} rows>" if hasattr(rows, "__len__") else "<rows>"
        flat["prompts"] = dict(self.rules.prompts)
        if nested:
            return {
                name: {f.name: flat[f.name] for f in fields(inner)}
                for name, (inner, _) in subsections(type(self)).items()
            }
        return {name: flat[name] for name in _RECORDED}


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
