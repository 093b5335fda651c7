"""A typed OpenEnv client for ``spyrl serve``: :class:`SpyAction` in, :class:`SpyObservation` out.

>>> from spyrl.integrations.openenv_client import SpyAction, SpyEnvClient  # doctest: +SKIP
>>> with SpyEnvClient(base_url="http://127.0.0.1:8000").sync() as env:  # doctest: +SKIP
...     result = env.reset(seed=3, seat=1)
...     result.observation.stage, result.observation.messages[-1]["content"][:40]
...     result = env.step(SpyAction(text="Problem: ... \\\\boxed{5}"))

It plays over OpenEnv's WebSocket session (``/ws``): the game lives on the server between steps.
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from spyrl.integrations.openenv import SpyAction, SpyObservation, SpyState

__all__ = ["SpyAction", "SpyEnvClient", "SpyObservation", "SpyState"]


class SpyEnvClient(EnvClient[SpyAction, SpyObservation, SpyState]):
    """OpenEnv's ``EnvClient`` for spyrl's game: typed actions, observations and state.

    ``step`` takes a :class:`SpyAction` (or a plain string, the seat's text).
    """

    def _step_payload(self, action: SpyAction | str) -> dict[str, Any]:
        if isinstance(action, str):
            action = SpyAction(text=action)
        if not isinstance(action, SpyAction):
            raise TypeError(f"step() takes a SpyAction or a string, got {type(action).__name__}")
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[SpyObservation]:
        fields = dict(payload.get("observation") or {})
        metadata = payload.get("metadata") or fields.pop("metadata", None) or {}
        fields.pop("metadata", None)
        observation = SpyObservation(
            **fields, reward=payload.get("reward"), done=bool(payload.get("done", False)), metadata=metadata
        )
        return StepResult(observation=observation, reward=observation.reward, done=observation.done, metadata=metadata)

    def _parse_state(self, payload: dict[str, Any]) -> SpyState:
        return SpyState(**payload)
