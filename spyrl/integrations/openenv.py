"""spyrl as an OpenEnv environment: one seat of a Who-Is-the-Spy game, the other seats played by agents.

The client plays one seat (``reset(seat=...)``, default seat 0); the server plays the others with
the agents chosen at start (``spyrl serve --seats heuristic``). Each round is two steps: the
performance, then the vote. The observation carries the chat ``messages`` for the seat, the
``stage`` (``perform``, ``vote``, ``done``), the ``seat`` and the legal votes; the step that resolves
a round carries the seat's reward and, in ``metadata``, its ``reward_components`` (detect, perform,
penalties), violations and, when the game ends, the ``truth`` (spy seat, votes).

``reset(seed=s, seat=k)`` reproduces a game exactly: the setup is drawn from ``s`` and the
scripted agents of the other seats are fresh and seeded from ``s``. ``reset`` also takes a buffer
row's options (``document_id``, ``spy_seat``, ``degrade_seed``). Each WebSocket session gets its
own environment, so concurrent sessions never share a game.

>>> from openenv.core import GenericEnvClient  # doctest: +SKIP
>>> with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:  # doctest: +SKIP
...     result = env.reset(seed=3, seat=1)
...     result = env.step({"text": "Problem: ... \\\\boxed{5}"})
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from spy_env.config import GameConfig
from spy_env.env import parallel_env
from spy_env.policy import Action as PolicyAction
from spy_env.policy import Policy, chat_messages
from spy_env.stage import Stage
from spyrl.integrations._games import seat_factories

__all__ = ["SpyAction", "SpyEnvironment", "SpyObservation", "SpyState", "create_spy_app", "serve"]

_OPTION_KEYS = ("document_id", "document_index", "spy_seat", "degrade_seed")


class SpyAction(Action):
    """The seat's text for the current stage: a performance, or a reply ending in ``<vote>k</vote>``."""

    text: str = Field(..., description="the completion for the current stage (junk is a recorded violation)")


class SpyObservation(Observation):
    """What the seat sees: its chat messages for this stage, and where the game stands."""

    messages: list[dict[str, str]] = Field(default_factory=list, description="system and user messages to answer")
    stage: str = Field(default="perform", description="'perform', 'vote' or 'done'")
    seat: int = Field(default=0, description="the client's seat, 0-based (the prompts say Player seat+1)")
    round: int = Field(default=0, description="the round, 0-based")
    legal_votes: list[int] = Field(default_factory=list, description="players (1-based) one may vote for")


class SpyState(State):
    """The episode: its seed and seat (enough to replay it) and where the game stands."""

    seed: int | None = None
    seat: int = 0
    stage: str = "perform"
    round: int = 0


class SpyEnvironment(Environment[SpyAction, SpyObservation, SpyState]):
    """One seat of a game; ``seats`` (an agent spec, or one per other seat) plays the others."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, config: GameConfig | None = None, seats: str | Sequence[str] = "heuristic") -> None:
        super().__init__()
        self.config = config or GameConfig()
        n_others = self.config.n_players - 1
        specs = [seats] * n_others if isinstance(seats, str) else list(seats)
        if len(specs) != n_others:
            raise ValueError(f"seats: need one agent spec or one per other seat ({n_others}), got {len(specs)}")
        self._factories = seat_factories(specs)  # an LLM playing several seats is loaded once
        self._env = parallel_env(self.config)
        self._policies: dict[str, Policy] = {}
        self._observations: dict[str, Any] = {}
        self._state = SpyState()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, seat: int = 0, **options: Any
    ) -> SpyObservation:
        n = self.config.n_players
        if not isinstance(seat, int) or not 0 <= seat < n:
            raise ValueError(f"seat must be in 0..{n - 1}, got {seat!r}")
        unknown = sorted(set(options) - set(_OPTION_KEYS))
        if unknown:
            raise ValueError(f"unknown reset options {unknown}; known: seed, seat, {', '.join(_OPTION_KEYS)}")
        seed = secrets.randbelow(2**31) if seed is None else int(seed)
        self._observations, _ = self._env.reset(seed=seed, options=options)
        others = [a for a in self._env.possible_agents if self._env.seat_of[a] != seat]
        self._policies = {
            a: make(seed * 16 + k) for k, (a, make) in enumerate(zip(others, self._factories, strict=True))
        }
        self._state = SpyState(episode_id=episode_id or f"spyrl-{seed}-{seat}", seed=seed, seat=seat)
        return self._observation(reward=None, done=False, metadata={"seed": seed, "seat": seat})

    def step(self, action: SpyAction, timeout_s: float | None = None, **kwargs: Any) -> SpyObservation:
        env, game = self._env, self._env.game
        me = env.possible_agents[self._state.seat]
        if game is None or game.done or me not in env.agents:
            raise ValueError("the episode is over; reset() to play another game")
        stage = game.stage
        actions = {me: action.text}
        actions.update(self._others_act([a for a in env.agents if a != me]))
        self._observations, rewards, terminations, _, infos = env.step(actions)
        self._state.step_count += 1
        info = infos[me]
        metadata: dict[str, Any] = {"violations": info.get("violations", []), "stage_played": stage.value}
        if "reward_components" in info:
            metadata.update({k: info[k] for k in ("reward_components", "vote", "votes_received", "eliminated")})
        if "truth" in info:
            metadata["truth"] = info["truth"]
            metadata["reset_options"] = env.reset_options
        resolved = stage is Stage.VOTE
        return self._observation(reward=rewards[me] if resolved else 0.0, done=terminations[me], metadata=metadata)

    @property
    def state(self) -> SpyState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="spyrl",
            description="Who Is the Spy? over math documents: perform the task on your copy, then vote for the spy",
            version="0.1.0",
            documentation_url="https://github.com/spyrl/spyrl/blob/main/docs/integrations.md",
        )

    def _others_act(self, agents: list[str]) -> dict[str, str]:
        """One batched ``act`` per policy over the seats it plays."""
        groups: dict[int, tuple[Policy, list[str]]] = {}
        for agent in agents:
            policy = self._policies[agent]
            groups.setdefault(id(policy), (policy, []))[1].append(agent)
        out = {}
        for policy, seats in groups.values():
            replies = policy.act([self._observations[a] for a in seats])
            out.update({a: PolicyAction.of(r).text for a, r in zip(seats, replies, strict=True)})
        return out

    def _observation(self, *, reward: float | None, done: bool, metadata: dict[str, Any]) -> SpyObservation:
        game, seat = self._env.game, self._state.seat
        stage = "done" if done else game.stage.value
        self._state.stage, self._state.round = stage, game.round
        obs = self._observations.get(self._env.possible_agents[seat]) if not done else None
        return SpyObservation(
            messages=chat_messages(obs) if obs is not None else [],
            stage=stage,
            seat=seat,
            round=game.round,
            legal_votes=[int(s) + 1 for s in game.legal_targets(seat)] if stage == "vote" else [],
            reward=reward,
            done=done,
            metadata=metadata,
        )


def create_spy_app(config: GameConfig | None = None, seats: str | Sequence[str] = "heuristic", max_sessions: int = 64):
    """The FastAPI app OpenEnv's clients talk to (HTTP and WebSocket), one environment per session."""
    from openenv.core.env_server.http_server import create_app

    SpyEnvironment(config, seats)  # a bad config or agent spec fails here, before the server starts
    return create_app(
        lambda: SpyEnvironment(config, seats),
        SpyAction,
        SpyObservation,
        env_name="spyrl",
        max_concurrent_envs=max_sessions,
        state_cls=SpyState,
    )


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    seats: str | Sequence[str] = "heuristic",
    config: GameConfig | None = None,
    max_sessions: int = 64,
) -> None:
    """Serve :class:`SpyEnvironment` until interrupted (``spyrl serve`` runs this)."""
    import uvicorn

    uvicorn.run(create_spy_app(config, seats, max_sessions), host=host, port=port, log_level="warning")


def app():
    """``uvicorn --factory spyrl.integrations.openenv:app``: the default game (openenv.yaml names it)."""
    return create_spy_app()
