"""Optional dependencies, found before the work starts.

A command that trains for half an hour and then needs matplotlib for its chart should say so in
its first second, not at the end. Each package a job will need is an :class:`Extra` (the module
it imports, what to install, what needs it); :func:`require` looks all of them up without
importing them and raises one :class:`ImportError` naming every missing one and the command that
installs it.

>>> require([Extra("json", "python itself", "reading buffers")])
>>> require([Extra("no_such_module_xyz", "spyrl[train]", "the training curves")])
Traceback (most recent call last):
...
ImportError: the training curves needs no_such_module_xyz: pip install 'spyrl[train]'
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Extra", "missing", "require"]


@dataclass(frozen=True)
class Extra:
    """One optional package a job needs: ``module`` is its import name, ``install`` what ``pip``
    installs (an extra of spyrl such as ``spyrl[train]``, or a package), ``why`` what needs it."""

    module: str
    install: str
    why: str

    @property
    def command(self) -> str:
        return f"pip install '{self.install}'" if "[" in self.install else f"pip install {self.install}"


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        return False


def missing(extras: Iterable[Extra]) -> list[Extra]:
    """The extras whose module cannot be found, in order, each module once."""
    seen: set[str] = set()
    out = []
    for extra in extras:
        if extra.module in seen:
            continue
        seen.add(extra.module)
        if not _found(extra.module):
            out.append(extra)
    return out


def require(extras: Iterable[Extra]) -> None:
    """Raise one ``ImportError`` naming every missing extra and how to install it; return if none is."""
    absent = missing(extras)
    if not absent:
        return
    parts = [f"{extra.why} needs {extra.module}" for extra in absent]
    commands = list(dict.fromkeys(extra.command for extra in absent))
    raise ImportError(f"{'; '.join(parts)}: {' && '.join(commands)}")
