"""Degradation operators g(x): how the spy's copy of the source document is made.

Every operator is a pure function of the text and a ``numpy`` generator, so a seed fixes the
result. Each returns a :class:`Degraded` record with the spy's text and the spans it changed
(character offsets into the original), which the environment reveals at the end of a game.

Operators (docs/GUIDE.md):

- ``mask_spans`` (default for math, ratio 0.4): removes contiguous sentence spans totalling
  about ``ratio`` of the text, task-relevant sentences (numbers, LaTeX) first; each removed
  span becomes a visible placeholder (``"[…]"``; ``""`` removes silently).
- ``drop_sentences``: removes about ``ratio`` of the sentences, chosen uniformly, silently.
- ``perturb_numbers``: same text, about ``ratio`` of the numbers changed (at least one).
- ``neighbor``: the most similar *other* document of the corpus.
- ``blank``: nothing at all.

New operators are added with :func:`register_degrader`; an installed package's reach the
``spyrl`` commands through the ``spyrl.plugins`` entry points (:mod:`spy_env.plugins`).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "DEGRADERS",
    "DegradeContext",
    "Degraded",
    "Operator",
    "Span",
    "needs_neighbors",
    "register_degrader",
    "sentence_spans",
]


@dataclass(frozen=True)
class Span:
    """One change made to the source: ``text[start:end]`` became ``replacement``."""

    start: int
    end: int
    original: str
    replacement: str


@dataclass(frozen=True)
class Degraded:
    """The spy's copy and what differs from the original."""

    text: str
    spans: tuple[Span, ...]
    operator: str


@dataclass(frozen=True)
class DegradeContext:
    """Everything an operator may use besides the text itself."""

    ratio: float = 0.4
    placeholder: str = "[…]"
    relevant_first: bool = True
    # Returns the most similar other document's text (only ``neighbor`` calls it).
    neighbor: Callable[[], str] | None = field(default=None, compare=False)


Degrader = Callable[[str, np.random.Generator, DegradeContext], Degraded]


@dataclass(frozen=True)
class Operator:
    """A registered operator: the function, and what it needs from the game besides its document.

    ``needs_neighbors``: it reads another document of the corpus (:attr:`DegradeContext.neighbor`), so a game
    with it needs a corpus of at least two documents. Called like the function it wraps.
    """

    fn: Degrader
    needs_neighbors: bool = False

    def __call__(self, text: str, rng: np.random.Generator, ctx: DegradeContext) -> Degraded:
        return self.fn(text, rng, ctx)


DEGRADERS: dict[str, Operator] = {}


def register_degrader(name: str, *, needs_neighbors: bool = False) -> Callable[[Degrader], Degrader]:
    """Decorator that makes an operator available as ``GameConfig(degrade=name)``; ``needs_neighbors``: it
    reads another document of the corpus. A name registered twice is a ``ValueError`` (a plugin would
    silently replace a built-in operator otherwise)."""

    def wrap(fn: Degrader) -> Degrader:
        if name in DEGRADERS:
            raise ValueError(f"degradation operator {name!r} is already registered")
        DEGRADERS[name] = Operator(fn, needs_neighbors)
        return fn

    return wrap


def needs_neighbors(name: str) -> bool:
    """Whether the operator ``name`` reads another document (an unknown name reads none: the config's own
    check names it; a bare function put in :data:`DEGRADERS` by hand, as before operators carried what they
    need, reads none either)."""
    return bool(getattr(DEGRADERS.get(name), "needs_neighbors", False))


# A sentence ends at . ! ? followed by whitespace, or at a blank line / newline (headings,
# list items and display math each stand on their own line in Markdown).
_SENTENCE = re.compile(r"[^\n.!?]*(?:[.!?](?=\s|$)|\n|$)|[^\n]+?(?:\n|$)")
_MARKER = re.compile(r"(?:\d{1,3}[.)]|[-*+])")
_RELEVANT = re.compile(r"\d|\$|\\")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")


@functools.lru_cache(maxsize=4096)
def sentence_spans(text: str) -> tuple[tuple[int, int], ...]:
    """Character spans of the sentences of ``text`` (whitespace trimmed, empty ones dropped).

    >>> t = "One. Two has $x$!\\n## Head\\n1. Three"
    >>> [t[a:b] for a, b in sentence_spans(t)]
    ['One.', 'Two has $x$!', '## Head', '1. Three']
    """
    spans: list[tuple[int, int]] = []
    pos, n = 0, len(text)
    while pos < n:
        m = _SENTENCE.match(text, pos)
        end = m.end() if m and m.end() > pos else pos + 1
        a, b = pos, end
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b > a:
            if spans and _MARKER.fullmatch(text, *spans[-1]):
                a = spans.pop()[0]  # a list marker ("1.", "-") belongs to what follows
            spans.append((a, b))
        pos = end
    return tuple(spans)


@functools.lru_cache(maxsize=4096)
def _irrelevant(text: str) -> tuple[bool, ...]:
    """For each sentence of ``text``: whether it holds no number or LaTeX (``mask_spans`` takes those last)."""
    return tuple(_RELEVANT.search(text, a, b) is None for a, b in sentence_spans(text))


def _remove(text: str, chosen: Sequence[tuple[int, int]], placeholder: str, name: str) -> Degraded:
    """Replace the chosen spans (merged when adjacent) by ``placeholder``."""
    merged: list[list[int]] = []
    for a, b in sorted(chosen):
        if merged and text[merged[-1][1] : a].strip() == "":
            merged[-1][1] = b
        else:
            merged.append([a, b])
    pieces, spans, pos = [], [], 0
    for a, b in merged:
        pieces.append(text[pos:a])
        pieces.append(placeholder)
        spans.append(Span(a, b, text[a:b], placeholder))
        pos = b
    pieces.append(text[pos:])
    return Degraded("".join(pieces), tuple(spans), name)


@register_degrader("mask_spans")
def mask_spans(text: str, rng: np.random.Generator, ctx: DegradeContext) -> Degraded:
    """``g(x)`` for math: remove about ``ctx.ratio`` of the characters of ``x``, task-relevant sentences first.

    Whole sentences go (those with numbers/LaTeX first), adjacent ones merged into one span; each
    span becomes ``ctx.placeholder`` (``"[…]"``, visible), or nothing with ``""`` (silent removal,
    the paper preset's choice: a visible marker tells the spy it is the spy).
    """
    sentences = sentence_spans(text)
    if not sentences:
        return Degraded(text, (), "mask_spans")
    order = rng.permutation(len(sentences)).tolist()
    if ctx.relevant_first:
        # Stable sort keeps the random order within each class.
        order.sort(key=_irrelevant(text).__getitem__)
    target = ctx.ratio * sum(b - a for a, b in sentences)
    chosen, removed = [], 0
    for i in order:
        a, b = sentences[i]
        if removed >= target:
            break
        # Skip a sentence that would overshoot by more than half of itself, unless nothing
        # has been removed yet (a one-sentence document still gets masked).
        if chosen and removed + (b - a) - target > (b - a) / 2:
            continue
        chosen.append((a, b))
        removed += b - a
    return _remove(text, chosen, ctx.placeholder, "mask_spans")


@register_degrader("drop_sentences")
def drop_sentences(text: str, rng: np.random.Generator, ctx: DegradeContext) -> Degraded:
    """Silently remove ``round(ratio * n)`` sentences (at least one), chosen uniformly."""
    sentences = sentence_spans(text)
    if not sentences:
        return Degraded(text, (), "drop_sentences")
    k = min(len(sentences), max(1, round(ctx.ratio * len(sentences))))
    picked = sorted(rng.choice(len(sentences), size=k, replace=False).tolist())
    return _remove(text, [sentences[i] for i in picked], "", "drop_sentences")


@register_degrader("perturb_numbers")
def perturb_numbers(text: str, rng: np.random.Generator, ctx: DegradeContext) -> Degraded:
    """Change about ``ratio`` of the numbers (at least one) to different numbers of the same shape."""
    numbers = list(_NUMBER.finditer(text))
    if not numbers:
        return Degraded(text, (), "perturb_numbers")
    k = min(len(numbers), max(1, round(ctx.ratio * len(numbers))))
    picked = sorted(rng.choice(len(numbers), size=k, replace=False).tolist())
    pieces, spans, pos = [], [], 0
    for i in picked:
        m = numbers[i]
        new = _other_number(m.group(), rng)
        pieces += [text[pos : m.start()], new]
        spans.append(Span(m.start(), m.end(), m.group(), new))
        pos = m.end()
    pieces.append(text[pos:])
    return Degraded("".join(pieces), tuple(spans), "perturb_numbers")


def _other_number(number: str, rng: np.random.Generator) -> str:
    """A different number with the same digit count and decimals (``7`` → ``3``, ``2.50`` → ``8.15``)."""
    whole, _, frac = number.partition(".")
    while True:
        lo = 10 ** (len(whole) - 1) if len(whole) > 1 else 0
        new_whole = str(int(rng.integers(lo, 10 ** len(whole))))
        new_frac = "".join(str(int(d)) for d in rng.integers(0, 10, size=len(frac)))
        new = new_whole + ("." + new_frac if frac else "")
        if new != number:
            return new


@register_degrader("neighbor", needs_neighbors=True)
def neighbor(text: str, rng: np.random.Generator, ctx: DegradeContext) -> Degraded:
    """Replace the document by the most similar other document of the corpus."""
    if ctx.neighbor is None:
        raise ValueError("degrade='neighbor' needs a corpus with at least two documents")
    other = ctx.neighbor()
    return Degraded(other, (Span(0, len(text), text, other),), "neighbor")


@register_degrader("blank")
def blank(text: str, rng: np.random.Generator, ctx: DegradeContext) -> Degraded:
    """Give the spy nothing."""
    return Degraded("", (Span(0, len(text), text, ""),), "blank")


_WORD = re.compile(r"[a-z]{3,}")


def bag_of_words(text: str) -> Counter[str]:
    """Lower-cased word counts used for document similarity."""
    return Counter(_WORD.findall(text.lower()))


def most_similar(index: int, bags: Sequence[Counter[str]]) -> int:
    """Index of the document with the highest cosine similarity to ``bags[index]`` (not itself).

    >>> bags = [bag_of_words(t) for t in ["apple pie sugar", "apple sugar cake", "derivative limit"]]
    >>> most_similar(0, bags), most_similar(2, bags) in (0, 1)
    (1, True)
    """
    query = bags[index]
    qnorm = math.sqrt(sum(v * v for v in query.values())) or 1.0
    best, best_score = (index + 1) % len(bags), -1.0
    for j, bag in enumerate(bags):
        if j == index:
            continue
        dot = sum(v * bag.get(w, 0) for w, v in query.items())
        norm = math.sqrt(sum(v * v for v in bag.values())) or 1.0
        score = dot / (qnorm * norm)
        if score > best_score:
            best, best_score = j, score
    return best
