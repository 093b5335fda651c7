"""Extensions from installed packages: the ``spyrl.plugins`` entry-point group.

A package that adds a degradation operator (:func:`spy_env.degrade.register_degrader`), a task
(:func:`spy_env.tasks.register_task`) or an agent backend registers it when its module is imported.
Declaring that module in its ``pyproject.toml``

.. code-block:: toml

    [project.entry-points."spyrl.plugins"]
    my_operators = "my_package.operators"

makes every ``spyrl`` command import it before it reads its arguments, so ``--degrade`` and
``--task`` offer what the package registered, and buffer rows name the operator it ran. In
Python, importing the module is enough (``import my_package.operators``); :func:`load_plugins`
does it for every installed package at once.
"""

from __future__ import annotations

import importlib.metadata

__all__ = ["GROUP", "load_plugins"]

GROUP = "spyrl.plugins"
_loaded: dict[str, str] = {}


def load_plugins() -> dict[str, str]:
    """Import every module declared in the ``spyrl.plugins`` group (once); returns ``name -> module``.

    A plugin that fails to import raises ``ImportError`` naming it and its package, so a command
    stops with one ``error:`` line instead of running without the operator a user asked for.
    """
    for entry in importlib.metadata.entry_points(group=GROUP):
        if entry.name in _loaded:
            continue
        package = entry.dist.name if entry.dist is not None else "an unknown package"
        try:
            entry.load()
        except Exception as e:  # a plugin's own bug: named, not a traceback of spyrl's
            raise ImportError(
                f"the spyrl plugin {entry.name!r} ({entry.value}, from {package}) failed to import: "
                f"{type(e).__name__}: {e}"
            ) from e
        _loaded[entry.name] = entry.value
    return dict(_loaded)
