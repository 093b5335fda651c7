"""spyrl where people already train: adapters for TRL, OpenEnv and verifiers.

Each adapter is its own module with its own extra, imported only when used:

* :mod:`spyrl.integrations.trl` (``pip install 'spyrl[trl]'``): datasets and reward functions for
  TRL's ``GRPOTrainer``, and an ``environment_factory`` class;
* :mod:`spyrl.integrations.openenv` (``pip install 'spyrl[openenv]'``): an OpenEnv ``Environment``
  and its server (``spyrl serve``);
* :mod:`spyrl.integrations.verifiers` (``pip install 'spyrl[verifiers]'``): a verifiers v1 ``Env``
  with roles ``spy`` and ``civilian`` (taskset id ``spyrl-game``).

TRL and verifiers need Python >= 3.11. See docs/integrations.md.
"""
