"""agents: policies that play spy_env — scripted baselines now, LLM backends by spec string.

``agents.load(spec)`` builds a policy from a spec string:

- ``"random"``, ``"heuristic"``: scripted baselines (``"random:SEED"`` sets the seed).
"""

from __future__ import annotations

from typing import Any

from agents.scripted import HeuristicAgent, RandomAgent
from spy_env.policy import Action, Policy, chat_messages

__all__ = ["Action", "HeuristicAgent", "Policy", "RandomAgent", "chat_messages", "load"]

_SCRIPTED = {"random": RandomAgent, "heuristic": HeuristicAgent}


def load(spec: str, **kwargs: Any) -> Policy:
    """Build a policy from a spec string (see the module docstring)."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"agent spec must be a non-empty string, got {spec!r}")
    kind, _, arg = spec.partition(":")
    if kind in _SCRIPTED:
        if arg:
            try:
                kwargs.setdefault("seed", int(arg))
            except ValueError as e:
                raise ValueError(
                    f"agent spec {spec!r}: the part after ':' must be an integer seed"
                ) from e
        return _SCRIPTED[kind](**kwargs)
    raise ValueError(f"unknown agent spec {spec!r}; known: {sorted(_SCRIPTED)}")
