"""``spyrl serve``: the game as an OpenEnv server (the logic lives here; ``spyrl.cli`` only registers it)."""

from __future__ import annotations

import argparse
import socket

__all__ = ["add_serve_command", "cmd_serve"]


def add_serve_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve one seat of the game as an OpenEnv environment (HTTP + WebSocket)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--seats", default="heuristic", help="agent spec for the other seats, or a comma-separated spec per other seat"
    )
    p.add_argument("--players", type=int, default=5, help="players per game, the client's seat included")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--degrade", default=None, help="degradation operator (default: the task's)")
    p.add_argument("--max-sessions", type=int, default=64, help="concurrent WebSocket sessions")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from agents.registry import spec_problem
    from spy_env.config import GameConfig

    if not 1 <= args.port <= 65535:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    if args.max_sessions < 1:
        raise ValueError(f"--max-sessions must be >= 1, got {args.max_sessions}")
    specs = [s.strip() for s in args.seats.split(",")]
    for spec in specs:
        problem = spec_problem(spec)
        if problem:
            raise ValueError(f"--seats: {problem}")
    config = GameConfig(n_players=args.players, rounds=args.rounds, degrade=args.degrade)
    seats = specs[0] if len(specs) == 1 else specs
    try:
        from spyrl.integrations.openenv import create_spy_app
    except ImportError as e:
        raise ImportError(f"spyrl serve needs OpenEnv: pip install 'spyrl[openenv]' ({e})") from e
    app = create_spy_app(config, seats, args.max_sessions)
    _check_free(args.host, args.port)
    import uvicorn

    print(
        f"spyrl OpenEnv server on http://{args.host}:{args.port} (other seats: {args.seats}; Ctrl-C stops)", flush=True
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def _check_free(host: str, port: int) -> None:
    """A taken port or an unknown host is the user's to fix: one line, not uvicorn's traceback."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise OSError(f"cannot listen on {host}:{port} ({e.strerror or e})") from None
