"""The verifiers taskset ``spyrl-game``: verifiers' loader imports this module by the taskset id.

The environment itself lives in :mod:`spyrl.integrations.verifiers`.
"""

from spyrl.integrations.verifiers import SpyEnv, SpyEnvConfig, SpyTask, SpyTaskData, SpyTaskset, SpyTasksetConfig

__all__ = ["SpyEnv", "SpyEnvConfig", "SpyTask", "SpyTaskData", "SpyTaskset", "SpyTasksetConfig"]
