"""spyrl as a verifiers v1 environment: the whole game, every seat an agent, roles ``spy`` and ``civilian``.

Taskset id ``spyrl-game`` (the loader imports the top-level ``spyrl_game`` module, which exports
these classes): each task is one game, fixed by its seed. :class:`SpyEnv` opens one interaction per
seat, played by the role's agent (``--env.spy.*``, ``--env.civilian.*``): the performance is the
first turn, the vote the second, both prompts exactly the environment's. Every seat's trace gets
the environment's reward components (``detect``, ``perform``, ``penalty``, with the game's weights)
and metrics (``spy_caught``, ``vote``, ``votes_received``, ``seat``), so the trace reward is the
seat's round reward and a trainer's role baselines (RAE) group by the trace's agent name.

    vf-eval spyrl-game --env.taskset.n-players 4 --model MODEL --client.base-url URL ...
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any

if sys.version_info < (3, 11):  # pragma: no cover - verifiers itself needs 3.11
    raise ImportError(
        "spyrl.integrations.verifiers needs Python >= 3.11 (verifiers does); pip install 'spyrl[verifiers]'"
    )

import verifiers.v1 as vf
from pydantic import Field

from spy_env.config import GameConfig
from spy_env.env import parallel_env
from spy_env.policy import chat_messages

__all__ = ["SpyEnv", "SpyEnvConfig", "SpyTask", "SpyTaskData", "SpyTaskset", "SpyTasksetConfig", "gold_check"]

OUTCOME = "spyrl_outcome"  # the trace info key of a seat's reward components
_LOCAL_CHAT = {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}, "max_turns": 2}


class SpyTaskData(vf.TaskData):
    """One game: its seed fixes the document, the spy seat and the spy's copy; the game's size and
    degradation are recorded with it."""

    game_seed: int = 0
    n_players: int = Field(5, ge=3, le=10)
    degrade: str | None = None

    def game_config(self) -> GameConfig:
        return GameConfig(n_players=self.n_players, rounds=1, degrade=self.degrade)


class SpyTask(vf.Task[SpyTaskData]):
    """One game (the taskset's task) or one seat of it (the env's interactions).

    Scoring: the seat's round reward, ``detect``, ``perform`` and ``penalty`` with the game's
    weights, as the environment scored the seat (the env leaves its components in the trace's
    info). A trace on which no game was played scores 0 on each, so ``vf-validate``'s no-op check
    (score the untouched task) finds that doing nothing does not pass. The gold check
    (:meth:`validate`) plays the task's game with the ground truth: every civilian votes for the
    spy's seat.
    """

    @vf.reward
    async def seat_reward(self, trace: Any) -> dict[str, float]:
        config = self.data.game_config()
        components = trace.info.get(OUTCOME, {})
        rewards = config.rewards
        weights = {
            "detect": rewards.weight_detect,
            "perform": rewards.weight_perform,
            "penalty": rewards.weight_penalty,
        }
        for name, weight in weights.items():
            trace.record_reward(name, float(components.get(name, 0.0)), weight)
        return {}  # recorded above, each with its own weight

    async def validate(self, runtime: Any = None) -> bool:
        return gold_check(self.data.game_config(), self.data.game_seed)


def gold_check(config: GameConfig, seed: int) -> bool:
    """Play game ``seed`` with the ground truth and check the environment scores it as such.

    Every seat performs as the ``heuristic`` agent from its own copy; every civilian votes for the
    spy's seat, the spy for a civilian. True when the spy's copy differs from the civilians' (the
    degradation took something), the spy is caught, every civilian's ``detect`` component is 1
    and the spy's 0, and nobody is penalised.
    """
    from agents.scripted import HeuristicAgent

    game = parallel_env(config)
    observations, _ = game.reset(seed=seed)
    spy = game.game.spy_seat
    copies = {game.seat_of[a]: observations[a]["copy"] for a in game.agents}
    performer = HeuristicAgent(seed=seed)
    observations, *_ = game.step({a: performer.act([observations[a]])[0] for a in game.agents})
    civilian = next(s for s in range(config.rules.n_players) if s != spy)
    votes = {a: f"<vote>{(civilian if game.seat_of[a] == spy else spy) + 1}</vote>" for a in game.agents}
    *_, infos = game.step(votes)
    components = {game.seat_of[a]: info["reward_components"] for a, info in infos.items()}
    return (
        all(copies[s] != copies[spy] for s in copies if s != spy)
        and all(info["truth"]["spy_caught"] for info in infos.values())
        and all(c["detect"] == float(s != spy) for s, c in components.items())
        and all(c["perform_penalty"] == c["vote_penalty"] == 0 for c in components.values())
    )


class SpyTasksetConfig(vf.TasksetConfig):
    n_players: int = Field(5, ge=3, le=10)
    num_games: int = Field(64, ge=1)
    seed: int = 0
    degrade: str | None = None
    """Degradation operator; None = the task's default."""

    def game_config(self) -> GameConfig:
        return GameConfig(n_players=self.n_players, rounds=1, degrade=self.degrade)


class SpyTaskset(vf.Taskset[SpyTask, SpyTasksetConfig]):
    def load(self):
        import numpy as np

        rng = np.random.default_rng(self.config.seed)
        for i in range(self.config.num_games):
            seed = int(rng.integers(2**31 - 1))
            data = SpyTaskData(
                id=f"game-{seed}",
                name=f"game {i}",
                game_seed=seed,
                n_players=self.config.n_players,
                degrade=self.config.degrade,
            )
            yield SpyTask(data, self.config.task)


class SpyEnvConfig(vf.EnvConfig):
    spy: vf.AgentConfig = vf.AgentConfig(**_LOCAL_CHAT)
    civilian: vf.AgentConfig = vf.AgentConfig(**_LOCAL_CHAT)


class SpyEnv(vf.Env[SpyEnvConfig]):
    """One round of Who Is the Spy?, one interaction per seat (perform, then vote)."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        config = task.data.game_config()
        game = parallel_env(config)
        observations, _ = game.reset(seed=int(task.data.game_seed))
        spy = game.game.spy_seat
        async with contextlib.AsyncExitStack() as stack:
            seats = {}
            for agent in game.possible_agents:
                seat = game.seat_of[agent]
                role = agents.spy if seat == spy else agents.civilian
                system = observations[agent]["system"]
                seat_task = SpyTask(
                    SpyTaskData(
                        idx=task.data.idx,
                        id=task.data.id,
                        name=f"seat {seat + 1}",
                        system_prompt=system,
                        game_seed=task.data.game_seed,
                        n_players=config.rules.n_players,
                        degrade=config.rules.degrade,
                    )
                )
                seats[agent] = await stack.enter_async_context(role.interaction(seat_task))
            over: set[str] = set()  # seats whose run ended (a limit, a provider error): they forfeit
            for _stage in ("perform", "vote"):
                live = [a for a in game.agents if a not in over]
                replies = await asyncio.gather(*(seats[a].turn(_user(observations[a])) for a in live))
                actions = dict.fromkeys(game.agents, "")
                for agent, reply in zip(live, replies, strict=True):
                    if reply.terminated:
                        over.add(agent)
                    else:
                        actions[agent] = reply.last_reply
                observations, _, _, _, infos = game.step(actions)
            for agent, interaction in seats.items():
                _record(interaction.trace, infos[agent], game.seat_of[agent])


def _user(observation: dict[str, Any]) -> str:
    return next(m["content"] for m in chat_messages(observation) if m["role"] == "user")


def _record(trace: Any, info: dict[str, Any], seat: int) -> None:
    """The seat's outcome on its trace: reward components in its info (scored by
    :meth:`SpyTask.seat_reward` when the interaction closes) and its metrics."""
    comps = info["reward_components"]
    trace.info[OUTCOME] = {
        "detect": comps["detect"],
        "perform": comps["perform"],
        "penalty": comps["perform_penalty"] + comps["vote_penalty"],
    }
    truth = info.get("truth", {})
    trace.record_metric("seat", seat)
    trace.record_metric("vote", -1 if info.get("vote") is None else info["vote"])
    trace.record_metric("votes_received", info.get("votes_received", 0))
    trace.record_metric("spy_caught", float(truth.get("spy_caught", False)))
