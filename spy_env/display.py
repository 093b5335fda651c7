"""Untrusted text made safe to show on a terminal: the one place that does it.

Model completions, documents, ids, file paths and agent names come from models, files and users.
Shown raw, an escape sequence in them can clear the screen or retitle the terminal, and a
``[/red]`` in them is read as rich markup (a ``MarkupError``, or text that silently vanishes).

- :func:`terminal_safe` removes escape sequences (CSI, OSC, DCS, ...), other C0/C1 control
  characters (keeping newline and tab) and bidirectional overrides (which can make text read
  differently from what it is);
- :func:`markup_safe` does that and escapes rich markup, for text interpolated into a markup string.

>>> terminal_safe("a\\x1b[2Jb\\x1b]0;owned\\x07c\\rd")
'abcd'
>>> markup_safe("doc[/red]1")
'doc\\\\[/red]1'
"""

from __future__ import annotations

import re

__all__ = ["markup_safe", "terminal_safe"]

_ESCAPES = re.compile(
    r"""
    \x1b\[[0-?]*[ -/]*[@-~]                          # CSI: colours, cursor, clear screen
    | \x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?       # OSC/DCS/SOS/PM/APC: titles, hyperlinks, ...
    | \x1b[ -/]*[0-~]                                # two-byte escapes
    | \x9b[0-?]*[ -/]*[@-~]                          # 8-bit CSI
    | [\x9d\x90\x98\x9e\x9f][^\x07\x9c]*[\x07\x9c]?  # 8-bit OSC/DCS/...
    """,
    re.VERBOSE,
)
# every other control character except \t and \n; bidi embeddings, overrides and isolates
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: object) -> str:
    """``str(text)`` without escape sequences and control characters (newlines and tabs kept)."""
    text = str(text)
    if text.isascii() and text.isprintable():
        return text
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


def markup_safe(text: object) -> str:
    """:func:`terminal_safe` text with rich markup escaped, to interpolate into a markup string."""
    from rich.markup import escape

    return escape(terminal_safe(text))
