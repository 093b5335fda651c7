"""The batched multi-game runner (docs/GUIDE.md, rollouts and the episode buffer).

At each stage it gathers every pending observation across all games, groups them per policy,
makes **one** ``act`` call per policy, and steps all games. It records one buffer row per
(game, round, stage, player) with the prompt, the completion (and token ids/logprobs when the
policy returns :class:`Action` records) and every reward component.

Grouping for RL: ``games_per_document = G`` makes G consecutive games share a document (the
paper's "8 rollouts per prompt"); ``replay_setup=True`` also shares the spy seat and masks, so
each seat's performing prompt is identical across the group (exchangeable GRPO groups).
``spy_seats="balanced"`` deals the spy seats of a call's games (of its groups, with ``replay_setup``) as
shuffled rounds of every seat: each round of ``n_players`` of them, counted from the first, holds each
seat once. A batch of whole rounds has its spies everywhere, so no seat is the right answer more often
than another (a voter's lean toward a seat then earns nothing within the batch). Everything else is dealt as with ``"random"``: the same
documents, masks and game seeds, only the spies move.

A policy that raises, or returns the wrong number of actions, forfeits those seats: they
act with an empty string (a recorded violation) and the row's ``error`` says why. The batch
goes on; the first failure of each policy in a run is logged as a warning with its reason
(made terminal-safe, credentials redacted), and :func:`spy_env.metrics.forfeits_by_agent`
summarises the forfeits of a buffer.
"""

from __future__ import annotations

import itertools
import logging
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from spy_env.buffer import EpisodeBuffer
from spy_env.config import GameConfig
from spy_env.corpus import game_documents
from spy_env.display import terminal_safe
from spy_env.env import GameHost
from spy_env.game import Game
from spy_env.policy import Action, Policy, chat_messages, policy_name
from spy_env.rewards import weighted_reward
from spy_env.stage import Stage

logger = logging.getLogger(__name__)

__all__ = ["SPY_SEATS", "Runner", "SeatPolicies", "balanced_seats", "rollout"]

SPY_SEATS = ("random", "balanced")  # how a runner deals the spy seats of its games (Runner's spy_seats)

# Either one policy per seat for every game, or a function game_index -> one policy per seat.
SeatPolicies = Sequence[Policy] | Callable[[int], Sequence[Policy]]


@dataclass
class _Slot:
    """A game in flight."""

    index: int
    host: GameHost
    game: Game  # the game the host dealt; the runner plays it through the host
    agents: list[str]  # the seats still playing, by agent name
    observations: dict[str, Any]
    policies: Sequence[Policy]
    group_id: int
    seed: int
    rows: dict[tuple[int, str, str], dict[str, Any]]  # (round, stage, agent) -> row


class Runner:
    """Plays many games at once with batched policy calls and fills an :class:`EpisodeBuffer`."""

    def __init__(
        self,
        config: GameConfig | None = None,
        *,
        games_per_document: int = 1,
        replay_setup: bool = False,
        max_concurrent_games: int = 256,
        keep_games: bool = False,
        run_id: str | None = None,
        spy_seats: str = "random",
    ) -> None:
        config = config or GameConfig()
        if games_per_document < 1:
            raise ValueError(f"games_per_document must be >= 1, got {games_per_document}")
        if spy_seats not in SPY_SEATS:
            raise ValueError(f"spy_seats must be one of {list(SPY_SEATS)}, got {spy_seats!r}")
        if max_concurrent_games < 1:
            raise ValueError(f"max_concurrent_games must be >= 1, got {max_concurrent_games}")
        # Load the corpus once and hand the documents to every env.
        documents = game_documents(config)
        self.config = replace(config, corpus=documents, max_documents=None)
        self.documents = documents
        self.games_per_document = games_per_document
        self.replay_setup = replay_setup
        self.spy_seats = spy_seats
        self.max_concurrent_games = max_concurrent_games
        self.keep_games = keep_games
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.games: list[Game] = []
        self._hosts: list[GameHost] = []
        self._warned: set[int] = set()  # policies whose first forfeit this run was reported
        self._spy: Policy | None = None  # run(spy=...): plays every game's spy seat

    def run(
        self,
        policies: SeatPolicies,
        num_games: int,
        *,
        seed: int = 0,
        policy_version: int = 0,
        progress: bool = False,
        first_game_id: int = 0,
        options: Callable[[int], Mapping[str, Any]] | None = None,
        spy: Policy | None = None,
    ) -> EpisodeBuffer:
        """Play ``num_games`` games and return their rows (:meth:`play`, every game kept in memory).

        ``options(game_index)``, when given, adds reset options to a game (e.g. ``{"spy_seat": 2}``
        so a tournament can choose which agent is the spy); they override the drawn ones.

        ``spy``, when given, plays the spy's seat of every game, wherever it falls, in place of that seat's
        policy: the other seats are then a fixed scene the spy plays against, and only the spy's rows are
        marked ``trainable`` (the spy-v1 leaderboard's arrangement, for training a spy against fixed players).
        """
        buffer = EpisodeBuffer()
        games = self.play(
            policies,
            num_games,
            seed=seed,
            policy_version=policy_version,
            progress=progress,
            first_game_id=first_game_id,
            options=options,
            spy=spy,
        )
        for rows in games:
            buffer.extend(rows)
        return buffer

    def play(
        self,
        policies: SeatPolicies,
        num_games: int,
        *,
        seed: int = 0,
        policy_version: int = 0,
        progress: bool = False,
        first_game_id: int = 0,
        options: Callable[[int], Mapping[str, Any]] | None = None,
        spy: Policy | None = None,
    ) -> Iterator[list[dict[str, Any]]]:
        """Play ``num_games`` games (arguments as :meth:`run`), yielding each game's rows as it ends.

        Memory holds the games in play (``max_concurrent_games`` at a time, batched as in :meth:`run`), not the
        finished ones: a consumer that writes each game out (``spyrl rollout``, :class:`~spy_env.buffer.BufferWriter`)
        plays any number of games, and when it stops, every game it received is whole.
        """
        if num_games < 0:
            raise ValueError(f"num_games must be >= 0, got {num_games}")
        self._warned, self._spy = set(), spy
        setups = self._deal(num_games, seed)
        with _Progress(num_games, progress) as tracker:
            for start in itertools.count(0, self.max_concurrent_games):
                batch = list(itertools.islice(setups, self.max_concurrent_games))
                if not batch:
                    break
                if options is not None:  # they override the drawn ones
                    for i, setup in enumerate(batch, start):
                        setup["options"] = {**setup["options"], **options(i)}
                slots = [self._start(first_game_id + i, setup, policies) for i, setup in enumerate(batch, start)]
                while slots:
                    game = slots[0].game
                    tracker.stage(f"round {game.round + 1} · {game.stage.value}")
                    self._stage(slots, policy_version)
                    for slot in [s for s in slots if s.game.done]:
                        slots.remove(slot)
                        tracker.advance()
                        yield self._finish(slot)

    # ------------------------------------------------------------- internals
    def _setups(self, num_games: int, seed: int) -> list[dict[str, Any]]:
        """Per-game seed and reset options, decided up front from one seed (:meth:`_deal`, as a list)."""
        return list(self._deal(num_games, seed))

    def _deal(self, num_games: int, seed: int) -> Iterator[dict[str, Any]]:
        """Each game's seed and reset options in turn, drawn from one seed: the deal of a call does not depend
        on how many of its games are dealt at once (a run of 10**12 games holds no list of them)."""
        rng = np.random.default_rng(seed)
        n_groups = -(-num_games // self.games_per_document)
        order = rng.permutation(len(self.documents))
        balanced = None
        if self.spy_seats == "balanced":  # its own stream: the documents, masks and seeds stay the random deal's
            balanced = _balanced_stream(self.config.rules.n_players, np.random.default_rng([seed, 1]))
        dealt = 0
        for group in range(n_groups):
            document_index = int(order[group % len(order)])
            shared = {
                "spy_seat": int(rng.integers(self.config.rules.n_players)),
                "degrade_seed": int(rng.integers(2**63 - 1)),
            }
            group_seat = next(balanced) if balanced is not None and self.replay_setup else None
            for _ in range(min(self.games_per_document, num_games - dealt)):
                options = {"document_index": document_index}
                if self.replay_setup:
                    options.update(shared)
                if balanced is not None:
                    options["spy_seat"] = group_seat if self.replay_setup else next(balanced)
                dealt += 1
                yield {"seed": int(rng.integers(2**31 - 1)), "group": group, "options": options}

    def _host(self, i: int) -> GameHost:
        while len(self._hosts) <= i:
            self._hosts.append(GameHost(self.config))
        return self._hosts[i]

    def _start(self, game_index: int, setup: Mapping[str, Any], policies: SeatPolicies) -> _Slot:
        host = self._host(game_index % self.max_concurrent_games)
        game = host.new_game(setup["seed"], setup["options"])
        agents = list(host.possible_agents)
        observations = {a: host.observe(host.seat_of[a]) for a in agents}
        seat_policies = policies(game_index) if callable(policies) else policies
        if len(seat_policies) != self.config.rules.n_players:
            raise ValueError(f"need one policy per seat ({self.config.rules.n_players}), got {len(seat_policies)}")
        if self._spy is not None:
            seat_policies = [self._spy if s == game.spy_seat else p for s, p in enumerate(seat_policies)]
        return _Slot(game_index, host, game, agents, observations, seat_policies, setup["group"], setup["seed"], {})

    def _stage(self, slots: Sequence[_Slot], policy_version: int) -> None:
        """One stage for every game: one batched ``act`` per policy, then step every game."""
        requests: dict[int, tuple[Policy, list[tuple[_Slot, str]]]] = {}
        for slot in slots:
            for agent in slot.agents:
                policy = slot.policies[slot.host.seat_of[agent]]
                requests.setdefault(id(policy), (policy, []))[1].append((slot, agent))
        actions: dict[tuple[int, str], Action] = {}
        for policy, items in requests.values():
            batch = _call(policy, [slot.observations[a] for slot, a in items])
            failed = [a for a in batch if a.error]
            if failed and id(policy) not in self._warned:  # a dead backend must not look like a normal run
                self._warned.add(id(policy))
                logger.warning(
                    "agent %s forfeited %d of %d actions (%s); later failures are counted in the buffer's 'error'",
                    terminal_safe(policy_name(policy)),
                    len(failed),
                    len(batch),
                    safe_reason(failed[0].error),
                )
            for (slot, agent), action in zip(items, batch, strict=True):
                actions[(slot.index, agent)] = action
        for slot in slots:
            stage, round_, infos = self._play(slot, actions, policy_version)
            for agent, info in infos.items():
                row = slot.rows[(round_, stage, agent)]
                row["violations"] = list(info.get("violations", []))
                if stage == Stage.VOTE:
                    row["vote"] = -1 if info.get("vote") is None else info["vote"]
                if "reward_components" in info:
                    self._fill_rewards(slot, agent, round_, info)

    def _play(
        self, slot: _Slot, actions: Mapping[tuple[int, str], Action], policy_version: int
    ) -> tuple[str, int, dict[str, dict[str, Any]]]:
        """Record the slot's rows of this stage and play the stage through its host: ``(stage, round,
        infos)``, what each agent that acted learned, by agent name."""
        host, game = slot.host, slot.game
        stage, round_, agents = game.stage, game.round, list(slot.agents)
        for agent in agents:
            row = self._row(slot, agent, stage.value, round_, actions[(slot.index, agent)], policy_version)
            slot.rows[(round_, stage.value, agent)] = row
        result = host.play_stage({host.seat_of[a]: actions[(slot.index, a)].text for a in agents})
        infos = {a: host.info(host.seat_of[a], stage, result) for a in agents}
        slot.observations = {a: host.observe(host.seat_of[a]) for a in agents}
        if result is not None:  # the round resolved: the eliminated (or everyone, at the end) stop playing
            slot.agents = [a for a in agents if not (game.done or not game.alive[host.seat_of[a]])]
        return stage.value, round_, infos

    def _row(self, slot: _Slot, agent: str, stage: str, round_: int, action: Action, version: int) -> dict:
        seat = slot.host.seat_of[agent]
        return {
            "run_id": self.run_id,
            "game_id": slot.index,
            "game_seed": slot.seed,
            "document_id": slot.game.document.id,
            "degrade_seed": slot.host.reset_options["degrade_seed"],
            "degrade": slot.game.degraded.operator,
            "group_id": slot.group_id,
            "round": round_,
            "stage": stage,
            "seat": seat,
            "agent": agent,
            "agent_name": policy_name(slot.policies[seat]),
            "policy_version": version,
            "prompt": chat_messages(slot.observations[agent]),
            "completion": action.text,
            "prompt_token_ids": list(action.prompt_token_ids or []),
            "completion_token_ids": list(action.completion_token_ids or []),
            "logprobs": [float(x) for x in (action.logprobs or [])],
            "completion_mask": [int(x) for x in (action.completion_mask or [])],
            "vote_probs": _vote_probs(action.vote_distribution, self.config.rules.n_players),
            "choice_step": -1 if action.choice_step is None else int(action.choice_step),
            "choice_token_ids": _choice_token_ids(action.choice_tokens, self.config.rules.n_players),
            "finish_reason": action.finish_reason or "",
            "error": safe_reason(action.error),  # no credentials a server echoed
        }

    def _fill_rewards(self, slot: _Slot, agent: str, round_: int, info: Mapping[str, Any]) -> None:
        cfg, comps = self.config, info["reward_components"]
        perform_row = slot.rows[(round_, Stage.PERFORM.value, agent)]
        perform_row["reward_perform"] = comps["perform"]
        perform_row["reward_penalty"] = comps["perform_penalty"]
        perform_row["reward"] = weighted_reward(cfg, perform=comps["perform"], penalty=comps["perform_penalty"])
        vote_row = slot.rows[(round_, Stage.VOTE.value, agent)]
        vote_row["reward_detect"] = comps["detect"]
        vote_row["reward_penalty"] = comps["vote_penalty"]
        vote_row["reward"] = weighted_reward(cfg, detect=comps["detect"], penalty=comps["vote_penalty"])
        for row in (perform_row, vote_row):
            row["votes_received"] = info["votes_received"]

    def _finish(self, slot: _Slot) -> list[dict[str, Any]]:
        game = slot.game
        if self.keep_games:
            self.games.append(game)
        caught = any(log.result is not None and log.result.spy_caught for log in game.log)
        rows = list(slot.rows.values())
        for row in rows:
            is_spy = row["seat"] == game.spy_seat
            row["role"] = "spy" if is_spy else "civilian"
            row["spy_seat"] = game.spy_seat
            row["spy_caught"] = caught
            untrained_spy_vote = is_spy and row["stage"] == Stage.VOTE and not self.config.rules.train_spy_vote
            scene = self._spy is not None and not is_spy  # run(spy=...): the fixed players around the spy
            row["trainable"] = not (untrained_spy_vote or scene)
        return rows


_SECRET = re.compile(r"(?i)(bearer\s+|api[_-]?key[=:\s\"']+|\bsk-)[A-Za-z0-9._~+/=-]{4,}")


def safe_reason(error: str | None, limit: int = 300) -> str:
    """A backend's error message fit for a log line: one line, terminal-safe, no credentials."""
    text = " ".join(terminal_safe(error or "").split())
    return _SECRET.sub(lambda m: m.group(1) + "***", text)[:limit]


def _call(policy: Policy, observations: list[Any]) -> list[Action]:
    """One batched call; failures become forfeits instead of crashing the batch."""
    try:
        out = list(policy.act(observations))
    except Exception as e:  # a policy bug or a dead backend must not kill every game
        logger.warning(
            "policy %s failed on a batch of %d: %r",
            terminal_safe(policy_name(policy)),
            len(observations),
            e,
        )
        return [Action.forfeit(f"{type(e).__name__}: {e}")] * len(observations)
    if len(out) != len(observations):
        error = f"policy returned {len(out)} actions for {len(observations)} observations"
        logger.warning("%s", error)
        return [Action.forfeit(error)] * len(observations)
    return [Action.of(a) for a in out]


def _vote_probs(distribution: Mapping[str, float] | None, n_players: int) -> list[float]:
    """``{"2": 0.7, "N/A": 0.3}`` → ``[P(seat 1), …, P(seat n), P(N/A)]`` (empty when unknown).

    >>> _vote_probs({"2": 0.75, "N/A": 0.25}, 3)
    [0.0, 0.75, 0.0, 0.25]
    """
    if not distribution:
        return []
    probs = [0.0] * (n_players + 1)
    for choice, p in distribution.items():
        index = n_players if choice == "N/A" else int(choice) - 1
        if 0 <= index <= n_players:
            probs[index] = float(p)
    return probs


def _choice_token_ids(tokens: Mapping[str, int] | None, n_players: int) -> list[int]:
    """``{"2": 17, "N/A": 40}`` → ``[token of seat 1, …, token of seat n, token of N/A]``, -1 where no choice
    (empty when unknown), aligned with :func:`_vote_probs`.

    >>> _choice_token_ids({"2": 17, "N/A": 40}, 3)
    [-1, 17, -1, 40]
    """
    if not tokens:
        return []
    ids = [-1] * (n_players + 1)
    for choice, token in tokens.items():
        index = n_players if choice == "N/A" else int(choice) - 1
        if 0 <= index <= n_players:
            ids[index] = int(token)
    return ids


class _Progress:
    """A rich progress bar over finished games (no-op when disabled)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled, self._progress, self._task = total, enabled, None, None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                SpinnerColumn(),
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            self._progress.start()
            self._task = self._progress.add_task("games", total=self.total)
        return self

    def stage(self, description: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=f"games ({description})")

    def advance(self) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()


def balanced_seats(count: int, n_players: int, rng: np.random.Generator) -> list[int]:
    """``count`` spy seats dealt as shuffled rounds of ``range(n_players)``: every ``n_players`` consecutive
    seats from the start hold each seat once (the last round may be cut short).

    >>> seats = balanced_seats(12, 5, np.random.default_rng(0))
    >>> sorted(seats[:5]), sorted(seats[5:10]), len(seats)
    ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4], 12)
    """
    return list(itertools.islice(_balanced_stream(n_players, rng), count))


def _balanced_stream(n_players: int, rng: np.random.Generator) -> Iterator[int]:
    """The seats of :func:`balanced_seats`, one at a time and without end."""
    while True:
        yield from (int(s) for s in rng.permutation(n_players))


def rollout(
    config: GameConfig | None,
    policies: SeatPolicies,
    num_games: int,
    *,
    seed: int = 0,
    games_per_document: int = 1,
    replay_setup: bool = False,
    progress: bool = False,
    run_id: str | None = None,
) -> EpisodeBuffer:
    """Play ``num_games`` games with one policy per seat and return the episode buffer (a trainer
    that records its policy version, or a spy playing against a fixed scene, uses :meth:`Runner.run`)."""
    runner = Runner(config, games_per_document=games_per_document, replay_setup=replay_setup, run_id=run_id)
    return runner.run(policies, num_games, seed=seed, progress=progress)
