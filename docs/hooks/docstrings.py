"""Griffe extension: the code's reST-flavoured prose docstrings read as Markdown on the API pages.

The docstrings are written for ``help()`` and Sphinx habits, not for Markdown; this changes what the
site shows, never the source:

- a role (``:class:`Game```, ``:func:`~spy_env.make```) becomes a code span of its target (the last
  part only after ``~``);
- a doctest paragraph (lines starting ``>>>`` and their output) becomes a ``pycon`` code block;
- a literal block's ``::`` becomes ``:`` and a ``.. code-block:: LANG`` line is dropped (the indented
  block after either is already a Markdown code block).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|obj|exc|const|ref):`(~?)([^`]+)`")
DOCTEST = re.compile(r"^([ \t]*)>>> .*(?:\n\1(?![ \t]*$).*)*", re.M)
LITERAL = re.compile(r"(\S)::[ \t]*$", re.M)
DIRECTIVE = re.compile(r"^[ \t]*\.\. code-block::.*\n", re.M)


class MarkdownDocstrings(griffe.Extension):
    """Rewrites each object's docstring as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)


def markdown(docstring: str) -> str:
    """The docstring with its reST-isms turned into Markdown.

    >>> markdown("See :class:`~spy_env.game.Game`.")
    'See `Game`.'
    >>> markdown("Use it::")
    'Use it:'
    """
    text = ROLE.sub(lambda m: f"`{m.group(2).rpartition('.')[2] if m.group(1) else m.group(2)}`", docstring)
    text = DOCTEST.sub(lambda m: f"{m.group(1)}```pycon\n{m.group(0)}\n{m.group(1)}```", text)
    return DIRECTIVE.sub("", LITERAL.sub(r"\1:", text))
