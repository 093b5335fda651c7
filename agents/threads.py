"""How many threads torch computes with on a CPU: the cores that are free, not the cores present.

torch starts one intra-op thread per core. A matrix product splits across them and waits for the
slowest; when another process holds one of two cores, every split waits for the thread that shares
its core, and ``spyrl play`` took 2.4 times as long as on an idle machine. Measured before the model
loads (a short look at ``/proc/stat``), the free cores set the thread count:

- ``auto`` (the default): as many threads as cores were idle over :data:`WINDOW_S`, at least one,
  at most the cores this process may run on;
- ``all``: one per core this process may run on (torch's own choice);
- a number: that many.

The setting is ``--threads`` on the command line or the ``SPYRL_THREADS`` environment variable
(which the command line sets, so the processes a command starts follow it). Where ``/proc/stat``
cannot be read (not Linux), ``auto`` is ``all``; where neither is set but ``OMP_NUM_THREADS`` is,
torch's count from it is kept.

``benchmarks/busy_play.py`` times ``spyrl play`` with each setting on an idle machine and beside
known busy processes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["SETTING_ENV", "WINDOW_S", "choose_threads", "fit_threads", "free_cores", "parse_threads", "usable_cores"]

SETTING_ENV = "SPYRL_THREADS"
WINDOW_S = 0.1  # long enough for the scheduler to show a busy core as busy, short beside a model load
PROC_STAT = Path("/proc/stat")
_applied: dict[str, int] = {}  # the setting applied in this process, and its thread count


def parse_threads(text: str, where: str = "--threads") -> str | int:
    """``auto``, ``all`` or a positive number of threads; ``ValueError`` naming ``where`` otherwise."""
    value = text.strip().lower()
    if value in ("auto", "all"):
        return value
    if value.isdigit() and int(value) > 0:
        return int(value)
    raise ValueError(f"{where} must be auto, all or a positive number of threads, got {text!r}")


def usable_cores() -> list[int]:
    """The CPUs this process may run on (its affinity mask; every CPU where there is none)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(os.cpu_count() or 1))


def _cpu_times(cpus: list[int]) -> dict[int, tuple[int, int]] | None:
    """``{cpu: (idle ticks, all ticks)}`` from ``/proc/stat`` (idle counts iowait), or None."""
    try:
        lines = PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    wanted, times = {f"cpu{c}": c for c in cpus}, {}
    for line in lines:
        name, _, rest = line.partition(" ")
        if name in wanted:
            ticks = [int(t) for t in rest.split()[:8]]  # user nice system idle iowait irq softirq steal
            times[wanted[name]] = (ticks[3] + ticks[4], sum(ticks))
    return times if len(times) == len(cpus) else None


def free_cores(window_s: float = WINDOW_S, cpus: list[int] | None = None) -> float | None:
    """How many of ``cpus`` (this process's) were idle over the next ``window_s`` seconds, summed
    over cores (1.4 = one core idle and 40% of another); None where ``/proc/stat`` is not readable."""
    cpus = usable_cores() if cpus is None else cpus
    before = _cpu_times(cpus)
    if before is None:
        return None
    time.sleep(window_s)
    after = _cpu_times(cpus)
    if after is None:
        return None
    free = 0.0
    for cpu in cpus:
        idle, total = after[cpu][0] - before[cpu][0], after[cpu][1] - before[cpu][1]
        free += idle / total if total > 0 else 1.0  # no tick in the window: nothing ran there
    return free


def choose_threads(setting: str | int, cores: int, free: float | None) -> int:
    """The thread count for ``setting`` on ``cores`` usable cores of which ``free`` were idle.

    >>> choose_threads("auto", 2, 1.97), choose_threads("auto", 2, 0.98), choose_threads("auto", 2, 0.1)
    (2, 1, 1)
    >>> choose_threads("all", 2, 0.1), choose_threads(3, 2, 0.1), choose_threads("auto", 8, None)
    (2, 3, 8)
    """
    if isinstance(setting, int):
        return setting
    if setting == "all" or free is None:
        return cores
    return min(cores, max(1, round(free)))


def fit_threads(setting: str | int | None = None) -> int:
    """Set torch's intra-op threads for ``setting`` (else ``SPYRL_THREADS``, else ``auto``) and return
    the count. Measured once a process for a setting: the second model a command loads keeps the
    count the first chose (its own threads would count as busy cores)."""
    import torch

    if setting is None:
        if SETTING_ENV not in os.environ and "OMP_NUM_THREADS" in os.environ:
            return torch.get_num_threads()  # the user chose with OpenMP's own variable
        setting = parse_threads(os.environ.get(SETTING_ENV, "auto"), SETTING_ENV)
    key = str(setting)
    if key not in _applied:
        cpus = usable_cores()
        free = free_cores(cpus=cpus) if setting == "auto" else None
        _applied.clear()
        _applied[key] = choose_threads(setting, len(cpus), free)
    if torch.get_num_threads() != _applied[key]:
        torch.set_num_threads(_applied[key])
    return _applied[key]
