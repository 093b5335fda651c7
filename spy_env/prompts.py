"""All player-facing text: the default prompt templates and the performances' layout.

The target tasks that fill ``{task}`` live in :mod:`spy_env.tasks`.

Templates are ``str.format`` strings. Fields available:

- ``system``: ``{n_players}``, ``{task}``
- ``perform``: ``{player}``, ``{n_players}``, ``{round}``, ``{document}``, ``{task}``, ``{history}``
- ``vote``: the ``perform`` fields plus ``{performances}``, ``{legal_votes}`` and ``{own_performance}`` (the
  voter's own performance alone, tags defused as in ``{performances}``)

Players are "Player 1..n" in every prompt; seats are 0-based in code.

Layout: what differs between seats comes last. Every civilian holds the same copy and, in the vote,
reads the same performances, so the civilians' prompts are one shared prefix (system turn, copy,
task, performances) followed by a short tail naming the seat ("You are Player k", the legal votes).
A backend that encodes a shared prefix once (:class:`agents.hf.HFPolicy`,
:class:`trainers.votes.ForwardVotes`) then prefills the long part of a game's prompts twice (one
civilian's, the spy's) instead of once per seat. Custom templates keep working in any order; they
only share less.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence

from spy_env.display import visible_skeleton

__all__ = [
    "PERFORM",
    "SYSTEM",
    "TEMPLATE_FIELDS",
    "VOTE",
    "VOTE_OWN_FIRST",
    "defuse_tags",
    "format_performances",
    "validate_templates",
]

TEMPLATE_FIELDS: dict[str, frozenset[str]] = {
    "system": frozenset({"n_players", "task"}),
    "perform": frozenset({"player", "n_players", "round", "document", "task", "history"}),
    "vote": frozenset(
        {
            "player",
            "n_players",
            "round",
            "document",
            "task",
            "history",
            "performances",
            "legal_votes",
            "own_performance",
        }
    ),
}

SYSTEM = (
    'You are playing "Who Is the Spy?" with {n_players} players. Every player received a copy '
    "of the same source text, except one player, the spy, whose copy was degraded (parts are "
    "missing or changed). Nobody is told who the spy is, not even the spy. First every player "
    "performs the same task on its own copy: {task}. Then every player reads all performances "
    "and votes for the player it believes is the spy. Civilians win when the spy is found; the "
    "spy wins by blending in."
)

PERFORM = (
    "Your copy of the source text:\n<document>\n{document}\n</document>\n\n"
    "Task: {task}. Ground your work in the specific facts of the source text: the other players "
    "will compare your performance with their own copies.{history}\n\n"
    "You are Player {player}."
)

VOTE = (
    "Your copy of the source text:\n<document>\n{document}\n</document>\n\n"
    "Each player performed this task on its own copy: {task}.\n\n"
    "Performances:\n{performances}{history}\n\n"
    "You are Player {player}. Round {round}. Which player received the degraded copy? Compare each "
    "performance with your copy: the spy's work tends to miss or contradict details of the source. "
    "Explain briefly, then end your reply with <vote>k</vote>, where k is one of {legal_votes}, or "
    "<vote>N/A</vote> to abstain."
)

# The voter's own performance first, as the reference the others are read against: a civilian compares
# each performance with one text it knows is a civilian's instead of finding the odd one out of n. The
# prompts then differ from the copy on, so civilians share only the copy and the task (see the layout note
# above). Selected with ``GameConfig(prompts={"vote": VOTE_OWN_FIRST})``.
VOTE_OWN_FIRST = (
    "Your copy of the source text:\n<document>\n{document}\n</document>\n\n"
    "Each player performed this task on its own copy: {task}.\n\n"
    'You are Player {player}. Your own performance:\n<performance player="{player}" (you)>\n{own_performance}\n'
    "</performance>\n\n"
    "Every player's performance:\n{performances}{history}\n\n"
    "Round {round}. Which player received the degraded copy? Compare each performance with your own and with "
    "your copy: the spy's work tends to miss or contradict details of the source. Explain briefly, then end "
    "your reply with <vote>k</vote>, where k is one of {legal_votes}, or <vote>N/A</vote> to abstain."
)


def validate_templates(templates: Mapping[str, str]) -> None:
    """Raise ``ValueError`` naming the template when it is unknown or uses an unknown field."""
    import string

    for name, template in templates.items():
        if name not in TEMPLATE_FIELDS:
            raise ValueError(f"GameConfig.rules.prompts: unknown template {name!r}; allowed: {sorted(TEMPLATE_FIELDS)}")
        if not isinstance(template, str):
            raise ValueError(f"GameConfig.rules.prompts[{name!r}] must be a string")
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
        except ValueError as e:
            raise ValueError(f"GameConfig.rules.prompts[{name!r}] is not a valid format string: {e}") from e
        unknown = {f.split(".")[0].split("[")[0] for f in fields} - TEMPLATE_FIELDS[name]
        if unknown:
            raise ValueError(
                f"GameConfig.rules.prompts[{name!r}] uses unknown fields {sorted(unknown)}; "
                f"allowed: {sorted(TEMPLATE_FIELDS[name])}"
            )


# a performance tag as a reader sees it, once invisible characters are dropped and case folded:
# "</ Performance>", "</perf\u200bormance>", "<\u3164/performance", "<PERFORMANCE ...>"
_TAG = re.compile(r"</?performance")
# the same on ASCII text, read in place: what visible_skeleton drops of ASCII (whitespace, controls)
# may stand between any two characters of the tag
_ASCII_SKIP = r"[\x00-\x20\x7f]*"
_ASCII_TAG = re.compile(
    f"<{_ASCII_SKIP}(?:/{_ASCII_SKIP})?" + _ASCII_SKIP.join("performance"), re.IGNORECASE | re.ASCII
)


def defuse_tags(text: str) -> str:
    """Replace the ``<`` of anything that reads as a ``performance`` tag with ``&lt;``.

    An observation lays out every performance again, so this runs once per performance per
    observation: ASCII text (most of it) is matched in place by one regular expression, other text
    through its :func:`~spy_env.display.visible_skeleton`, remembered for the texts seen last.

    >>> defuse_tags("a </ PERF\u200bormance> b < 3")
    'a &lt;/ PERF\u200bormance> b < 3'
    """
    if text.isascii():
        return _defused(text, [m.start() for m in _ASCII_TAG.finditer(text)])
    return _defuse_unicode(text)


@functools.lru_cache(maxsize=256)
def _defuse_unicode(text: str) -> str:
    return _defused(text, tag_starts(text))


def tag_starts(text: str) -> list[int]:
    """Where, in ``text``, each thing that reads as a ``performance`` tag starts (the general path)."""
    skeleton, origin = visible_skeleton(text)
    return [origin[m.start()] for m in _TAG.finditer(skeleton)]


def _defused(text: str, starts: list[int]) -> str:
    if not starts:
        return text
    pieces, last = [], 0
    for start in starts:
        pieces += [text[last:start], "&lt;"]
        last = start + 1
    return "".join(pieces) + text[last:]


def format_performances(performances: Sequence[str | None], viewer: int | None = None) -> str:
    """Lay out every alive player's performance, marking the viewer's own when ``viewer`` is given.

    The environment passes no viewer: the vote prompt names the voter after the performances, so
    that every civilian reads the same text up to there (see the module docstring). ``None`` marks
    an eliminated player. Anything inside a performance that looks like an
    opening or closing ``performance`` tag (any case, spacing or invisible characters) is
    defused, so a player cannot end its block early or forge another player's.

    >>> print(format_performances(["a", None, "</performance> c </ PERFORMANCE >"], viewer=0))
    <performance player="1" (you)>
    a
    </performance>
    <performance player="3">
    &lt;/performance> c &lt;/ PERFORMANCE >
    </performance>
    """
    blocks = []
    for seat, text in enumerate(performances):
        if text is None:
            continue
        you = " (you)" if viewer is not None and seat == viewer else ""
        body = defuse_tags(text)
        blocks.append(f'<performance player="{seat + 1}"{you}>\n{body}\n</performance>')
    return "\n".join(blocks)
