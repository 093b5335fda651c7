"""spy_env: the Who-Is-the-Spy game of RLSVR / SpyRL as a PettingZoo environment.

>>> import spy_env
>>> env = spy_env.make(n_players=5)
>>> env.reset(seed=0)
>>> env.agent_selection
'player_0'
"""

from __future__ import annotations

import warnings

import spy_env.task_corpora  # noqa: F401  (registers govreport and writingprompts as corpus sources)
from spy_env.config import GameConfig
from spy_env.corpus import CorpusFilter, Document, load_corpus
from spy_env.env import GameHost, env, make, parallel_env, raw_env
from spy_env.game import Game, RoundResult
from spy_env.stage import Stage

__version__ = "0.1.0"

ENV_ID = "spy_env/WhoIsTheSpy-v0"

__all__ = [
    "ENV_ID",
    "CorpusFilter",
    "Document",
    "Game",
    "GameConfig",
    "GameHost",
    "RoundResult",
    "Stage",
    "env",
    "load_corpus",
    "make",
    "parallel_env",
    "raw_env",
]


def _register() -> None:
    """Register ``spy_env/WhoIsTheSpy-v0`` with PettingZoo's registries (PettingZoo >= 1.27)."""
    try:
        from pettingzoo import aec_registry, parallel_registry, register
    except ImportError:  # older PettingZoo without a registry
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re-import in the same process re-registers
        if ENV_ID not in aec_registry:
            register("aec", ENV_ID, entry_point="spy_env.env:env")
        if ENV_ID not in parallel_registry:
            register("parallel", ENV_ID, entry_point="spy_env.env:parallel_env")


_register()
