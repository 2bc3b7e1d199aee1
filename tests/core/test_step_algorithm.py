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
        self.loop = agl.LoopSettings(n_epochs=n_epochs, batch_size=batch_size, max_steps=max_steps)
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


def test_loop_settings_are_one_checked_frozen_object() -> None:
    assert agl.StepAlgorithm.loop == agl.LoopSettings()
    baseline = agl.Baseline(loop=agl.LoopSettings(n_samples=3))
    assert baseline.loop.n_samples == 3
    with pytest.raises(AttributeError, match=r"self.loop = agl.LoopSettings\(n_samples=...\)"):
        baseline.n_samples = 4  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"loop = agl.LoopSettings\(batch_size=...\)"):

        class Loose(agl.StepAlgorithm):  # the old way: silently ignored, were it allowed
            batch_size = 2

    for bad in ({"n_samples": 0}, {"n_epochs": 1.5}, {"batch_size": 0}, {"step_timeout": -1}):
        with pytest.raises(agl.InvalidInputError, match=f"LoopSettings.{next(iter(bad))}"):
            agl.LoopSettings(**bad)  # type: ignore[arg-type]


def test_model_or_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from agl import model_or_env

    monkeypatch.delenv("AGL_SOME_MODEL", raising=False)
    assert model_or_env(None, "AGL_SOME_MODEL") is None
    monkeypatch.setenv("AGL_SOME_MODEL", "models/x")
    assert model_or_env(None, "AGL_SOME_MODEL") == "models/x"
    assert model_or_env(Path("models/y"), "AGL_SOME_MODEL") == "models/y"


def test_the_old_name_lightning_says_what_it_is_now() -> None:
    baseline = agl.Baseline()
    with pytest.raises(AttributeError, match=r"named transitions.*agl\.TransitionBuilder"):
        baseline.lightning = agl.TransitionBuilder()  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match=r"Old sets lightning: .*transitions = agl"):

        class Old(agl.StepAlgorithm):  # read by nobody, were it allowed
            lightning = agl.TransitionBuilder()
