"""Scripted baselines: ``random`` and ``heuristic`` (lexical), no model involved.

Both read only the structured observation fields (``copy``, ``performances``,
``vote_targets``, ``stage``), never the rendered prompt.

The heuristic performs from the first numbers and the most frequent terms of its copy and, in
the detection stage, votes for the performance least consistent with its copy: the share of
the performance's numbers that are among the salient numbers of the voter's own copy, plus
the share of its terms found there. When every candidate scores the same it abstains.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np

from agents.registry import any_argument, register_backend
from spy_env.policy import Observation
from spy_env.stage import Stage

__all__ = ["HeuristicAgent", "RandomAgent"]

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


def _numbers(text: str) -> list[str]:
    return _NUMBER.findall(text)


def _terms(text: str, k: int) -> list[str]:
    counts = Counter(w.lower() for w in _TERM.findall(text) if w.lower() not in _STOP)
    return [w for w, _ in counts.most_common(k)]


def _legal(observation: Observation) -> list[int]:
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
        legal = _legal(obs)
        if not legal:
            return "<vote>N/A</vote>"
        return f"<vote>{int(self.rng.choice(legal)) + 1}</vote>"


class HeuristicAgent:
    """Lexical baseline: performs from its copy's numbers/terms, votes for the least consistent."""

    def __init__(self, seed: int | None = 0, name: str = "heuristic", n_numbers: int = 3) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.n_numbers = n_numbers

    def act(self, observations: Sequence[Observation]) -> list[str]:
        return [
            self._perform(obs) if Stage.of(obs["stage"]) is Stage.PERFORM else self._vote(obs) for obs in observations
        ]

    def _salient(self, copy: str) -> list[str]:
        seen: dict[str, None] = {}
        for number in _numbers(copy):
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

    def _vote(self, obs: Observation) -> str:
        legal = _legal(obs)
        copy = obs["copy"]
        salient = set(self._salient(copy))
        own_terms = set(_terms(copy, 30))
        scores = {}
        for seat in legal:
            text = obs["performances"][seat]
            numbers = _numbers(text)
            terms = _terms(text, 10)
            number_score = sum(n in salient for n in numbers) / len(numbers) if numbers else 0.0
            term_score = sum(t in own_terms for t in terms) / len(terms) if terms else 0.0
            scores[seat] = number_score + term_score
        if not scores or len(set(scores.values())) == 1:
            return "All performances look equally consistent with my copy. <vote>N/A</vote>"
        low = min(scores.values())
        suspects = [s for s, v in scores.items() if v == low]
        pick = int(self.rng.choice(suspects))
        return f"Player {pick + 1}'s performance matches my copy least. <vote>{pick + 1}</vote>"


def _scripted(name: str, agent: type[RandomAgent] | type[HeuristicAgent]):
    """The factory of a scripted backend: ``NAME`` or ``NAME:SEED`` (the seed in the spec wins)."""

    def factory(argument: str, *, seed: int | None = None, **kwargs):
        seed = int(argument) if argument else seed  # checked by _seed_problem before
        return agent(seed=0 if seed is None else seed, **kwargs)

    return factory


def _seed_problem(name: str) -> Callable[[str], str | None]:
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
}
for _name, _agent in (("random", RandomAgent), ("heuristic", HeuristicAgent)):
    register_backend(_name, help=_SCRIPTED_HELP[_name], accepts=any_argument, check=_seed_problem(_name))(
        _scripted(_name, _agent)
    )
del _name, _agent
