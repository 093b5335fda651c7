"""Rule baselines: one-line voters that read only the surface of the performances.

Each rule votes for the legal seat that minimises one score of its performance, breaking ties
uniformly at random (seeded), and never abstains:

- ``shortest``: the fewest characters; ``longest``: the most;
- ``fewest-numbers``: the fewest numbers (the heuristic's number pattern);
- ``first-seat``: the first legal seat, whatever was written;
- ``odd-one-out``: the performance least like the others: the lowest mean word-set (Jaccard)
  overlap with every other shown performance, the voter's own included. Scripted civilians write
  the same text from the same copy, so where the spy's copy changes what it writes, the spy is
  the one text that differs, and this rule finds it without reading any copy.

They never read their own copy, so a detection result that one of them matches is a result about
the surface of the performances, not about comparing them with the document. Seated as performers
they write the ``heuristic`` agent's performance (their copy's first numbers and most frequent
terms), so a table of rule voters plays the same games as a table of heuristic agents.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from agents.registry import any_argument, register_backend
from agents.scripted import HeuristicAgent, legal_seats, numbers_in, scripted_factory, seed_problem
from spy_env.policy import Observation
from spy_env.stage import Stage

__all__ = [
    "RULES",
    "SINGLE_TEXT_RULES",
    "Rule",
    "RuleAgent",
    "overlap",
    "played_shares",
    "played_votes",
    "spy_share",
    "tied_picks",
]


@dataclass(frozen=True)
class Rule:
    """``score(seat, performance, shown)``: the rule votes for the lowest score; ``help`` says what it picks.

    ``shown`` is every performance of the round as the voter sees it (its own included, ``""`` for an
    eliminated seat); only ``odd-one-out`` reads it.
    """

    score: Callable[[int, str, Sequence[str]], float]
    help: str


_WORD = re.compile(r"\w+")


def _words(text: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(text))


def overlap(a: str, b: str) -> float:
    """Jaccard overlap of the word sets of ``a`` and ``b`` (1.0 for two texts without words).

    >>> overlap("Sum 6 and 36", "sum 36 and 7")
    0.6
    """
    x, y = _words(a), _words(b)
    return len(x & y) / len(x | y) if x | y else 1.0


def _oddness(seat: int, text: str, shown: Sequence[str]) -> float:
    others = [t for s, t in enumerate(shown) if s != seat and t]
    return sum(overlap(text, t) for t in others) / len(others) if others else 0.0


RULES: dict[str, Rule] = {
    "shortest": Rule(lambda seat, text, shown: len(text), "the shortest performance (characters; ties at random)"),
    "longest": Rule(lambda seat, text, shown: -len(text), "the longest performance (characters; ties at random)"),
    "fewest-numbers": Rule(
        lambda seat, text, shown: len(numbers_in(text)), "the performance with the fewest numbers (ties at random)"
    ),
    "first-seat": Rule(lambda seat, text, shown: seat, "the first legal seat, whatever was written"),
    "odd-one-out": Rule(
        _oddness, "the performance least like the others, the voter's own included (word overlap; ties at random)"
    ),
}
# The rules that score one performance alone: in the length-matched game every one of them ties.
SINGLE_TEXT_RULES = ("shortest", "longest", "fewest-numbers", "first-seat")


def tied_picks(rule: Rule, shown: Sequence[str], legal: Iterable[int]) -> list[int]:
    """The legal seats whose performance has ``rule``'s lowest score (the rule votes for one of them at random)."""
    scores = {seat: rule.score(seat, shown[seat], shown) for seat in legal}
    low = min(scores.values())
    return [seat for seat, score in scores.items() if score == low]


def spy_share(rule: Rule, shown: Sequence[str], legal: Iterable[int], spy: int) -> float:
    """How often ``rule``'s vote names ``spy`` in expectation over its tie-break: a rule baseline scored on
    votes that were cast by someone else, on the performances those voters saw."""
    picks = tied_picks(rule, shown, legal)
    return float(spy in picks) / len(picks)


def played_shares(rows: Iterable[Mapping], rule: Rule) -> list[float]:
    """``rule`` scored on games already played: per first-round civilian vote of an episode buffer's
    ``rows``, the share of the rule's tied picks (among the voter's fellow seats) that is the spy, on the
    very performances that voter saw. Its mean is the rule's detection accuracy on those games, the
    baseline that a voter's ``detection_accuracy`` on the same games is read against.

    >>> perform = [{"game_id": 0, "round": 0, "stage": "perform", "seat": s, "completion": t}
    ...            for s, t in enumerate(["6 and 36", "6 and 36", "x"])]
    >>> vote = {"game_id": 0, "round": 0, "stage": "vote", "role": "civilian", "seat": 0, "spy_seat": 2}
    >>> played_shares([*perform, vote], RULES["shortest"])
    [1.0]
    """
    return [spy_share(rule, shown, others, vote["spy_seat"]) for vote, shown, others in played_votes(rows)]


def played_votes(rows: Iterable[Mapping]) -> list[tuple[Mapping, list[str], list[int]]]:
    """Each first-round civilian vote of an episode buffer's ``rows`` (games told apart by ``run_id`` and
    ``game_id``) with the performances its voter saw (by seat) and its fellow seats: what a rule is
    scored on in :func:`played_shares`."""
    rows = list(rows)
    texts: dict[tuple, dict[int, str]] = {}
    for r in rows:
        if r["stage"] == Stage.PERFORM and r["round"] == 0:
            texts.setdefault((r.get("run_id"), r["game_id"]), {})[r["seat"]] = r["completion"]
    out = []
    for r in rows:
        by_seat = texts.get((r.get("run_id"), r["game_id"]))
        if r["stage"] == Stage.VOTE and r["round"] == 0 and r["role"] == "civilian" and by_seat:
            shown = [by_seat.get(s, "") for s in range(max(by_seat) + 1)]
            out.append((r, shown, [s for s in sorted(by_seat) if s != r["seat"]]))
    return out


class RuleAgent:
    """Votes by one rule of :data:`RULES` (ties broken at random); performs as the heuristic agent."""

    def __init__(self, rule: str, seed: int | None = 0, name: str | None = None) -> None:
        if rule not in RULES:
            raise ValueError(f"rule must be one of {sorted(RULES)}, got {rule!r}")
        self.rule = RULES[rule]
        self.name = name or rule
        self.performer = HeuristicAgent(seed=seed)
        self.rng = self.performer.rng

    def act(self, observations: Sequence[Observation]) -> list[str]:
        return [
            self.performer.act([obs])[0] if Stage.of(obs["stage"]) is Stage.PERFORM else self.vote(obs)
            for obs in observations
        ]

    def vote(self, obs: Observation) -> str:
        legal = legal_seats(obs)
        if not legal:
            return "<vote>N/A</vote>"
        pick = int(self.rng.choice(tied_picks(self.rule, obs["performances"], legal)))
        return f"By my rule, Player {pick + 1}. <vote>{pick + 1}</vote>"


def _rule_agent(rule: str) -> Callable[..., RuleAgent]:
    def build(seed: int = 0, **kwargs) -> RuleAgent:
        return RuleAgent(rule, seed=seed, **kwargs)

    return build


for _name, _rule in RULES.items():
    register_backend(
        _name,
        help=f"rule baseline: votes for {_rule.help}, never reads its copy, never abstains; performs as `heuristic` "
        f"(`{_name}:SEED` sets the seed)",
        accepts=any_argument,
        check=seed_problem(_name),
    )(scripted_factory(_rule_agent(_name)))
del _name, _rule
