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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from agents.registry import backend_of
from agents.sampling import SamplingParams
from spy_env.config import GameConfig
from spy_env.env import parallel_env
from spy_env.policy import Action as PolicyAction
from spy_env.policy import Policy, chat_messages
from spy_env.stage import Stage
from spyrl.integrations._games import seat_factories
from spyrl.integrations._guard import GuardMiddleware, ServeLimits

__all__ = [
    "ClientError",
    "SeatPolicies",
    "ServeLimits",
    "SpyAction",
    "SpyEnvironment",
    "SpyObservation",
    "SpyState",
    "create_spy_app",
    "main",
    "serve",
]

_INT_OPTIONS = ("document_index", "spy_seat", "degrade_seed")
_OPTION_KEYS = ("document_id", *_INT_OPTIONS)
# Agent specs a server cannot run: they read the server's own terminal.
_TERMINAL_BACKENDS = frozenset({"human"})
NO_GAME = (
    "no game in progress: reset() first. OpenEnv's HTTP /reset and /step are stateless (each HTTP call "
    "gets a fresh environment), so play a game over the WebSocket session at /ws "
    "(spyrl.integrations.openenv_client.SpyEnvClient or openenv's GenericEnvClient)"
)


class ClientError(ValueError):
    """A client's mistake: an HTTP 4xx with this one-line message, the same message over WebSocket."""

    status_code = 400


class NoGameError(ClientError):
    """``step`` without a game in progress (every HTTP ``/step``: OpenEnv's HTTP routes are stateless)."""

    status_code = 409


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


@dataclass
class SeatPolicies:
    """The agents of the other seats, built once per server process and shared by every session.

    An LLM spec is loaded here, once; every session's games call that one policy, one call at a time,
    on one worker thread per loaded model (so the model's buffers are allocated by that one thread,
    not by each session's thread: memory stays flat in the number of sessions). Scripted specs stay
    per game: a fresh agent seeded from the game's seed, so a game replays exactly whatever other
    sessions do.
    """

    config: GameConfig
    factories: list[Callable[[int], Policy]]
    _workers: dict[int, ThreadPoolExecutor] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls, config: GameConfig, seats: str | Sequence[str] = "heuristic", sampling: SamplingParams | None = None
    ) -> SeatPolicies:
        """Load the agents of ``seats`` (one spec, or one per other seat); LLM seats use ``sampling``."""
        n_others = config.rules.n_players - 1
        specs = [seats] * n_others if isinstance(seats, str) else list(seats)
        if len(specs) != n_others:
            raise ValueError(f"seats: need one agent spec or one per other seat ({n_others}), got {len(specs)}")
        for spec in specs:
            backend = backend_of(spec)
            if backend is not None and backend.name in _TERMINAL_BACKENDS:
                raise ValueError(f"seats: {spec!r} reads the server's terminal; a server's seats must be agents")
        factories = seat_factories(specs, sampling)  # an LLM playing several seats is loaded once
        workers = {}
        for make in factories:
            policy = make(0)
            if make(1) is policy and id(policy) not in workers:  # one policy for every game: shared
                workers[id(policy)] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spyrl-seat")
        return cls(config, factories, workers)

    def for_game(self, seed: int) -> list[Policy]:
        """The policies of the other seats, in seat order, for the game of ``seed``."""
        return [make(seed * 16 + k) for k, make in enumerate(self.factories)]

    def close(self) -> None:
        """Drop the calls still queued for the shared models (the server stops: their clients are gone)."""
        for worker in self._workers.values():
            worker.shutdown(wait=False, cancel_futures=True)

    def act(self, policy: Policy, observations: list[Any]) -> list[Any]:
        """``policy.act(observations)``; a shared policy runs on its own worker thread, one call at a time."""
        worker = self._workers.get(id(policy))
        return policy.act(observations) if worker is None else worker.submit(policy.act, observations).result()


class SpyEnvironment(Environment[SpyAction, SpyObservation, SpyState]):
    """One seat of a game; ``seats`` (an agent spec, one per other seat, or a shared
    :class:`SeatPolicies`) plays the others. Construction is cheap: no model is loaded here when
    ``seats`` is a :class:`SeatPolicies`, and the game is made on the first ``reset``."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self, config: GameConfig | None = None, seats: str | Sequence[str] | SeatPolicies = "heuristic"
    ) -> None:
        super().__init__()
        self.config = config or GameConfig()
        self._seats = seats if isinstance(seats, SeatPolicies) else SeatPolicies.build(self.config, seats)
        if self._seats.config.rules.n_players != self.config.rules.n_players:
            raise ValueError("seats: the shared SeatPolicies were built for another number of players")
        self._env: Any = None
        self._policies: dict[str, Policy] = {}
        self._observations: dict[str, Any] = {}
        self._state = SpyState()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, seat: int = 0, **options: Any
    ) -> SpyObservation:
        n = self.config.rules.n_players
        seat = _integer("seat", seat, 0, n - 1)
        seed = secrets.randbelow(2**31) if seed is None else _integer("seed", seed, 0, 2**63 - 1)
        if episode_id is not None and not isinstance(episode_id, str):
            raise ClientError(f"episode_id must be a string, got {episode_id!r}")
        options = _game_options(options)
        if self._env is None:
            self._env = parallel_env(self.config)
        try:
            self._observations, _ = self._env.reset(seed=seed, options=options)
        except ValueError as e:  # an option the game refuses (a document not in the corpus, ...)
            raise ClientError(str(e)) from None
        others = [a for a in self._env.possible_agents if self._env.seat_of[a] != seat]
        self._policies = dict(zip(others, self._seats.for_game(seed), strict=True))
        self._state = SpyState(episode_id=episode_id or f"spyrl-{seed}-{seat}", seed=seed, seat=seat)
        return self._observation(reward=None, done=False, metadata={"seed": seed, "seat": seat})

    def step(self, action: SpyAction, timeout_s: float | None = None, **kwargs: Any) -> SpyObservation:
        env = self._env
        if env is None:
            raise NoGameError(NO_GAME)
        game = env.game
        me = env.possible_agents[self._state.seat]
        if game is None or game.done or me not in env.agents:
            raise NoGameError("the episode is over; reset() to play another game")
        if not isinstance(action, SpyAction):
            raise ClientError(f"action must be a SpyAction with a text, got {type(action).__name__}")
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
            replies = self._seats.act(policy, [self._observations[a] for a in seats])
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


def _integer(name: str, value: Any, low: int, high: int) -> int:
    """An integer in ``low..high``: JSON's ``true`` or ``1.9`` is not one."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClientError(f"{name} must be an integer in {low}..{high}, got {value!r}")
    if not low <= value <= high:
        raise ClientError(f"{name} must be in {low}..{high}, got {value}")
    return value


def _game_options(options: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(options) - set(_OPTION_KEYS))
    if unknown:
        raise ClientError(f"unknown reset options {unknown}; known: seed, seat, episode_id, {', '.join(_OPTION_KEYS)}")
    out = dict(options)
    for key in _INT_OPTIONS:
        if key in out:
            out[key] = _integer(key, out[key], 0, 2**63 - 1)
    if "document_id" in out and not isinstance(out["document_id"], str):
        raise ClientError(f"document_id must be a string, got {out['document_id']!r}")
    return out


def create_spy_app(
    config: GameConfig | None = None,
    seats: str | Sequence[str] | SeatPolicies = "heuristic",
    limits: ServeLimits | None = None,
):
    """The FastAPI app OpenEnv's clients talk to (HTTP and WebSocket): OpenEnv's ``create_app``, one
    environment per WebSocket session, every session sharing one :class:`SeatPolicies` (models are
    loaded here, before the app exists), behind :class:`~spyrl.integrations._guard.GuardMiddleware`.

    A client's mistake (a body or message that is not JSON or nests too deep, a bad seat, seed or
    option, ``/step`` without a game) is an HTTP 4xx with a one-line ``detail`` and the same message
    in a WebSocket error frame. No authentication: anyone who
    reaches the port can play (bind to the loopback, the default, or put it behind a proxy that checks).
    """
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.types import ConcurrencyConfig
    from starlette.exceptions import HTTPException as StarletteHTTPException

    config = config or GameConfig()
    limits = limits or ServeLimits()
    shared = seats if isinstance(seats, SeatPolicies) else SeatPolicies.build(config, seats)
    SpyEnvironment(config, shared)  # a config that does not fit the seats fails here, before the server starts
    app = create_app(
        lambda: SpyEnvironment(config, shared),
        SpyAction,
        SpyObservation,
        env_name="spyrl",
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=limits.max_sessions, session_timeout=limits.idle_timeout_s
        ),
        state_cls=SpyState,
    )

    async def client_error(request: Any, exc: ClientError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status_code)

    async def invalid_request(request: Any, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _one_line(exc.errors())}, status_code=422)

    async def http_error(request: Any, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail if isinstance(exc.detail, str) else _one_line(exc.detail)
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)

    app.add_exception_handler(ClientError, client_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_middleware(GuardMiddleware, limits=limits, check_body=_strict_reset)
    app.router.on_shutdown.append(shared.close)  # Ctrl-C: queued model calls of closed sessions are dropped
    return app


def _strict_reset(path: str, request: Any) -> str | None:
    """HTTP ``/reset``'s ``seed`` as sent (``request``, the body's JSON value, read by the guard with
    the depth-checked parser): OpenEnv's request model would turn ``true`` or ``"3"`` into an
    integer, and a JSON ``true`` is no seed (the WebSocket path checks the same in ``reset``)."""
    if path != "/reset" or not isinstance(request, dict) or request.get("seed") is None:
        return None
    try:
        _integer("seed", request["seed"], 0, 2**63 - 1)
    except ClientError as e:
        return str(e)
    return None


def _one_line(errors: Sequence[Any]) -> str:
    """Pydantic's errors as one line: ``body.seed: Input should be a valid integer; ...``."""
    parts = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()))
        parts.append(f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid")))
    return "; ".join(parts)[:500] or "invalid request"


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    seats: str | Sequence[str] | SeatPolicies = "heuristic",
    config: GameConfig | None = None,
    limits: ServeLimits | None = None,
    app: Any = None,
) -> None:
    """Serve :class:`SpyEnvironment` until interrupted (``spyrl serve`` runs this).

    Ctrl-C stops it within a few seconds whatever clients hold (open sessions, half-sent requests)
    and raises :class:`KeyboardInterrupt` (the CLI exits 130).
    """
    import uvicorn

    limits = limits or ServeLimits()
    app = app if app is not None else create_spy_app(config, seats, limits)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            ws_max_size=limits.max_request_bytes,
            timeout_graceful_shutdown=2,
            timeout_keep_alive=5,
        )
    )
    server.run()  # uvicorn re-raises the SIGINT it caught once it has shut down


def main() -> None:
    """``server`` (the script of the ``openenv-spyrl`` package): the game of ``SPYRL_PLAYERS`` players
    (default 5), the other seats played by ``SPYRL_SEATS`` (default heuristic); Ctrl-C exits 130."""
    import argparse
    import os

    parser = argparse.ArgumentParser(description="spyrl's game as an OpenEnv server (no authentication)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    config = GameConfig(n_players=int(os.environ.get("SPYRL_PLAYERS", "5")))
    try:
        serve(args.host, args.port, seats=os.environ.get("SPYRL_SEATS", "heuristic"), config=config)
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def app():
    """``uvicorn --factory spyrl.integrations.openenv:app``: the default game (openenv.yaml names it)."""
    return create_spy_app()
