"""StepAlgorithm.total_steps counts the steps agl's loop really runs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

import agl
from agl import Resource


class Counting(agl.StepAlgorithm):
    name = "counting"

    def __init__(self, n_epochs: int, batch_size: int | None, max_steps: int | None) -> None:
        self.n_epochs = n_epochs
        self.batch_size = batch_size
        self.max_steps = max_steps
        self.steps: list[int] = []

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> Mapping[str, Resource]:
        self.steps.append(batch.step)
        return {}


@agl.rollout
def constant(task: int) -> float:
    return 1.0


@pytest.mark.parametrize(
    ("n_tasks", "n_epochs", "batch_size", "max_steps"),
    [(5, 1, None, None), (5, 2, 2, None), (6, 3, 2, 4), (4, 2, 4, None), (3, 1, 5, None)],
)
def test_total_steps_is_what_the_loop_runs(
    tmp_path: Path, n_tasks: int, n_epochs: int, batch_size: int | None, max_steps: int | None
) -> None:
    algorithm = Counting(n_epochs, batch_size, max_steps)
    agl.Trainer(algorithm, run_dir=tmp_path / "run", console=False, plot=False).fit(
        constant, list(range(n_tasks))
    )
    total, per_epoch = algorithm.total_steps(n_tasks)
    assert algorithm.steps == list(range(1, total + 1))
    assert per_epoch == -(-n_tasks // (batch_size or n_tasks))
