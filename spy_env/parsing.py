"""Everything that reads model output: think-stripping, boxed answers, votes, verbatim copies.

Model output is game input. Every function here takes any string and returns a value or
``None``; none of them raises on content and none of them executes anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "Shingles",
    "VoteParse",
    "clean_text",
    "copied_run",
    "last_boxed",
    "last_vote_tag",
    "parse_vote",
    "shingles",
    "strip_think",
    "vote_reasoning",
]

# Characters a text observation may hold: tab/newline/CR, printable ASCII, and the rest of the
# Basic Multilingual Plane without surrogates and C1 controls. Wide enough for Markdown, LaTeX
# and any human language; astral characters (emoji, math alphanumerics) become U+FFFD.
TEXT_CHARSET: str = "".join(
    chr(c) for c in (9, 10, 13, *range(0x20, 0x7F), *range(0xA0, 0xD800), *range(0xE000, 0xFFFE))
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ufffe\uffff]")
_NON_BMP = re.compile(r"[\ud800-\udfff\U00010000-\U0010ffff]")


def clean_text(text: str) -> str:
    """Return ``text`` restricted to :data:`TEXT_CHARSET`.

    Control characters are dropped; surrogates and characters outside the Basic Multilingual
    Plane become U+FFFD, so the text always fits the environment's ``Text`` spaces.

    >>> clean_text("a\\x00b\\u0007c 🙂 $x^2$")
    'abc \\ufffd $x^2$'
    """
    if text.isascii():  # most replies: no surrogates or astral characters, only controls can go
        return text if text.isprintable() else _CONTROL.sub("", text)
    return _NON_BMP.sub("\ufffd", _CONTROL.sub("", text))


_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"


def strip_think(text: str) -> str:
    """Remove ``<think>`` reasoning so that only the final answer is shown to other players.

    A closed block, or a reply that starts mid-thought (chat templates that open ``<think>``
    in the prompt), keeps what follows the last ``</think>``; an unclosed ``<think>`` drops
    everything after it.

    >>> strip_think("<think>secret</think> Answer: 4")
    'Answer: 4'
    >>> strip_think("still thinking... </think>Done")
    'Done'
    >>> strip_think("Problem. <think>never closed")
    'Problem.'
    """
    close = text.rfind(_THINK_CLOSE)
    if close >= 0:
        text = text[close + len(_THINK_CLOSE) :]
    open_ = text.find(_THINK_OPEN)
    if open_ >= 0:
        text = text[:open_]
    return text.strip()


_BOXED = "\\boxed"


def last_boxed(text: str) -> str | None:
    """Return the content of the last ``\\boxed{...}`` with balanced braces, or ``None``.

    Empty boxes and unbalanced braces count as no answer.

    >>> last_boxed(r"so $x = \\boxed{\\frac{1}{2}}$ and done")
    '\\\\frac{1}{2}'
    >>> last_boxed(r"\\boxed{3} then \\boxed{ 4 }")
    '4'
    >>> last_boxed(r"\\boxed{}") is None, last_boxed(r"\\boxed{1") is None
    (True, True)
    """
    start = text.rfind(_BOXED)
    while start >= 0:
        i = start + len(_BOXED)
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            depth = 0
            for j in range(i, len(text)):
                ch = text[j]
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        content = text[i + 1 : j].strip()
                        if content:
                            return content
                        break
        start = text.rfind(_BOXED, 0, start)
    return None


@dataclass(frozen=True)
class VoteParse:
    """Outcome of reading a vote: ``target`` is a 0-based seat, ``None`` for abstain/invalid."""

    target: int | None
    abstain: bool
    violation: str | None


_VOTE_TAG = re.compile(r"<\s*vote\s*>(.*?)<\s*/\s*vote\s*>", re.IGNORECASE | re.DOTALL)
_VOTE_SEAT = re.compile(r"^(?:player[\s_#-]*)?([0-9]{1,4})$", re.IGNORECASE)  # ASCII digits only: "３" is no vote
_ABSTAIN = frozenset({"n/a", "na", "none", "abstain", "no vote", "n.a."})


def parse_vote(text: str, n_players: int) -> VoteParse:
    """Read the final ``<vote>k</vote>`` of a reply; ``k`` is 1-based as in the prompts.

    ``<vote>N/A</vote>`` abstains. A missing, unparseable or out-of-range vote is an
    abstention with a violation code (``missing_vote``, ``unparseable_vote``,
    ``out_of_range_vote``).

    >>> parse_vote("I think it is player 2. <vote>2</vote>", 5)
    VoteParse(target=1, abstain=False, violation=None)
    >>> parse_vote("<vote>N/A</vote>", 5)
    VoteParse(target=None, abstain=True, violation=None)
    >>> parse_vote("<vote>7</vote>", 5).violation
    'out_of_range_vote'
    >>> parse_vote("no tag", 5).violation
    'missing_vote'
    """
    matches = _VOTE_TAG.findall(strip_think(text))
    if not matches:
        return VoteParse(None, True, "missing_vote")
    content = " ".join(matches[-1].split())
    if content.lower() in _ABSTAIN:
        return VoteParse(None, True, None)
    seat = _VOTE_SEAT.match(content)
    if seat is None:
        return VoteParse(None, True, "unparseable_vote")
    k = int(seat.group(1))
    if not 1 <= k <= n_players:
        return VoteParse(None, True, "out_of_range_vote")
    return VoteParse(k - 1, False, None)


def last_vote_tag(text: str) -> int:
    """Where the last complete ``<vote>…</vote>`` of ``text`` starts, or -1 (truncation keeps it).

    >>> last_vote_tag("<vote>1</vote> no, <vote>2</vote>"), last_vote_tag("none")
    (19, -1)
    """
    start = -1
    for match in _VOTE_TAG.finditer(text):
        start = match.start()
    return start


def vote_reasoning(text: str) -> str:
    """A vote reply without its ``<think>`` part and its vote tags: the voter's stated reasons.

    >>> vote_reasoning("Player 2 copied nothing from the text. <vote>2</vote>")
    'Player 2 copied nothing from the text.'
    """
    return " ".join(_VOTE_TAG.sub(" ", strip_think(text)).split())


@dataclass(frozen=True)
class Shingles:
    """A source's runs of ``k`` consecutive whitespace-separated words, as :func:`copied_run` reads them:
    the hash of each run, and the source's words (a run repeats the source only if all its words are)."""

    k: int
    words: frozenset[str]
    runs: frozenset[int]


def shingles(text: str, k: int) -> Shingles:
    """The runs of ``k`` consecutive whitespace-separated words of ``text`` (see :class:`Shingles`)."""
    words = text.split()
    return Shingles(k, frozenset(words), frozenset(map(hash, _runs(words, k))))


def _runs(words: list[str], k: int) -> Iterator[tuple[str, ...]]:
    """Every run of ``k`` consecutive ``words`` as a tuple, built in C (``zip`` of shifted lists)."""
    return zip(*[words[i:] for i in range(k)], strict=False)  # the shorter tails end it


def copied_run(text: str, source: Shingles) -> bool:
    """True when ``text`` repeats at least ``source.k`` consecutive words of the source verbatim.

    >>> src = shingles("one two three four five six", 3)
    >>> copied_run("zero two three four nine", src), copied_run("two three nine", src)
    (True, False)
    """
    if not source.runs:
        return False
    words = text.split()
    # Most texts hold no k source words in a row: one pass over the words, in C, answers them
    # without hashing each of their runs.
    if b"\x01" * source.k not in bytes(map(source.words.__contains__, words)):
        return False
    return not source.runs.isdisjoint(map(hash, _runs(words, source.k)))
