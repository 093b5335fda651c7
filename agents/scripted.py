"""Scripted baselines, no model involved: ``random``, ``heuristic`` (lexical), its soft vote and its two matched forms.

All read only the structured observation fields (``copy``, ``performances``,
``vote_targets``, ``stage``), never the rendered prompt.

The heuristic performs from the first numbers and the most frequent terms of its copy and, in
the detection stage, votes for the performance least consistent with its copy: the share of
the performance's numbers that are among the salient numbers of the voter's own copy, plus
the share of its terms found there. When every candidate scores the same it abstains.
``heuristic-soft`` draws that vote from a softmax over the same scores and records the distribution.

``heuristic-matched`` votes as the heuristic and performs in the same form, matched in surface:
every performance is exactly :data:`MATCHED_CHARS` characters long and names exactly
:data:`MATCHED_NUMBERS` quantities (eight numbers in all, with their sum twice). Numbers and terms
its copy lacks (all of them under ``blank``) are another document's (a training document of the
embedded corpus, chosen by its seeded generator), and a fixed filler sentence pads the problem to
the length. As the game's performer it makes an eased game whose spy no rule on length or number
count can find (``agents/rules.py``): only what the performance says, compared with one's own
copy, separates the spy.

``heuristic-disjoint`` is ``heuristic-matched`` whose performers also write *different* texts: seat
``k`` of ``n`` takes the copy's numbers and terms ranked ``k, k + n, k + 2n, …`` (its own share of
the copy, leaving out those found in more than one training document), so two civilians'
performances share no number or term of the document, just as the spy's decoy shares none with
theirs. Scripted civilians who all write the same text make the spy
"the text unlike the others" (the rule ``odd-one-out`` finds it without reading any copy); here no
rule that reads only the performances can, and it votes as the heuristic does against its whole
copy (every number and term of it, not the first three), which still finds the spy.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Sequence
from decimal import Decimal

import numpy as np

from agents.registry import any_argument, register_backend
from spy_env.policy import Action, Observation, Policy
from spy_env.stage import Stage

__all__ = [
    "MATCHED_CHARS",
    "MATCHED_NUMBERS",
    "DisjointHeuristicAgent",
    "HeuristicAgent",
    "MatchedHeuristicAgent",
    "RandomAgent",
]

_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w])")
_TERM = re.compile(r"[A-Za-z]{5,}")
_STOP = frozenset(
    [
        "about",
        "above",
        "after",
        "again",
        "against",
        "because",
        "before",
        "being",
        "below",
        "between",
        "could",
        "every",
        "first",
        "other",
        "their",
        "there",
        "these",
        "those",
        "through",
        "under",
        "until",
        "where",
        "which",
        "while",
        "would",
        "should",
        "since",
        "still",
        "then",
        "than",
        "that",
        "this",
        "with",
        "from",
        "have",
        "will",
        "what",
        "when",
        "your",
        "into",
        "also",
        "each",
        "problem",
        "solve",
        "answer",
        "player",
        "players",
    ]
)


def numbers_in(text: str) -> list[str]:
    """The numbers of ``text`` as the scripted agents read them (digits, an optional decimal part)."""
    return _NUMBER.findall(text)


def _terms(text: str, k: int) -> list[str]:
    counts = Counter(w.lower() for w in _TERM.findall(text) if w.lower() not in _STOP)
    return [w for w, _ in counts.most_common(k)]


def legal_seats(observation: Observation) -> list[int]:
    """The seats a vote may name, from the observation's ``vote_targets``."""
    return [int(s) for s in np.flatnonzero(observation["vote_targets"])]


class RandomAgent:
    """Performs a random sum of two numbers; votes uniformly among the legal targets."""

    def __init__(self, seed: int | None = 0, name: str = "random") -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)

    def act(self, observations: Sequence[Observation]) -> list[str]:
        return [self._one(obs) for obs in observations]

    def _one(self, obs: Observation) -> str:
        if Stage.of(obs["stage"]) is Stage.PERFORM:
            a, b = (int(x) for x in self.rng.integers(1, 100, size=2))
            return f"Problem: what is {a} + {b}?\nSolution: {a} + {b} = {a + b}, so the answer is $\\boxed{{{a + b}}}$."
        legal = legal_seats(obs)
        if not legal:
            return "<vote>N/A</vote>"
        return f"<vote>{int(self.rng.choice(legal)) + 1}</vote>"


class HeuristicAgent:
    """Lexical baseline: performs from its copy's numbers/terms, votes for the least consistent."""

    def __init__(self, seed: int | None = 0, name: str = "heuristic", n_numbers: int = 3) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.n_numbers = n_numbers

    def act(self, observations: Sequence[Observation]) -> list[str | Action]:
        return [
            self._perform(obs) if Stage.of(obs["stage"]) is Stage.PERFORM else self._vote(obs) for obs in observations
        ]

    def _salient(self, copy: str) -> list[str]:
        seen: dict[str, None] = {}
        for number in numbers_in(copy):
            seen.setdefault(number)
            if len(seen) == self.n_numbers:
                break
        return list(seen)

    def _perform(self, obs: Observation) -> str:
        copy = obs["copy"]
        numbers = self._salient(copy)
        terms = _terms(copy, 3)
        topic = ", ".join(terms) if terms else "the text"
        if not numbers:
            return (
                f"Problem: summarise the key idea about {topic}.\nSolution: the text gives no numbers. $\\boxed{{0}}$"
            )
        total = sum(float(x) for x in numbers)
        shown = f"{total:g}"
        expr = " + ".join(numbers)
        return (
            f"Problem: The source discusses {topic}. Using its quantities {', '.join(numbers)}, "
            f"compute their sum.\nSolution: {expr} = {shown}. $\\boxed{{{shown}}}$"
        )

    def _known(self, copy: str) -> tuple[set[str], set[str]]:
        """The numbers and terms of its own copy that a performance is checked against."""
        return set(self._salient(copy)), set(_terms(copy, 30))

    def _scores(self, obs: Observation) -> dict[int, float]:
        """Each legal seat's consistency with this voter's copy: the share of its performance's numbers among
        the copy's salient numbers plus the share of its terms found in the copy (0 to 2)."""
        salient, own_terms = self._known(obs["copy"])
        scores = {}
        for seat in legal_seats(obs):
            text = obs["performances"][seat]
            numbers = numbers_in(text)
            terms = _terms(text, 10)
            number_score = sum(n in salient for n in numbers) / len(numbers) if numbers else 0.0
            term_score = sum(t in own_terms for t in terms) / len(terms) if terms else 0.0
            scores[seat] = number_score + term_score
        return scores

    def _vote(self, obs: Observation) -> str | Action:
        scores = self._scores(obs)
        if not scores or len(set(scores.values())) == 1:
            return self._abstain()
        return self._choose(scores)

    def _abstain(self) -> str | Action:
        return _ABSTAIN

    def _choose(self, scores: dict[int, float]) -> str | Action:
        """The least consistent seat (ties at random)."""
        low = min(scores.values())
        return _accuse(int(self.rng.choice([s for s, v in scores.items() if v == low])))


_ABSTAIN = "All performances look equally consistent with my copy. <vote>N/A</vote>"


def _accuse(seat: int) -> str:
    return f"Player {seat + 1}'s performance matches my copy least. <vote>{seat + 1}</vote>"


SOFT_TEMPERATURE = 0.25


class SoftHeuristicAgent(HeuristicAgent):
    """The heuristic whose vote is drawn from ``softmax(−score / temperature)`` over the legal seats' consistency
    scores, with that distribution recorded (``Action.vote_distribution``); it abstains as the heuristic does.

    As the temperature goes to 0 it votes as the heuristic. What it adds is a graded verdict: with
    ``advantages.perform_reward=expected`` a spy seated among these civilians is rewarded by the
    probability mass their votes put on it, which moves with every matched number or term, where the
    heuristic's all-or-nothing vote gives a spy caught in nearly every game a nearly constant reward.
    """

    def __init__(
        self, seed: int | None = 0, name: str = "heuristic-soft", temperature: float = SOFT_TEMPERATURE
    ) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature: expected > 0, got {temperature!r}")
        super().__init__(seed=seed, name=name)
        self.temperature = temperature

    def _abstain(self) -> Action:
        return Action(_ABSTAIN, vote_distribution={"N/A": 1.0})

    def _choose(self, scores: dict[int, float]) -> Action:
        """A seat drawn from ``softmax(−score / temperature)``, with that distribution recorded."""
        seats = list(scores)
        logits = np.array([-scores[s] / self.temperature for s in seats])
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        pick = seats[int(self.rng.choice(len(seats), p=probs))]
        return Action(
            _accuse(pick), vote_distribution={str(s + 1): float(p) for s, p in zip(seats, probs, strict=True)}
        )


MATCHED_CHARS = 360
MATCHED_NUMBERS = 3
_MATCHED_NUMBER_CHARS = 8  # longer numbers of the copy are skipped, so every performance fits MATCHED_CHARS
_MATCHED_TERM_CHARS = 12
_FILLER = "Each quantity is read from the text as written and every step is shown. "
_DECOY_CHARS = 600
_DECOY_DRAWS = 64


@functools.cache
def _decoy_texts() -> tuple[str, ...]:
    """The training documents of the embedded corpus, cut at 600 characters (never a held-out one)."""
    from spy_env.corpus import CorpusFilter, load_corpus, split_documents

    return tuple(d.text for d in split_documents(load_corpus("embedded", CorpusFilter(truncate=_DECOY_CHARS)))[0])


@functools.cache
def _decoys() -> tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]:
    """(terms, numbers) of every training document of the embedded corpus with three of each.

    What a matched performer writes about when its copy lacks terms or numbers: another document's,
    so a performance from an empty copy reads like one from a real copy (a fixed word list would be
    a shortcut of its own). Held-out documents (``spy_env.corpus.split_documents``) are never used.
    """
    matched = MatchedHeuristicAgent(seed=0)
    pairs = ((tuple(_terms(text, 3)), tuple(matched._salient(text))) for text in _decoy_texts())
    return tuple((terms, numbers) for terms, numbers in pairs if len(terms) == len(numbers) == MATCHED_NUMBERS)


@functools.cache
def _common() -> tuple[frozenset[str], frozenset[str]]:
    """The numbers and terms found in more than one decoy document (``1``, ``2``, ``number``, …).

    ``heuristic-disjoint`` never writes them: civilians' shares of one copy never meet, and a spy's decoy
    would otherwise meet a civilian's text on exactly these, making the spy the text *most* like the others.
    """
    numbers: Counter[str] = Counter()
    terms: Counter[str] = Counter()
    for text in _decoy_texts():
        numbers.update(set(numbers_in(text)))
        terms.update(set(_terms(text, 1_000)))
    return frozenset(x for x, k in numbers.items() if k > 1), frozenset(t for t, k in terms.items() if k > 1)


class MatchedHeuristicAgent(HeuristicAgent):
    """The heuristic, performing in matched form: :data:`MATCHED_CHARS` characters, :data:`MATCHED_NUMBERS` numbers.

    A performance names three quantities (its copy's first distinct numbers of at most 8
    characters), three terms (its copy's most frequent), their sum twice, and a fixed filler cut to
    the length: every performance holds eight numbers and ``chars`` characters whatever the copy.
    What the copy lacks comes from a decoy document drawn by the seeded generator, so it is
    deterministic given the seed and the sequence of observations (like ``random``); a copy with
    three numbers and three terms draws nothing.
    """

    def __init__(self, seed: int | None = 0, name: str = "heuristic-matched", chars: int = MATCHED_CHARS) -> None:
        super().__init__(seed=seed, name=name, n_numbers=MATCHED_NUMBERS)
        self.chars = chars

    def _salient(self, copy: str) -> list[str]:
        seen = dict.fromkeys(n for n in numbers_in(copy) if len(n) <= _MATCHED_NUMBER_CHARS)
        return list(seen)[: self.n_numbers]

    def _material(self, obs: Observation) -> tuple[list[str], list[str]]:
        """The numbers and terms of the copy this performance names (before any decoy fills them)."""
        return self._salient(obs["copy"]), _terms(obs["copy"], 3)

    def _fill(self, obs: Observation, numbers: list[str], terms: list[str]) -> None:
        """Complete ``numbers`` and ``terms`` (in place) from one decoy document drawn by the generator."""
        decoy_terms, decoy_numbers = _decoys()[int(self.rng.integers(len(_decoys())))]
        numbers += [n for n in decoy_numbers if n not in numbers][: self.n_numbers - len(numbers)]
        terms += [t for t in decoy_terms if t not in terms][: 3 - len(terms)]

    def _perform(self, obs: Observation) -> str:
        numbers, terms = self._material(obs)
        if len(numbers) < self.n_numbers or len(terms) < 3:
            self._fill(obs, numbers, terms)
        terms = [t[:_MATCHED_TERM_CHARS] for t in terms]
        shown = format(sum(Decimal(n) for n in numbers), "f")
        problem = (
            f"Problem: The source discusses {', '.join(terms)}. Using its quantities {', '.join(numbers)}, "
            "compute their sum."
        )
        solution = f"\nSolution: {' + '.join(numbers)} = {shown}. $\\boxed{{{shown}}}$"
        pad = self.chars - len(problem) - len(solution)
        if pad < 0:
            raise ValueError(f"MatchedHeuristicAgent.chars={self.chars} is too short for a performance")
        return problem + self._filler(pad) + solution

    def _filler(self, pad: int) -> str:
        """``pad`` characters between the problem and the solution: the filler sentence, cut to fit."""
        return (" " + _FILLER * (pad // len(_FILLER) + 1))[:pad]


class DisjointHeuristicAgent(MatchedHeuristicAgent):
    """``heuristic-matched`` with one share of the copy per seat, so no two performances share content.

    Seat ``k`` of ``n`` names the copy's distinct numbers (of at most 8 characters) and its terms
    (most frequent first), less those of :func:`_common`, ranked ``k, k + n, k + 2n, …``, three of
    each; what its share lacks comes from the same seat's share of decoy documents, and its filler is
    whole sentences. Voting, it scores each performance against its
    whole copy: the share of the performance's numbers and of its terms that the copy holds.
    """

    def __init__(self, seed: int | None = 0, name: str = "heuristic-disjoint", chars: int = MATCHED_CHARS) -> None:
        super().__init__(seed=seed, name=name, chars=chars)

    def _material(self, obs: Observation) -> tuple[list[str], list[str]]:
        copy, seat, n = obs["copy"], int(obs["seat"]), len(obs["performances"])
        common_numbers, common_terms = _common()
        numbers = dict.fromkeys(x for x in numbers_in(copy) if len(x) <= _MATCHED_NUMBER_CHARS)
        numbers = [x for x in numbers if x not in common_numbers]
        terms = [t for t in _terms(copy, 1_000) if t not in common_terms]
        return numbers[seat::n][: self.n_numbers], terms[seat::n][:3]

    def _fill(self, obs: Observation, numbers: list[str], terms: list[str]) -> None:
        """Complete the share from the same seat's share of decoy documents (drawn until it is full), so
        that what a spy writes from an empty copy is drawn as a civilian's is."""
        texts = _decoy_texts()
        for _ in range(_DECOY_DRAWS):
            if len(numbers) >= self.n_numbers and len(terms) >= 3:
                return
            more_numbers, more_terms = self._material({**obs, "copy": texts[int(self.rng.integers(len(texts)))]})
            numbers += [n for n in more_numbers if n not in numbers][: self.n_numbers - len(numbers)]
            terms += [t for t in more_terms if t not in terms][: 3 - len(terms)]
        super()._fill(obs, numbers, terms)  # a late seat of a large table: decoys' shares ran short

    def _known(self, copy: str) -> tuple[set[str], set[str]]:
        return set(numbers_in(copy)), set(_terms(copy, 1_000))

    def _filler(self, pad: int) -> str:
        # whole filler sentences only, then spaces: every performance holds the same filler words, so how much
        # room its content left changes no word a comparison of texts could count
        whole = (pad - 1) // len(_FILLER)
        return (" " + _FILLER * whole).ljust(pad)


def scripted_factory(agent: Callable[..., Policy]) -> Callable[..., Policy]:
    """The factory of a scripted backend: ``NAME`` or ``NAME:SEED`` (the seed in the spec wins)."""

    def factory(argument: str, *, seed: int | None = None, **kwargs):
        seed = int(argument) if argument else seed  # checked by seed_problem before
        return agent(seed=0 if seed is None else seed, **kwargs)

    return factory


def seed_problem(name: str) -> Callable[[str], str | None]:
    """What is wrong with the argument of ``NAME:SEED`` (not an integer), or None."""

    def check(argument: str) -> str | None:
        try:
            int(argument or 0)
        except ValueError:
            return f"agent spec {name + ':' + argument!r}: the part after ':' must be an integer seed"
        return None

    return check


_SCRIPTED_HELP = {
    "random": "scripted baseline: a random sum as its performance, a uniform vote among the legal seats "
    "(`random:SEED` sets the seed)",
    "heuristic": "scripted baseline: performs from its copy's first numbers, votes for the performance least "
    "consistent with its copy, abstains when none stands out (`heuristic:SEED` sets the seed)",
    "heuristic-soft": "the heuristic, voting by a softmax over its consistency scores (temperature "
    f"{SOFT_TEMPERATURE}) and recording that distribution, so a spy among these civilians gets a graded reward under "
    "`perform_reward=expected` (`heuristic-soft:SEED` sets the seed)",
    "heuristic-matched": f"the heuristic, performing in matched form: every performance {MATCHED_CHARS} characters "
    f"with {MATCHED_NUMBERS} quantities, so no rule on length or number count finds the spy "
    "(`heuristic-matched:SEED` sets the seed)",
    "heuristic-disjoint": "`heuristic-matched` with each seat writing from its own share of the copy's numbers and "
    "terms, so no two performances share content and no rule that compares them finds the spy; votes against its "
    "whole copy (`heuristic-disjoint:SEED` sets the seed)",
}
for _name, _agent in (
    ("random", RandomAgent),
    ("heuristic", HeuristicAgent),
    ("heuristic-soft", SoftHeuristicAgent),
    ("heuristic-matched", MatchedHeuristicAgent),
    ("heuristic-disjoint", DisjointHeuristicAgent),
):
    register_backend(_name, help=_SCRIPTED_HELP[_name], accepts=any_argument, check=seed_problem(_name))(
        scripted_factory(_agent)
    )
del _name, _agent
