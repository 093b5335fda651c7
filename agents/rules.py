"""Rule baselines: one-line voters that read only the surface of the performances.

Each rule votes for the legal seat that minimises one score of its performance, breaking ties
uniformly at random (seeded), and never abstains:

- ``shortest``: the fewest characters; ``longest``: the most;
- ``fewest-numbers``: the fewest numbers (the heuristic's number pattern);
- ``first-seat``: the first legal seat, whatever was written.

They never read their own copy, so a detection result that one of them matches is a result about
the surface of the performances, not about comparing them with the document. Seated as performers
they write the ``heuristic`` agent's performance (their copy's first numbers and most frequent
terms), so a table of rule voters plays the same games as a table of heuristic agents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agents.registry import any_argument, register_backend
from agents.scripted import HeuristicAgent, legal_seats, numbers_in, scripted_factory, seed_problem
from spy_env.policy import Observation
from spy_env.stage import Stage

__all__ = ["RULES", "Rule", "RuleAgent"]


@dataclass(frozen=True)
class Rule:
    """``score(seat, performance)``: the rule votes for the lowest score; ``help`` says what it picks."""

    score: Callable[[int, str], float]
    help: str


RULES: dict[str, Rule] = {
    "shortest": Rule(lambda seat, text: len(text), "the shortest performance (characters; ties at random)"),
    "longest": Rule(lambda seat, text: -len(text), "the longest performance (characters; ties at random)"),
    "fewest-numbers": Rule(
        lambda seat, text: len(numbers_in(text)), "the performance with the fewest numbers (ties at random)"
    ),
    "first-seat": Rule(lambda seat, text: seat, "the first legal seat, whatever was written"),
}


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
        scores = {seat: self.rule.score(seat, obs["performances"][seat]) for seat in legal}
        low = min(scores.values())
        pick = int(self.rng.choice([seat for seat, score in scores.items() if score == low]))
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
