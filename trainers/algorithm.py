"""The algorithm pieces of SpyRL's GRPO, each a small pure function or state object.

Symbols follow docs/TRAINING.md and the paper:

- detection advantages, normalised within a group (a game's n voters, by default):
  ``A_i = (r_i − mean_g(r)) / (std_g(r) + ε)``;
- role-conditioned EMA baselines (RAE) for performing advantages:
  ``A_i = r_i − b_role(i)``, then ``b_role ← α b_role + (1 − α) r̄_role``;
- the stage controller: EMAs of detection accuracy ``acc`` and N/A rate ``na`` switch between
  the detection and performing stages with hysteresis and a minimum stay of ``K_min`` iterations.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spy_env.stage import Stage
from trainers.choices import vote_gradient_of
from trainers.sections import StageConfig

__all__ = [
    "ROLES",
    "RAEBaselines",
    "StageController",
    "add_penalties",
    "batch_group_stats",
    "controller_signals",
    "group_normalized_advantages",
    "group_scaled",
    "moments_stats",
    "role_means",
    "role_reward_sums",
    "vote_moments",
]

# the schedule names of the fixed schedules (configs store them; past parsing a stage is a Stage)
DETECT = Stage.VOTE.schedule_name
PERFORM = Stage.PERFORM.schedule_name
ROLES = ("civilian", "spy")  # the roles RAE keeps a baseline for, in the order processes add up their rewards


def group_normalized_advantages(
    rewards: Sequence[float],
    groups: Sequence[Hashable],
    eps: float = 1e-4,
    scale: bool = True,
    stats: Mapping[Hashable, tuple[float, float]] | None = None,
) -> np.ndarray:
    """Eq. 5: ``A_i = (r_i − mean_g r) / (std_g r + ε)`` within each group ``g`` (population std).

    ``r_i`` is voter ``i``'s detection reward ``r_i^D = 1[v_i = u]`` (Eq. 4), ``g`` its game's
    voters ``i ∈ {1..n}`` (``detect_advantage_groups="game"``). With ``scale=False`` only the
    mean is removed (Dr. GRPO's unscaled variant). ``stats``: a group's ``(mean, std)`` when its
    members are not all here (the ``batch`` group of several processes: :func:`moments_stats`).

    >>> group_normalized_advantages([1, 0, 0, 1, 1, 1], ["a", "a", "a", "b", "b", "b"]).round(3).tolist()
    [1.414, -0.707, -0.707, 0.0, 0.0, 0.0]
    >>> group_normalized_advantages([1, 0], [0, 0], stats={0: (0.25, 0.5)}).round(3).tolist()
    [1.5, -0.5]
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    advantages = np.zeros_like(rewards)
    index: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        index.setdefault(g, []).append(i)
    for g, members in index.items():
        r = rewards[members]
        mean, std = stats[g] if stats and g in stats else (r.mean(), r.std())
        centered = r - mean
        advantages[members] = centered / (std + eps) if scale else centered
    return advantages


def moments_stats(moments: Sequence[float]) -> tuple[float, float]:
    """``(mean, population std)`` from ``[Σ m1, Σ m2, n]``: first and second moments summed over members
    (and over processes: what the ``batch`` group of an iteration's votes needs on several processes).

    >>> moments_stats([1.0, 1.0, 4])
    (0.25, 0.4330127018922193)
    """
    total, squares, count = moments
    if not count:
        return 0.0, 0.0
    mean = total / count
    return float(mean), float(np.sqrt(max(squares / count - mean * mean, 0.0)))


def vote_moments(
    rows: Sequence[Mapping[str, Any]], rewards: Sequence[float], vote_gradient: str, weight_detect: float = 1.0
) -> list[float]:
    """``[Σ m1, Σ m2, n]`` of this process's votes: what processes add up so that ``detect_advantage_groups``
    ``batch`` normalises over the iteration's global votes, not one process's share. ``m1``, ``m2``: a vote's
    reward and its square (under its recorded choice distribution with ``vote_gradient="expected"``).

    >>> vote_moments([{}, {}], [1.0, 0.0], "sampled")
    [1.0, 1.0, 2]
    """
    gradient = vote_gradient_of(vote_gradient)
    if gradient.moments is not None:
        return gradient.moments(rows, weight_detect)
    r = np.asarray(rewards, dtype=np.float64)
    return [float(r.sum()), float((r * r).sum()), len(rows)]


def batch_group_stats(moments: Sequence[float]) -> dict[Hashable, tuple[float, float]]:
    """The ``batch`` group's ``(mean, std)`` from :func:`vote_moments` summed over processes.

    >>> batch_group_stats([1.0, 1.0, 4])[0][0]
    0.25
    """
    return {0: moments_stats(moments)}


def group_scaled(
    advantages: Sequence[float], rewards: Sequence[float], groups: Sequence[Hashable], eps: float = 1e-4
) -> np.ndarray:
    """``A_i / (std_g r + ε)``: RAE advantages ``A_i = r_i − b_role`` scaled by their group's reward std.

    ``perform_group_norm`` with RAE: the baseline centres, the replay group scales. (Re-centring on
    the group mean as well would cancel ``b_role`` exactly, since a group is one seat of one role.)
    A group whose rewards are all equal has no spread to scale by and keeps ``A_i`` as it is: dividing
    by ``ε`` alone would multiply its advantages by 1/ε (in GRPO the numerator is 0 there; with a role
    baseline it is not).

    >>> group_scaled([1.0, 3.0], [0.0, 2.0], ["a", "a"]).round(3).tolist()
    [1.0, 3.0]
    >>> group_scaled([0.5, 0.5], [1.25, 1.25], ["a", "a"]).tolist()
    [0.5, 0.5]
    """
    advantages = np.asarray(advantages, dtype=np.float64)
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.empty_like(advantages)
    index: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        index.setdefault(g, []).append(i)
    for members in index.values():
        std = rewards[members].std()
        out[members] = advantages[members] / (std + eps) if std > 0 else advantages[members]
    return out


def add_penalties(advantages: Sequence[float], penalties: Sequence[float]) -> np.ndarray:
    """``A_i + p_i``: format/rule penalties (≤ 0) charged to the offender's advantage alone.

    Added after the group normalisation (Eq. 5) or the RAE role baseline, so a penalty never
    shifts the mean another player is measured against nor is divided by a group std: with the
    penalty inside the reward, votes ``[0, 0, 0, invalid]`` gave the three wrong votes ``+0.58``.

    >>> add_penalties(group_normalized_advantages([0, 0, 0, 0], ["g"] * 4), [0, 0, 0, -0.1]).tolist()
    [0.0, 0.0, 0.0, -0.1]
    """
    return np.asarray(advantages, dtype=np.float64) + np.asarray(penalties, dtype=np.float64)


def controller_signals(metrics: Mapping[str, float], spy_vote_trained: bool) -> tuple[float, float]:
    """``(acc, na)`` the stage controller reads from an iteration's :func:`spy_env.metrics.game_metrics`.

    ``acc`` is the civilians' detection accuracy. ``na`` is the N/A rate of the votes that train:
    every vote when the spy's vote trains, the civilians' otherwise. An untrained spy that always
    abstains would otherwise hold ``na ≥ 1/n`` (0.2 at n = 5 > ``na_low`` 0.1) for ever, and
    detection → performing could never fire.
    """
    na = metrics["na_rate"] if spy_vote_trained else metrics["civilian_na_rate"]
    return float(metrics["detection_accuracy"]), float(na)


@dataclass
class RAEBaselines:
    """Role-conditioned EMA baselines ``b_role`` (RAE): the performing-stage advantage.

    ``advantages`` uses the baselines *before* this batch's update, then updates them with the
    batch mean reward of each role: ``b_role ← α b_role + (1 − α) r̄_role``.

    ``init``: ``"first_batch"`` seeds a role's baseline with the mean of its first batch before
    that batch's advantages (so the first performing iteration is centred per role: no cold
    start); ``"zero"`` starts every baseline at 0 (with α = 0.9 the spy's −1.75 role bias then
    survives as −0.68 after 10 iterations).
    """

    alpha: float = 0.9
    baselines: dict[str, float] = field(default_factory=dict)
    init: str = "first_batch"

    def __post_init__(self) -> None:
        if not 0 <= self.alpha < 1:
            raise ValueError(f"RAE alpha must be in [0, 1), got {self.alpha}")
        if self.init not in ("first_batch", "zero"):
            raise ValueError(f"RAE init must be 'first_batch' or 'zero', got {self.init!r}")

    @staticmethod
    def role_means(rewards: Sequence[float], roles: Sequence[str]) -> dict[str, float]:
        """``r̄_role``: the batch mean reward of each role present."""
        return {
            role: float(np.mean([r for r, k in zip(rewards, roles, strict=True) if k == role])) for role in set(roles)
        }

    def seed(self, role_means: Mapping[str, float]) -> None:
        """With ``init="first_batch"``: ``b_role ← r̄_role`` for roles without a baseline yet."""
        if self.init == "first_batch":
            for role in sorted(role_means):
                self.baselines.setdefault(role, float(role_means[role]))

    def advantages(
        self,
        rewards: Sequence[float],
        roles: Sequence[str],
        update: bool = True,
        role_means: Mapping[str, float] | None = None,
    ) -> np.ndarray:
        """``A_i = r_i − b_role(i)`` (``role_means``: global ``r̄_role`` when several processes share a batch).

        >>> rae = RAEBaselines(alpha=0.5, init="zero")
        >>> rae.advantages([1.0, -3.0, 1.0], ["civilian", "spy", "civilian"]).tolist()
        [1.0, -3.0, 1.0]
        >>> rae.baselines
        {'civilian': 0.5, 'spy': -1.5}
        >>> RAEBaselines(alpha=0.5).advantages([1.0, -3.0, 0.0], ["civilian", "spy", "civilian"]).tolist()
        [0.5, 0.0, -0.5]
        """
        rewards = np.asarray(rewards, dtype=np.float64)
        means = dict(role_means) if role_means is not None else self.role_means(rewards, roles)
        self.seed(means)
        advantages = np.array([r - self.baselines.get(role, 0.0) for r, role in zip(rewards, roles, strict=True)])
        if update:
            self.update(means)
        return advantages

    def update(self, role_means: Mapping[str, float]) -> None:
        """``b_role ← α b_role + (1 − α) r̄_role`` for each role with a batch mean."""
        for role in sorted(role_means):
            self.baselines[role] = self.alpha * self.baselines.get(role, 0.0) + (1 - self.alpha) * role_means[role]

    def state_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "baselines": dict(self.baselines), "init": self.init}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.alpha = float(state["alpha"])
        self.baselines = {k: float(v) for k, v in state["baselines"].items()}
        self.init = str(state.get("init", "zero"))  # checkpoints before `init` existed started at 0


def role_reward_sums(rewards: Sequence[float], roles: Sequence[str]) -> list[float]:
    """``[Σ r_civilian, Σ r_spy, n_civilian, n_spy]``: what processes add up for global role means.

    >>> role_reward_sums([1.0, -2.0, 3.0], ["civilian", "spy", "civilian"])
    [4.0, -2.0, 2, 1]
    """
    totals = [sum(r for r, k in zip(rewards, roles, strict=True) if k == role) for role in ROLES]
    return totals + [roles.count(role) for role in ROLES]


def role_means(sums: Sequence[float]) -> dict[str, float]:
    """``r̄_role`` from :func:`role_reward_sums` (summed over processes), for the roles present.

    >>> role_means([4.0, 0.0, 2, 0])
    {'civilian': 2.0}
    """
    return {role: sums[i] / sums[i + 2] for i, role in enumerate(ROLES) if sums[i + 2]}


@dataclass
class StageController:
    """Which stage trains next (the paper's controller): alternating with hysteresis, or a fixed schedule.

    Symbols: ``acc`` detection accuracy, ``na`` N/A rate, ρ = ``ema``, ``K_min`` = ``k_min`` (``k_perform``,
    where given, is the performing stage's own ``K_min``: the stages need not take equal turns);
    ``acc_ema ← ρ acc_ema + (1 − ρ) acc`` (the first value initialises it).

    ``schedule``:

    - ``"adaptive"`` (paper): EMAs of ``acc`` and ``na`` (factor ``ema``); detection →
      performing when ``acc ≥ acc_high`` and ``na ≤ na_low``; performing → detection when
      ``1 − acc ≥ err_high`` or ``na ≥ na_high``; at least ``k_min`` iterations per stage.
    - ``"alternate"``: switch every ``k_min`` iterations (every ``k_perform`` in the performing stage).
    - ``"detect"`` / ``"perform"``: always that stage.

    ``start`` and ``stage`` are :class:`~spy_env.Stage` members (the detection stage trains
    :attr:`Stage.VOTE`); a schedule name (``"detect"``) given for ``start`` is parsed once here.
    Only :meth:`state_dict` writes them back as schedule names, for JSON checkpoints.
    """

    schedule: str = "adaptive"
    start: Stage = Stage.VOTE
    acc_high: float = 0.9
    na_low: float = 0.1
    err_high: float = 0.4
    na_high: float = 0.5
    k_min: int = 5
    ema: float = 0.9
    k_perform: int | None = None
    stage: Stage | None = None
    iterations_in_stage: int = 0
    acc_ema: float | None = None
    na_ema: float | None = None
    switches: list[int] = field(default_factory=list)
    iteration: int = 0

    def __post_init__(self) -> None:
        if self.schedule not in ("adaptive", "alternate", DETECT, PERFORM):
            raise ValueError(f"stage schedule must be adaptive, alternate, detect or perform, got {self.schedule!r}")
        if self.start not in (Stage.VOTE, Stage.PERFORM, DETECT, PERFORM):  # a Stage is its own string
            raise ValueError(f"start stage must be detect or perform, got {self.start!r}")
        self.start = Stage.of(self.start)
        if self.k_min < 1 or not 0 <= self.ema < 1 or (self.k_perform is not None and self.k_perform < 1):
            raise ValueError("k_min and k_perform must be >= 1 and ema in [0, 1)")
        if self.stage is None:
            self.stage = self.start if self.schedule in ("adaptive", "alternate") else Stage.of(self.schedule)
        self.stage = Stage.of(self.stage)

    @classmethod
    def from_config(cls, config: StageConfig) -> StageController:
        """The controller ``SpyRLConfig.stages`` asks for."""
        return cls(
            schedule=config.stage_schedule,
            start=config.start_stage,
            acc_high=config.acc_high,
            na_low=config.na_low,
            err_high=config.err_high,
            na_high=config.na_high,
            k_min=config.k_min,
            ema=config.stage_ema,
            k_perform=config.k_perform,
        )

    @property
    def training_stage(self) -> Stage:
        """The game stage whose samples train now (:attr:`Stage.VOTE` in the detection stage)."""
        return self.stage

    def update(self, acc: float, na: float) -> Stage:
        """Record this iteration's detection accuracy and N/A rate; return the stage that trains next."""
        self.iteration += 1
        self.iterations_in_stage += 1
        self.acc_ema = acc if self.acc_ema is None else self.ema * self.acc_ema + (1 - self.ema) * acc
        self.na_ema = na if self.na_ema is None else self.ema * self.na_ema + (1 - self.ema) * na
        if self.schedule in (DETECT, PERFORM) or self.iterations_in_stage < self.stage_length(self.stage):
            return self.stage
        if self.schedule == "alternate":
            return self._switch()
        if self.stage is Stage.VOTE and self.acc_ema >= self.acc_high and self.na_ema <= self.na_low:
            return self._switch()
        if self.stage is Stage.PERFORM and (1 - self.acc_ema >= self.err_high or self.na_ema >= self.na_high):
            return self._switch()
        return self.stage

    def stage_length(self, stage: Stage) -> int:
        """``K_min`` of ``stage``: ``k_perform`` for the performing stage where it is given, ``k_min`` otherwise."""
        return self.k_perform if stage is Stage.PERFORM and self.k_perform is not None else self.k_min

    def _switch(self) -> Stage:
        self.stage = Stage.PERFORM if self.stage is Stage.VOTE else Stage.VOTE
        self.iterations_in_stage = 0
        self.switches.append(self.iteration)
        return self.stage

    def state_dict(self) -> dict[str, Any]:
        state = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return {**state, "start": self.start.schedule_name, "stage": self.stage.schedule_name}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key, value in state.items():
            setattr(
                self, key, list(value) if key == "switches" else Stage.of(value) if key in ("start", "stage") else value
            )
