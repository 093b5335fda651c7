"""The stages of a round, named once for the whole project."""

from __future__ import annotations

from enum import Enum
from typing import Any

__all__ = ["Stage"]


class Stage(str, Enum):
    """The one stage vocabulary of the project: game state, observations, buffer rows, trainer.

    A member *is* its string (``Stage.VOTE == "vote"``), which is how buffer rows store it.
    An observation's ``stage`` entry is the member's :attr:`index` (``Discrete(2)``: 0 perform,
    1 vote). The trainer's stage that trains votes is the paper's *detection* stage, spelled
    ``"detect"`` in configs and metrics (:attr:`schedule_name`). :meth:`of` reads any of these.

    >>> Stage.of(1) is Stage.VOTE and Stage.of("detect") is Stage.VOTE and Stage.VOTE.index == 1
    True
    >>> [s.schedule_name for s in (Stage.PERFORM, Stage.VOTE)]
    ['perform', 'detect']
    """

    PERFORM = "perform"
    VOTE = "vote"
    DONE = "done"

    @property
    def index(self) -> int:
        """The observation's ``stage`` entry."""
        return _INDEX[self]

    @property
    def schedule_name(self) -> str:
        """The trainer's name for the stage that trains this stage's samples (configs, metrics)."""
        return "detect" if self is Stage.VOTE else self.value

    @classmethod
    def of(cls, value: Any) -> Stage:
        """The member named by a member, its string, an observation's index or a schedule name."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            if value == "detect":
                return cls.VOTE
            return cls(value)
        try:
            return _BY_INDEX[int(value)]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"not a stage: {value!r}") from None


_INDEX = {Stage.PERFORM: 0, Stage.VOTE: 1, Stage.DONE: 2}
_BY_INDEX = {index: stage for stage, index in _INDEX.items()}
