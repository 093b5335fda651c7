"""The rules of one game as a pure state machine: no PettingZoo, no I/O, no randomness.

Everything random (document, spy seat, degradation) is decided by the caller and passed in, so
the same inputs always give the same game. A game runs rounds of two stages:

1. ``PERFORM``: every alive seat submits a performance (any string);
2. ``VOTE``: every alive seat submits a vote reply (any string);

and each round resolves into a :class:`RoundResult` with every reward component per seat.
Junk input never raises: it is recorded as a violation with its penalty.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spy_env import rewards
from spy_env.config import GameConfig
from spy_env.corpus import Document
from spy_env.degrade import Degraded
from spy_env.parsing import Shingles, clean_text, copied_run, last_boxed, last_vote_tag, parse_vote, strip_think
from spy_env.stage import Stage
from spy_env.tasks import Task

__all__ = ["Game", "Performance", "RoundLog", "RoundResult", "Stage", "Vote"]


@dataclass(frozen=True)
class Performance:
    """A seat's performance: ``text`` as received (cleaned, truncated), ``shown`` as others see it."""

    seat: int
    text: str
    shown: str
    answer: str | None
    violations: tuple[str, ...]
    penalty: float


@dataclass(frozen=True)
class Vote:
    """A seat's vote: ``target`` is a 0-based seat, ``None`` for an abstention or invalid vote."""

    seat: int
    text: str
    target: int | None
    abstain: bool
    violations: tuple[str, ...]
    penalty: float


@dataclass(frozen=True)
class RoundResult:
    """Everything a round decided, per seat (dead seats: ``None`` vote and zero rewards)."""

    round: int
    alive: tuple[bool, ...]
    votes: tuple[int | None, ...]
    votes_received: tuple[int, ...]
    detect: tuple[float, ...]
    perform: tuple[float, ...]
    perform_penalty: tuple[float, ...]
    vote_penalty: tuple[float, ...]
    eliminated: int | None
    spy_caught: bool

    def penalty(self, seat: int) -> float:
        return self.perform_penalty[seat] + self.vote_penalty[seat]


@dataclass
class RoundLog:
    """One round: performances and votes by seat, and the result once resolved."""

    round: int
    performances: dict[int, Performance] = field(default_factory=dict)
    votes: dict[int, Vote] = field(default_factory=dict)
    result: RoundResult | None = None


class Game:
    """One game of Who Is the Spy? over one document."""

    def __init__(
        self,
        config: GameConfig,
        task: Task,
        document: Document,
        spy_seat: int,
        degraded: Degraded,
        source_shingles: Shingles | None = None,
    ) -> None:
        n = config.rules.n_players
        if not 0 <= spy_seat < n:
            raise ValueError(f"spy_seat must be in 0..{n - 1}, got {spy_seat}")
        self.config = config
        self.task = task
        self.document = document
        self.spy_seat = spy_seat
        self.degraded = degraded
        self.views: tuple[str, ...] = tuple(degraded.text if seat == spy_seat else document.text for seat in range(n))
        self.alive: list[bool] = [True] * n
        self.stage = Stage.PERFORM
        self.log: list[RoundLog] = [RoundLog(round=0)]
        self._source_shingles = source_shingles  # None: no copy check

    # ------------------------------------------------------------------ state
    @property
    def n_players(self) -> int:
        return self.config.rules.n_players

    @property
    def round(self) -> int:
        """Current round, 0-based."""
        return self.log[-1].round

    @property
    def current(self) -> RoundLog:
        return self.log[-1]

    @property
    def done(self) -> bool:
        return self.stage is Stage.DONE

    def pending(self) -> list[int]:
        """Alive seats that still have to act in the current stage, in seat order."""
        stage = self.stage
        if stage is Stage.DONE:
            return []
        current = self.log[-1]
        acted = current.performances if stage is Stage.PERFORM else current.votes
        return [seat for seat, alive in enumerate(self.alive) if alive and seat not in acted]

    def legal_targets(self, seat: int) -> list[int]:
        """Seats ``seat`` may vote for (0-based)."""
        return [s for s in range(self.n_players) if self.alive[s] and (s != seat or self.config.rules.allow_self_vote)]

    def shown_performances(self) -> list[str | None]:
        """This round's performances as the voters see them (``None`` for dead seats)."""
        perf = self.current.performances
        return [perf[s].shown if s in perf else None for s in range(self.n_players)]

    # ---------------------------------------------------------------- actions
    def act(self, seat: int, action: Any) -> RoundResult | None:
        """Submit ``seat``'s action for the current stage; returns the result if the round ended."""
        if self.stage is Stage.DONE:
            raise RuntimeError("the game is over; reset to play again")
        pending = self.pending()
        if seat not in pending:
            raise ValueError(f"seat {seat} cannot act now (pending: {pending})")
        violations: list[str] = []
        if not isinstance(action, str):
            violations.append("non_text_action")
            action = ""
        if self.stage is Stage.PERFORM:
            self.current.performances[seat] = self._performance(seat, action, violations)
            if len(pending) == 1:  # this seat was the last to perform
                self.stage = Stage.VOTE
            return None
        self.current.votes[seat] = self._vote(seat, action, violations)
        if len(pending) > 1:
            return None
        return self._resolve()

    def _truncate(self, text: str, limit: int, violations: list[str], keep: Callable[[str], int]) -> str:
        """``text`` cut to ``limit`` characters (flagged ``overlength``), keeping what counts: the tail from
        ``keep(text)`` (the last ``<vote>`` tag, the last ``\\boxed{``) when it fits, cut from the middle."""
        text = clean_text(text)
        if len(text) > limit:
            violations.append("overlength")
            start = keep(text)
            tail = text[start:] if start >= 0 else ""
            text = text[: limit - len(tail)] + tail if 0 < len(tail) <= limit // 2 else text[:limit]
        return text

    def _performance(self, seat: int, action: str, violations: list[str]) -> Performance:
        cfg = self.config
        text = self._truncate(action, cfg.limits.max_performance_chars, violations, lambda t: t.rfind("\\boxed"))
        shown = strip_think(text)
        answer = last_boxed(shown)
        penalty = 0.0
        if not shown:
            violations.append("empty")
        for check in self.task.check(shown):
            violations.append(check.violation)
            penalty += getattr(cfg.penalties, check.penalty)
        if self._source_shingles is not None and copied_run(shown, self._source_shingles):
            violations.append("verbatim_copy")
            penalty += cfg.penalties.penalty_copy
        if "overlength" in violations:
            penalty += cfg.penalties.penalty_overlength
        return Performance(seat, text, shown, answer, tuple(violations), penalty)

    def _vote(self, seat: int, action: str, violations: list[str]) -> Vote:
        cfg = self.config
        text = self._truncate(action, cfg.limits.max_vote_chars, violations, last_vote_tag)
        parsed = parse_vote(text, self.n_players)
        target, invalid = parsed.target, parsed.violation
        if target is not None and not self.alive[target]:
            target, invalid = None, "eliminated_target"
        elif target == seat and not cfg.rules.allow_self_vote:
            target, invalid = None, "self_vote"
        penalty = 0.0
        if invalid:
            violations.append(invalid)
            penalty += cfg.penalties.penalty_invalid_vote
        if "overlength" in violations:
            penalty += cfg.penalties.penalty_overlength
        abstain = target is None
        return Vote(seat, text, target, abstain, tuple(violations), penalty)

    def _resolve(self) -> RoundResult:
        cfg, n, log = self.config, self.n_players, self.current
        alive = tuple(self.alive)
        votes = tuple(log.votes[s].target if alive[s] else None for s in range(n))
        received = rewards.votes_received(votes, n)
        detect = [r if alive[s] else 0.0 for s, r in enumerate(rewards.detection_rewards(votes, self.spy_seat))]
        perform = rewards.performing_rewards(
            received, self.spy_seat, alive, cfg.rewards.vote_gap_weight, cfg.rewards.lam
        )
        eliminated = rewards.plurality_elimination(received, alive)
        result = RoundResult(
            round=log.round,
            alive=alive,
            votes=votes,
            votes_received=tuple(received),
            detect=tuple(detect),
            perform=tuple(perform),
            perform_penalty=tuple(log.performances[s].penalty if alive[s] else 0.0 for s in range(n)),
            vote_penalty=tuple(log.votes[s].penalty if alive[s] else 0.0 for s in range(n)),
            eliminated=eliminated,
            spy_caught=eliminated == self.spy_seat,
        )
        log.result = result
        if eliminated is not None:
            self.alive[eliminated] = False
        if result.spy_caught or log.round + 1 >= cfg.rules.rounds or sum(self.alive) <= 2:
            self.stage = Stage.DONE
        else:
            self.log.append(RoundLog(round=log.round + 1))
            self.stage = Stage.PERFORM
        return result

    # ------------------------------------------------------------------ views
    def reward(self, result: RoundResult, seat: int) -> float:
        """The scalar reward of ``seat`` for a round: the weighted sum of its components."""
        return rewards.weighted_reward(
            self.config, detect=result.detect[seat], perform=result.perform[seat], penalty=result.penalty(seat)
        )

    def components(self, result: RoundResult, seat: int) -> dict[str, float]:
        return {
            "detect": result.detect[seat],
            "perform": result.perform[seat],
            "penalty": result.penalty(seat),
            "perform_penalty": result.perform_penalty[seat],
            "vote_penalty": result.vote_penalty[seat],
        }

    def truth(self) -> dict[str, Any]:
        """The whole truth, for ``info`` once the game is over (plain, JSON-friendly values)."""
        results = [log.result for log in self.log if log.result is not None]
        return {
            "spy_seat": self.spy_seat,
            "document_id": self.document.id,
            "degrade": self.degraded.operator,
            "removed_spans": [[span.start, span.end, span.original, span.replacement] for span in self.degraded.spans],
            "votes": [list(r.votes) for r in results],
            "votes_received": [list(r.votes_received) for r in results],
            "eliminated": [r.eliminated for r in results],
            "spy_caught": any(r.spy_caught for r in results),
            "rounds_played": len(results),
        }

    def history_text(self) -> str:
        """What happened in earlier rounds, for later rounds' prompts ('' in round 1; the same for every seat)."""
        lines = []
        for log in self.log[:-1]:
            result = log.result
            if result is None:
                continue
            votes = ", ".join(
                f"Player {s + 1} → {'N/A' if t is None else f'Player {t + 1}'}"
                for s, t in enumerate(result.votes)
                if result.alive[s]
            )
            out = "nobody (tie)" if result.eliminated is None else f"Player {result.eliminated + 1} (a civilian)"
            lines.append(f"Round {result.round + 1} votes: {votes}. Eliminated: {out}.")
        if not lines:
            return ""
        return "\n\nEarlier rounds:\n" + "\n".join(lines) + f"\nThis is round {self.round + 1}."
