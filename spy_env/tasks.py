"""Target tasks τ: what every player does with its copy of the source, and how it is checked.

A :class:`Task` is the pluggable part of RLSVR: its instruction fills the prompts' ``{task}``,
its :class:`Check` s turn a performance into violations (each charged the penalty of a
:class:`~spy_env.config.GameConfig` field), and it names the degradation g that suits it.
``math`` is the default (docs/GUIDE.md); ``summary`` and ``writing`` are the paper's other tasks
(GovReport, WritingPrompts; mask ratio 0.2). New tasks are added with :func:`register_task`
and then played with ``GameConfig(task=name)``; the game itself knows no task by name.

>>> [check.violation for check in TASKS["math"].check("so the answer is 4")]
['no_answer']
>>> TASKS["math"].check("so the answer is $\\\\boxed{4}$"), TASKS["summary"].check("no box")
((), ())
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from spy_env.parsing import last_boxed
from spy_env.prompts import PERFORM, SYSTEM, VOTE

__all__ = ["TASKS", "Check", "Task", "register_task"]


@dataclass(frozen=True)
class Check:
    """One output check: ``fails(text)`` on the performance as the others see it (think blocks
    removed) records ``violation`` and charges the penalty in the game config's ``penalty`` field."""

    violation: str
    fails: Callable[[str], bool]
    penalty: str


@dataclass(frozen=True)
class Task:
    """A target task τ: its instruction, its checks, its default degradation and templates."""

    name: str
    instruction: str
    default_degrade: str
    default_ratio: float
    checks: tuple[Check, ...] = ()
    system: str = SYSTEM
    perform: str = PERFORM
    vote: str = VOTE

    def templates(self, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
        """The task's templates with ``overrides`` applied (keys: system, perform, vote)."""
        out = {"system": self.system, "perform": self.perform, "vote": self.vote}
        out.update(overrides or {})
        return out

    def check(self, shown: str) -> tuple[Check, ...]:
        """The checks a performance ``shown`` to the other players fails."""
        return tuple(check for check in self.checks if check.fails(shown))


TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Make ``task`` playable as ``GameConfig(task=task.name)``; returns it.

    Raises ``ValueError`` if the name is taken by another task or a check's penalty is not
    named ``penalty_*`` (``GameConfig`` checks the field exists when the task is chosen).
    """
    for check in task.checks:
        if not check.penalty.startswith("penalty_"):
            raise ValueError(
                f"task {task.name!r}: check {check.violation!r} must name a GameConfig.penalties penalty_* field"
            )
    if TASKS.get(task.name, task) != task:
        raise ValueError(f"a different task is already registered as {task.name!r}")
    TASKS[task.name] = task
    return task


def _no_boxed_answer(shown: str) -> bool:
    return last_boxed(shown) is None


register_task(
    Task(
        name="math",
        instruction=(
            "design a math problem grounded in the source text and solve it step by step, "
            "with the final answer in \\boxed{}"
        ),
        default_degrade="mask_spans",
        default_ratio=0.4,
        checks=(Check("no_answer", _no_boxed_answer, "penalty_no_answer"),),
    )
)
register_task(
    Task(
        name="summary",
        instruction="write a faithful summary of the source text in at most 150 words",
        default_degrade="mask_spans",
        default_ratio=0.2,
    )
)
register_task(
    Task(
        name="writing",
        instruction="write a short story (at most 200 words) that continues the source text",
        default_degrade="mask_spans",
        default_ratio=0.2,
    )
)
