"""How a section of :class:`~trainers.SpyRLConfig` checks itself where it is defined.

Each section is a frozen dataclass whose fields are made with :func:`setting` (a default and its help)
or :func:`section` (a section it holds, as ``rollout`` holds ``vllm``), both from :mod:`spy_env.sections`,
and whose ``__post_init__`` calls :func:`check_section`: types first (nothing after sees a str where an
int belongs), then ``Literal`` choices, then the ranges it names. A bad value raises
``ValueError("SpyRLConfig.<section>.<field> must be <allowed>, got <value>")``. Nothing here imports a
trainer module: the sections (:mod:`trainers.sections`) import it.
"""

from __future__ import annotations

import contextlib
import math
import typing
from collections.abc import Iterable, Iterator
from dataclasses import fields
from typing import Any, Literal

from spy_env.sections import check_types, section, setting, shown

__all__ = ["bad", "check_choice", "check_section", "literal_choices", "named_in_config", "section", "setting"]


def bad(section: Any, name: str, allowed: str) -> ValueError:
    """The error of ``section.name``'s value, named as ``SpyRLConfig.<section>.<name>``."""
    return ValueError(f"SpyRLConfig.{section.SECTION}.{name} must be {allowed}, got {shown(getattr(section, name))}")


def literal_choices(cls: type) -> dict[str, tuple[Any, ...]]:
    """The allowed values of each ``Literal`` field of the dataclass ``cls``."""
    hints = typing.get_type_hints(cls)
    return {f.name: typing.get_args(hints[f.name]) for f in fields(cls) if typing.get_origin(hints[f.name]) is Literal}


@contextlib.contextmanager
def named_in_config(section: Any) -> Iterator[None]:
    """A ``ValueError`` raised inside that names a field as ``<Class>.<field>`` (``check_types``, a record's
    own checks) names it by its place in SpyRLConfig instead: ``SpyRLConfig.<section>.<field>``."""
    try:
        yield
    except ValueError as e:
        raise ValueError(str(e).replace(f"{type(section).__name__}.", f"SpyRLConfig.{section.SECTION}.", 1)) from None


def check_choice(section: Any, name: str, allowed: Iterable[Any]) -> None:
    """``section.name`` is one of ``allowed`` (a registry's names are read when checked)."""
    allowed = tuple(allowed)
    if getattr(section, name) not in allowed:
        raise bad(section, name, f"one of {allowed}")


def check_section(
    section: Any,
    *,
    positive_ints: tuple[str, ...] = (),
    positive: tuple[str, ...] = (),
    non_negative: tuple[str, ...] = (),
    fractions: tuple[str, ...] = (),
) -> None:
    """Types, ``Literal`` choices, then the named ranges, in that order; the first bad field raises."""
    with named_in_config(section):
        check_types(section)
    for name, allowed in literal_choices(type(section)).items():
        check_choice(section, name, allowed)
    for name in positive_ints:
        value = getattr(section, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise bad(section, name, "an integer >= 1")
    for names, ok, allowed in (
        (positive, lambda v: v > 0, "a finite number > 0"),
        (non_negative, lambda v: v >= 0, "a finite number >= 0"),
        (fractions, lambda v: 0 <= v <= 1, "a number in [0, 1]"),
    ):
        for name in names:
            value = getattr(section, name)
            if not _number(value) or not math.isfinite(value) or not ok(value):
                raise bad(section, name, allowed)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
