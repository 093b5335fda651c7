"""``update.mini_batch_unit``: what ``update.mini_batch_size`` counts, each unit a registered object.

- ``samples``: a mini-batch is ``mini_batch_size`` training samples (all processes together);
- ``documents``: verl's prompt-counted ``ppo_mini_batch_size`` (in prompts, × rollout.n): an iteration
  of ``documents`` documents makes ``ceil(documents / mini_batch_size)`` optimizer steps an epoch.

:func:`trainers.update.mini_batch_size` turns a unit into samples per step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agents.registry import Registry

__all__ = ["MINI_BATCH_UNITS", "MiniBatchUnit"]


@dataclass(frozen=True)
class MiniBatchUnit:
    """A ``mini_batch_unit``: what ``mini_batch_size`` counts.

    ``updates(documents, mini_batch_size)``: the optimizer steps per epoch of an iteration of ``documents``
    documents (all processes together), or 0 when ``mini_batch_size`` counts the samples of each step.
    ``counts_samples``: a mini-batch is ``mini_batch_size`` samples, so it must split into whole
    micro-batches.
    """

    updates: Callable[[int, int], int]
    counts_samples: bool = False


def _sample_steps(documents: int, mini_batch_size: int) -> int:
    """Each step takes ``mini_batch_size`` samples: as many steps as the samples fill."""
    return 0


def _document_steps(documents: int, mini_batch_size: int) -> int:
    """verl's prompt-counted ``ppo_mini_batch_size`` (in prompts, × rollout.n): ``ceil(documents /
    mini_batch_size)`` steps, so 128 documents of 128 make one."""
    return -(-documents // mini_batch_size)


MINI_BATCH_UNITS: Registry[MiniBatchUnit] = Registry("mini_batch_unit")
MINI_BATCH_UNITS.register("samples", MiniBatchUnit(_sample_steps, counts_samples=True))
MINI_BATCH_UNITS.register("documents", MiniBatchUnit(_document_steps))
