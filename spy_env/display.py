"""Untrusted text made safe to show on a terminal: the one place that does it.

Model completions, documents, ids, file paths and agent names come from models, files and users.
Shown raw, an escape sequence in them can clear the screen or retitle the terminal, and a
``[/red]`` in them is read as rich markup (a ``MarkupError``, or text that silently vanishes).

- :func:`terminal_safe` removes escape sequences (CSI, OSC, DCS, ...), other C0/C1 control
  characters (keeping newline and tab) and bidirectional overrides (which can make text read
  differently from what it is);
- :func:`markup_safe` does that and escapes rich markup, for text interpolated into a markup string;
- :func:`is_invisible` and :func:`visible_skeleton` know which characters a reader does not see
  (Unicode default-ignorable code points, format and control characters, combining marks,
  unassigned code points and whitespace) and which look like others (the Unicode confusables
  data of UTS #39, small capitals, angle brackets), so that a check for a tag such as
  ``</performance>`` sees ``</perf\\u200bormance>``, ``<\\u3164/performance>`` or
  ``</p\\u0435rformance>`` (a Cyrillic ``е``) as the tag it reads as.

>>> terminal_safe("a\\x1b[2Jb\\x1b]0;owned\\x07c\\rd")
'abcd'
>>> markup_safe("doc[/red]1")
'doc\\\\[/red]1'
>>> visible_skeleton("<\\u200b/PERF\\u034formance>")
('</performance>', [0, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15])
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = ["is_invisible", "look_alike", "markup_safe", "terminal_safe", "visible_skeleton"]

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


# Default_Ignorable_Code_Point (Unicode DerivedCoreProperties.txt) outside the categories below:
# Hangul fillers (Lo), which render as nothing in most fonts; and symbols that render as a blank
# although Unicode files them as visible (So): BRAILLE PATTERN BLANK, MUSICAL SYMBOL NULL NOTEHEAD.
_IGNORABLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\U0001d159")
# Cc/Cf: controls and format characters (zero-width space, joiners, bidi marks, tags U+E0000..);
# Mn/Me: combining marks, variation selectors (U+FE00.., U+E0100..), U+034F; Cn: unassigned
# (U+2065, U+FFF0..U+FFF8, ...); Z*: separators.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cn", "Co", "Cs", "Mn", "Me", "Zs", "Zl", "Zp"})


def is_invisible(char: str) -> bool:
    """Whether a reader may not see ``char`` (one character) as a character of its own.

    >>> [is_invisible(c) for c in "a<\\u200b\\u034f\\ufe0f\\u3164\\U000e0020 \\u2800"]
    [False, False, True, True, True, True, True, True, True]
    """
    return char in _IGNORABLE_LETTERS or unicodedata.category(char) in _INVISIBLE_CATEGORIES or char.isspace()


@functools.lru_cache(maxsize=4096)
def look_alike(char: str) -> str:
    """The ASCII character a non-ASCII ``char`` (NFKC-normalised, case-folded) reads as, or ``char``.

    From the Unicode data, not a list of our own: the confusables of UTS #39 (Cyrillic ``е``,
    Greek ``ο``, ``‹``; the ``confusable_homoglyphs`` package ships them), the character names of
    small capitals (``ᴘ`` is LATIN LETTER SMALL CAPITAL P, which UTS #39 leaves alone) and of
    angle brackets and less-than signs (``⟨``, ``〈``, ``﹤``, ``«``).

    >>> [look_alike(c) for c in "\u0435\u03bf\u1d18\ua730\u27e8\u27e9\u00e9"]
    ['e', 'o', 'p', 'f', '<', '>', 'é']
    """
    from confusable_homoglyphs.confusables import confusables_data

    name = unicodedata.name(char, "")
    if small_capital := _SMALL_CAPITAL.fullmatch(name):
        return small_capital.group(1).lower()
    for side, ascii_char in (("LEFT", "<"), ("RIGHT", ">")):
        sign = "LESS-THAN SIGN" if side == "LEFT" else "GREATER-THAN SIGN"
        if name.endswith(sign) or ("ANGLE" in name and side in name and ("BRACKET" in name or "QUOTATION" in name)):
            return ascii_char
    homoglyphs = [h["c"] for h in confusables_data.get(char, ()) if len(h["c"]) == 1 and h["c"].isascii()]
    letters = [h for h in homoglyphs if h.isalnum()]
    return (letters or homoglyphs or [char])[0].lower()


_SMALL_CAPITAL = re.compile(r"LATIN LETTER SMALL CAPITAL ([A-Z])")


@functools.lru_cache(maxsize=4096)
def _fold(char: str) -> str:
    """A visible non-ASCII character as :func:`visible_skeleton` reads it: its look-alike if it
    has one (NFKC would turn the lunate sigma ``ϲ``, which looks like ``c``, into ``ς``), else NFKC
    and then each character as its look-alike (capital Greek ``Ε`` looks like ``E``, its lower
    case ``ε`` does not), else case-folded and then as its look-alike."""
    alike = look_alike(char)
    if alike.isascii():
        return alike
    out = []
    for c in unicodedata.normalize("NFKC", char):
        alike = c.lower() if c.isascii() else look_alike(c)
        if alike != c:
            out.append(alike)
            continue
        out += [f if f.isascii() else look_alike(f) for f in c.casefold()]
    return "".join(out)


def visible_skeleton(text: str) -> tuple[str, list[int]]:
    """``text`` as a reader sees it, for matching: invisible characters dropped, the rest
    NFKC-normalised (fullwidth ``＜`` is ``<``), case-folded and mapped to the ASCII character it
    looks like (:func:`look_alike`); with, for each character of the skeleton, the index in
    ``text`` it came from. Linear in ``len(text)``.
    """
    chars: list[str] = []
    origin: list[int] = []
    for i, char in enumerate(text):
        if char.isascii():
            if char.isspace() or not char.isprintable():
                continue
            chars.append(char.lower())
            origin.append(i)
        elif not is_invisible(char):
            for folded in _fold(char):
                chars.append(folded)
                origin.append(i)
    return "".join(chars), origin
