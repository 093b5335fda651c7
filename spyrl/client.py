"""What OpenEnv's ``AutoEnv`` imports once the ``openenv-spyrl`` package (deploy/openenv) is installed.

``AutoEnv`` finds installed ``openenv-*`` distributions and, for ``openenv-spyrl``, loads
``spyrl/openenv.yaml`` and the classes ``SpyrlEnv``, ``SpyrlAction`` and ``SpyrlObservation`` of this
module: the typed client of :mod:`spyrl.integrations.openenv_client` under the names its conventions
expect.
"""

from __future__ import annotations

from spyrl.integrations.openenv_client import SpyAction as SpyrlAction
from spyrl.integrations.openenv_client import SpyEnvClient as SpyrlEnv
from spyrl.integrations.openenv_client import SpyObservation as SpyrlObservation
from spyrl.integrations.openenv_client import SpyState as SpyrlState

__all__ = ["SpyrlAction", "SpyrlEnv", "SpyrlObservation", "SpyrlState"]
