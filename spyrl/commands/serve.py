"""``spyrl serve``: one seat of the game as an OpenEnv server (``spyrl.integrations.openenv`` is the server)."""

from __future__ import annotations

import argparse
import math
import socket

from spy_env.degrade import DEGRADERS
from spyrl.integrations._guard import MAX_IDLE_TIMEOUT_S

NO_AUTH = (
    "The server has no authentication: anyone who can reach --host:--port can play and use the models it "
    "loaded. Keep the default loopback address, or put it behind a proxy that authenticates."
)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve",
        help="serve one seat of the game as an OpenEnv environment (HTTP + WebSocket; no authentication)",
        description="Serve one seat of the game as an OpenEnv environment: play it over the WebSocket /ws "
        "(HTTP /reset and /step are stateless in OpenEnv; /step answers 409). The other seats' agents are "
        "loaded once, before the server accepts connections, and shared by every session. " + NO_AUTH,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--seats",
        default="heuristic",
        help="agent spec for the other seats, or a comma-separated spec per other seat (not 'human')",
    )
    p.add_argument(
        "--max-new-tokens", type=int, default=None, help="token budget of each LLM seat's reply (default: the agent's)"
    )
    p.add_argument("--players", type=int, default=5, help="players per game, the client's seat included")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument(
        "--max-document-chars", type=int, default=None, help="truncate source documents to this many characters"
    )
    p.add_argument(
        "--degrade", default=None, help=f"degradation operator: {', '.join(sorted(DEGRADERS))} (default: the task's)"
    )
    p.add_argument("--max-sessions", type=int, default=64, help="concurrent WebSocket sessions, all clients together")
    p.add_argument("--per-client", type=int, default=16, help="concurrent WebSocket sessions of one client address")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        help="seconds a session may wait for its client (default 300, at most 86400)",
    )
    p.add_argument(
        "--max-request-bytes", type=int, default=1_000_000, help="largest HTTP body or WebSocket message (bytes)"
    )
    return p


def run(args: argparse.Namespace) -> int:
    from agents.registry import backend_of, spec_problem
    from agents.sampling import SamplingParams
    from spy_env.config import GameConfig

    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    for flag, value in (
        ("--max-sessions", args.max_sessions),
        ("--per-client", args.per_client),
        ("--max-request-bytes", args.max_request_bytes),
    ):
        if value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if not (math.isfinite(args.idle_timeout) and 0 < args.idle_timeout <= MAX_IDLE_TIMEOUT_S):
        raise ValueError(
            f"--idle-timeout must be > 0 and at most {MAX_IDLE_TIMEOUT_S:g} seconds, got {args.idle_timeout}"
        )
    specs = [s.strip() for s in args.seats.split(",")]
    for spec in specs:
        problem = spec_problem(spec)
        if problem:
            raise ValueError(f"--seats: {problem}")
        if backend_of(spec).name == "human":
            raise ValueError("--seats: 'human' reads the server's terminal; a server's seats must be agents")
    sizes = {} if args.max_document_chars is None else {"max_document_chars": args.max_document_chars}
    config = GameConfig(n_players=args.players, rounds=args.rounds, degrade=args.degrade, **sizes)
    seats = specs[0] if len(specs) == 1 else specs
    try:
        from spyrl.integrations.openenv import SeatPolicies, ServeLimits, create_spy_app, serve
    except ImportError as e:
        raise ImportError(f"spyrl serve needs OpenEnv: pip install 'spyrl[openenv]' ({e})") from e
    limits = ServeLimits(args.max_sessions, args.per_client, args.idle_timeout, args.max_request_bytes)
    _check_free(args.host, args.port)
    sampling = None if args.max_new_tokens is None else SamplingParams(max_new_tokens=args.max_new_tokens)
    shared = SeatPolicies.build(config, seats, sampling)  # loads the seats' models, before any connection
    app = create_spy_app(config, shared, limits)
    print(
        f"spyrl OpenEnv server on http://{args.host}:{args.port} (other seats: {args.seats}; "
        "no authentication; Ctrl-C stops)",
        flush=True,
    )
    serve(args.host, args.port, limits=limits, app=app)
    return 0


def _check_free(host: str, port: int) -> None:
    """A taken port or an unknown host is the user's to fix: one line, not uvicorn's traceback."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise OSError(f"cannot listen on {host}:{port} ({e.strerror or e})") from None
