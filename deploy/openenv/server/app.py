"""OpenEnv entry point: the FastAPI app of spyrl's game (``uvicorn server.app:app``), and ``main()``.

The environment is :class:`spyrl.integrations.openenv.SpyEnvironment`; ``spyrl serve`` runs the same
app with more options (players, agents of the other seats).
"""

from __future__ import annotations

import argparse
import os

from spy_env.config import GameConfig
from spyrl.integrations.openenv import create_spy_app, serve

app = create_spy_app(
    GameConfig(n_players=int(os.environ.get("SPYRL_PLAYERS", "5"))), os.environ.get("SPYRL_SEATS", "heuristic")
)


def main() -> None:
    parser = argparse.ArgumentParser(description="spyrl's game as an OpenEnv server")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    try:
        serve(args.host, args.port, app=app)  # the request size limits and a prompt Ctrl-C, as `spyrl serve`
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
