"""Which rollouts of a step to learn from by imitation: each task's best (rejection sampling)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agl.lightning._transitions import Transition

if TYPE_CHECKING:
    from agl._results import RolloutResult


class StepRollouts(Protocol):
    """What :func:`best_transitions` reads of a step (an :class:`agl.StepBatch`)."""

    @property
    def results(self) -> Sequence[RolloutResult]: ...
    @property
    def transitions(self) -> Iterable[Transition] | None: ...


__all__ = ["best_transitions"]


def best_transitions(
    batch: StepRollouts, *, top_k: int = 1, min_reward: float = 1.0
) -> list[Transition]:
    """The transitions of each task's ``top_k`` best rollouts rewarded ``min_reward`` or more.

    Rollouts are grouped by task (the ``n_samples`` of one task); ties keep the earlier
    rollout. Rollouts without a reward are never kept. SFT algorithms train on what this
    returns (agl-torch's ``"sft-torch"``, agl-verl's ``"sft-verl"``).
    """
    if batch.transitions is None:
        return []
    by_task: dict[Any, list[tuple[float, int, str]]] = defaultdict(list)
    for order, result in enumerate(batch.results):
        reward = result.reward
        if reward is None or reward < min_reward:
            continue
        task = result.rollout.metadata.get("task_index", result.rollout.rollout_id)
        by_task[str(task)].append((-reward, order, result.rollout.rollout_id))
    keep = {
        rollout_id for ranked in by_task.values() for _, _, rollout_id in sorted(ranked)[:top_k]
    }
    return [t for t in batch.transitions if t.rollout_id in keep]
