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

__all__ = ["SpyEnv", "SpyEnvConfig", "SpyTask", "SpyTaskData", "SpyTaskset", "SpyTasksetConfig"]

_LOCAL_CHAT = {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}, "max_turns": 2}


class SpyTaskData(vf.TaskData):
    """One game: its seed fixes the document, the spy seat and the spy's copy."""

    game_seed: int = 0


class SpyTask(vf.Task[SpyTaskData]):
    pass


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
            yield SpyTask(SpyTaskData(id=f"game-{seed}", name=f"game {i}", game_seed=seed), self.config.task)


class SpyEnvConfig(vf.EnvConfig):
    spy: vf.AgentConfig = vf.AgentConfig(**_LOCAL_CHAT)
    civilian: vf.AgentConfig = vf.AgentConfig(**_LOCAL_CHAT)


class SpyEnv(vf.Env[SpyEnvConfig]):
    """One round of Who Is the Spy?, one interaction per seat (perform, then vote)."""

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        config = self.taskset.config.game_config()
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
                _record(interaction.trace, config, infos[agent], game.seat_of[agent])


def _user(observation: dict[str, Any]) -> str:
    return next(m["content"] for m in chat_messages(observation) if m["role"] == "user")


def _record(trace: Any, config: GameConfig, info: dict[str, Any], seat: int) -> None:
    comps = info["reward_components"]
    trace.record_reward("detect", comps["detect"], config.weight_detect)
    trace.record_reward("perform", comps["perform"], config.weight_perform)
    trace.record_reward("penalty", comps["perform_penalty"] + comps["vote_penalty"], config.weight_penalty)
    truth = info.get("truth", {})
    trace.record_metric("seat", seat)
    trace.record_metric("vote", -1 if info.get("vote") is None else info["vote"])
    trace.record_metric("votes_received", info.get("votes_received", 0))
    trace.record_metric("spy_caught", float(truth.get("spy_caught", False)))
