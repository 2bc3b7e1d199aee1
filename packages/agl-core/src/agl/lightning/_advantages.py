"""Advantage estimators: from per-call returns to per-call advantages, with group baselines.

A **group** is the ``n`` rollouts of one task (``AlgorithmContext.run_rollouts(tasks, n=...)``).
Each rollout has a **value**, the return of its first call (with :class:`~agl.lightning._credit.
FinalReward`, its final reward; a rollout that made no call of a trained agent still counts with
its final reward), and each call a return. Baselines and scales are statistics over *rollout*
values, one per rollout, never over calls: a rollout that made twenty calls weighs in a group's
mean exactly as much as one that made two, so a long trajectory does not outweigh a short one.

Worked example, GRPO on a group of three rollouts with final rewards 1, 0, 0 (``FinalReward``):
mean 1/3, sample standard deviation 0.577, so every call of the first rollout gets advantage
+1.155 and every call of the others -0.577, however many calls each made.

An estimator returns None for a group it can learn nothing from (all values equal, or one
rollout where a group is needed); those groups are dropped and counted, not trained as zeros.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from agl._errors import InvalidInputError

__all__ = ["GRPO", "RLOO", "AdvantageEstimator", "Group", "Reinforce", "advantage_estimator"]


@dataclass(slots=True)
class Group:
    """The rollouts of one task: each one's value and its calls' returns."""

    key: str
    values: list[float]
    returns: list[list[float]]


@runtime_checkable
class AdvantageEstimator(Protocol):
    """Turns the returns of every group of a batch into advantages (None: drop the group)."""

    def estimate(self, groups: Sequence[Group]) -> list[list[list[float]] | None]:
        """One entry per group: per rollout, per call, the advantage; or None."""
        ...


def _zero_variance(values: Sequence[float]) -> bool:
    return max(values) - min(values) <= 1e-12


class GRPO:
    """Group-relative advantages: ``(G - mean) / (std + eps)`` over the group's rollout values.

    Args:
        scale: Divide by the group's sample standard deviation (False: centre only, as in
            Dr. GRPO).
        eps: Added to the standard deviation.
        over: ``"rollouts"`` (the default): the mean and deviation are taken over the group's
            rollout values, one per rollout. ``"calls"``: over every call's return in the group,
            so a rollout that made more calls weighs more in the baseline, as in
            implementations that treat each call as a sample of its own (kept to measure the
            difference: ``benchmarks/learning.py``).
    """

    name = "grpo"

    def __init__(
        self,
        *,
        scale: bool = True,
        eps: float = 1e-6,
        over: Literal["rollouts", "calls"] = "rollouts",
    ) -> None:
        if over not in ("rollouts", "calls"):
            raise InvalidInputError(
                f"over must be 'rollouts' or 'calls', got {over!r}", field="over"
            )
        self.scale = scale
        self.eps = eps
        self.over = over

    def estimate(self, groups: Sequence[Group]) -> list[list[list[float]] | None]:
        out: list[list[list[float]] | None] = []
        for group in groups:
            values = group.values
            if self.over == "calls":
                values = [g for returns in group.returns for g in returns] or values
            if len(group.values) < 2 or len(values) < 2 or _zero_variance(values):
                out.append(None)
                continue
            mean = statistics.fmean(values)
            divisor = (statistics.stdev(values) + self.eps) if self.scale else 1.0
            out.append([[(g - mean) / divisor for g in returns] for returns in group.returns])
        return out

    def __repr__(self) -> str:
        return f"GRPO(scale={self.scale}, eps={self.eps}, over={self.over!r})"


class RLOO:
    """Leave-one-out baselines: each rollout's baseline is the mean of the *other* rollouts."""

    name = "rloo"

    def estimate(self, groups: Sequence[Group]) -> list[list[list[float]] | None]:
        out: list[list[list[float]] | None] = []
        for group in groups:
            values = group.values
            n = len(values)
            if n < 2 or _zero_variance(values):
                out.append(None)
                continue
            total = math.fsum(values)
            out.append(
                [
                    [g - (total - values[i]) / (n - 1) for g in returns]
                    for i, returns in enumerate(group.returns)
                ]
            )
        return out

    def __repr__(self) -> str:
        return "RLOO()"


class Reinforce:
    """Plain REINFORCE: ``G - b``, one baseline for the whole batch.

    Args:
        baseline: ``"mean"`` (the mean rollout value of the batch) or a fixed number (0.0:
            no baseline).
    """

    name = "reinforce"

    def __init__(self, baseline: float | str = "mean") -> None:
        if isinstance(baseline, str) and baseline != "mean":
            raise InvalidInputError(
                f"baseline must be 'mean' or a number, got {baseline!r}", field="baseline"
            )
        self.baseline = baseline

    def estimate(self, groups: Sequence[Group]) -> list[list[list[float]] | None]:
        if isinstance(self.baseline, str):
            values = [value for group in groups for value in group.values]
            base = statistics.fmean(values) if values else 0.0
        else:
            base = float(self.baseline)
        return [[[g - base for g in returns] for returns in group.returns] for group in groups]

    def __repr__(self) -> str:
        return f"Reinforce(baseline={self.baseline!r})"


_BUILT_IN = {"grpo": GRPO, "rloo": RLOO, "reinforce": Reinforce}


def advantage_estimator(spec: str | AdvantageEstimator) -> AdvantageEstimator:
    """The estimator ``spec`` names (``"grpo"``, ``"rloo"``, ``"reinforce"``), or ``spec``."""
    if isinstance(spec, str):
        factory = _BUILT_IN.get(spec)
        if factory is None:
            raise InvalidInputError(
                f"no advantage estimator named {spec!r}; known: {sorted(_BUILT_IN)}",
                field="advantage",
                value=spec,
            )
        estimator: AdvantageEstimator = factory()
        return estimator
    if not isinstance(spec, AdvantageEstimator):
        raise InvalidInputError(
            f"advantage must be an estimator name or have an estimate(groups) method, "
            f"got {type(spec).__name__}",
            field="advantage",
        )
    return spec
