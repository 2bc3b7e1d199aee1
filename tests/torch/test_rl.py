"""LightningRLTorch and SFTTorch in real runs: learning, resume, SFT sources, plugin names."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

import agl
from agl import read_metrics
from agl_torch.quickstart import calculator_agent, demonstrations, tasks
from agl_torch.rl import LightningRLTorch
from agl_torch.served_policy import find_checkpoint
from agl_torch.settings import CheckpointSettings, LearnerSettings, LoraSettings
from agl_torch.sft import SFTTorch, best_transitions


def _trainer(run_dir: Path, algorithm: agl.Algorithm) -> agl.Trainer:
    return agl.Trainer(
        algorithm=algorithm, run_dir=run_dir, concurrency=16, progress=False, console=False
    )


def _steps(run_dir: Path) -> list[int]:
    return [row["step"] for row in read_metrics(run_dir) if "actor/loss" in row]


@pytest.fixture(scope="module")
def warm_model(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The quickstart's model after its SFT warm-up (seed 0), shared by the learning tests:
    made once per test run, also when the tests are spread over pytest-xdist's workers."""
    from filelock import FileLock

    from agl_torch.quickstart import warm_up_model

    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # the folder every worker's own temp folder is in
    folder = root / "quickstart-warm"
    with FileLock(f"{folder}.lock"):
        if not (folder / "warm-model" / "config.json").is_file():
            warm_up_model(folder, seed=0, progress=False)
    return folder / "warm-model"


@pytest.mark.slow
@pytest.mark.timeout(600)  # ~100 s alone on 2 cores; a busy machine can double that
def test_quickstart_learns_with_a_fixed_seed(warm_model: Path, tmp_path: Path) -> None:
    from agl_torch.quickstart import train

    # The quickstart's settings, fewer steps. Sampling is not seeded (the server batches
    # requests as they come), and one step's 64 samples are noisy (a run's steps range over
    # +-0.2), so the test reads 5-step means after 20 steps, where a run has risen ~0.25 (the
    # rise starts around step 10; 15 steps with 3-step means failed on a noisy run). Five
    # 20-step runs of benchmarks/async_loop.py rose 0.25-0.3 (training) and 0.3-0.46
    # (validation).
    summary = train(warm_model, tmp_path / "run", steps=20, seed=0, progress=False, console=False)
    rows = [row for row in read_metrics(tmp_path / "run") if "actor/loss" in row]
    first = statistics.fmean(row["reward/mean"] for row in rows[:5])
    last = statistics.fmean(row["reward/mean"] for row in rows[-5:])
    assert last > first + 0.15, (first, last)
    assert summary["val_after"] > summary["val_before"] + 0.2, summary
    assert (tmp_path / "run" / "reward.png").stat().st_size > 0
    assert (tmp_path / "run" / "model" / "config.json").is_file()
    assert not any(row.get("staleness/max") for row in rows)  # synchronous: nothing to check


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quickstart_learns_with_rollouts_and_updates_overlapping(
    warm_model: Path, tmp_path: Path
) -> None:
    from agl_torch.quickstart import train

    # As above, with max_staleness=1: the next step's rollouts run while the update runs, and
    # the loss is decoupled PPO.
    summary = train(
        warm_model,
        tmp_path / "run",
        steps=20,
        seed=0,
        max_staleness=1,
        progress=False,
        console=False,
    )
    rows = [row for row in read_metrics(tmp_path / "run") if "actor/loss" in row]
    assert len(rows) == 20
    assert all(row["staleness/max"] <= 1 for row in rows)
    assert any(row["staleness/max"] == 1 for row in rows)  # it did train on older data
    assert all("actor/importance_mean" in row for row in rows)
    first = statistics.fmean(row["reward/mean"] for row in rows[:5])
    last = statistics.fmean(row["reward/mean"] for row in rows[-5:])
    assert last > first + 0.15, (first, last)
    assert summary["val_after"] > summary["val_before"] + 0.2, summary


@pytest.mark.parametrize("max_staleness", [0, 1])
def test_resume_continues_from_the_checkpointed_step(
    tiny_model_dir: Path, tmp_path: Path, max_staleness: int
) -> None:
    run_dir = tmp_path / "run"
    train = tasks(8, seed=1)

    def algorithm(max_steps: int, resume: bool) -> LightningRLTorch:
        return LightningRLTorch(
            tiny_model_dir,
            loop=agl.LoopSettings(
                n_samples=2, batch_size=2, max_steps=max_steps, max_staleness=max_staleness
            ),
            learner=LearnerSettings(lr=1e-3),
            sampling=agl.SamplingSettings(max_tokens=8),
            # a random model's rewards are all 0: keep those groups so every step updates
            transitions=agl.TransitionBuilder(drop_zero_variance=False),
            checkpoints=CheckpointSettings(every=1, keep=2, resume=resume),
        )

    first = algorithm(2, resume=False)
    _trainer(run_dir, first).fit(calculator_agent, train)
    assert _steps(run_dir) == [1, 2]
    checkpoint = find_checkpoint(run_dir)
    assert checkpoint is not None
    assert checkpoint.name == "step-000002"
    saved = json.loads((checkpoint / "state.json").read_text())
    assert saved["step"] == 2

    # A crash after step 3 was logged but before it was saved: the resumed run redoes it.
    with (run_dir / "metrics.jsonl").open("a") as file:
        file.write(json.dumps({"step": 3, "time": 0.0, "reward/mean": 0.5, "actor/loss": 1}) + "\n")

    second = algorithm(4, resume=True)
    _trainer(run_dir, second).fit(calculator_agent, train)
    assert _steps(run_dir) == [1, 2, 3, 4]
    assert second.policy is not None
    assert second.policy.resumed_step == 2
    assert second.policy.learner.updates == 4
    latest = find_checkpoint(run_dir)
    assert latest is not None
    assert latest.name == "step-000004"
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert kept == ["step-000003", "step-000004"]
    rows = [row for row in read_metrics(run_dir) if "actor/loss" in row]
    assert [row["weights/version"] for row in rows[2:]] == [2.0, 3.0]  # 1 = the restored weights
    if max_staleness:
        # Trained on data at most one version old, counted on the versions calls recorded
        # (after the resume the server counts again from the restored weights, version 1).
        assert all(row["staleness/max"] <= 1 for row in rows)
        assert all(row["actor/importance_mean"] > 0 for row in rows)


def test_resume_from_a_path_that_is_not_a_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    algorithm = LightningRLTorch(
        tiny_model_dir,
        loop=agl.LoopSettings(max_steps=1),
        checkpoints=CheckpointSettings(resume=tmp_path),
    )
    with pytest.raises(agl.InvalidInputError, match="not a complete checkpoint"):
        _trainer(tmp_path / "run", algorithm).fit(calculator_agent, tasks(2, seed=1))


def test_a_model_path_without_a_model(tmp_path: Path) -> None:
    with pytest.raises(agl.InvalidInputError, match="not a Hugging Face model folder"):
        _trainer(tmp_path, LightningRLTorch(tmp_path, loop={"max_steps": 1})).fit(
            calculator_agent, tasks(2, seed=1)
        )


def test_the_plugin_names_the_algorithms(tmp_path: Path) -> None:
    from agl.plugins import PluginManager

    assert PluginManager().lookup("agl_algorithms", "lightningrl-torch") is LightningRLTorch
    assert PluginManager().lookup("agl_algorithms", "sft-torch") is SFTTorch
    with pytest.raises(agl.InvalidInputError, match="needs a model"):
        _trainer(tmp_path, "lightningrl-torch").fit(calculator_agent, tasks(2, seed=1))  # type: ignore[arg-type]


def test_sft_on_messages_then_on_the_best_rollouts(tiny_model_dir: Path, tmp_path: Path) -> None:
    from agl_torch.quickstart import CALCULATOR_TOOL

    demos = demonstrations(tasks(16, seed=3), tool_share=1.0, seed=0)
    algorithm = SFTTorch(
        tiny_model_dir,
        messages=demos,
        tools=[CALCULATOR_TOOL],
        message_epochs=3,
        message_batch_size=8,
        min_reward=0.0,
        loop=agl.LoopSettings(n_samples=2, batch_size=2, max_steps=1),
        learner=LearnerSettings(lr=1e-3),
    )
    _trainer(tmp_path, algorithm).fit(calculator_agent, tasks(2, seed=1))
    losses = [row["loss"] for row in algorithm.message_history]
    assert len(losses) == 3
    assert losses[-1] < losses[0]
    rows = read_metrics(tmp_path)
    step = next(row for row in rows if "sft/kept_transitions" in row)
    assert step["sft/kept_transitions"] > 0  # min_reward 0: each task's best rollout is kept
    assert (tmp_path / "model" / "config.json").is_file()


def _result(rollout_id: str, task: int, reward: float | None) -> Any:
    rollout = agl.Rollout(
        rollout_id=rollout_id,
        input={},
        metadata={"task_index": task},
        enqueue_time=0.0,
    )

    class Result:
        def __init__(self) -> None:
            self.rollout = rollout
            self.reward = reward

    return Result()


def test_best_transitions_keeps_each_tasks_top_rollouts() -> None:
    from agl import StepBatch
    from agl.lightning import Transition, TransitionBatch

    results = [
        _result("a1", 0, 1.0),
        _result("a2", 0, 0.5),
        _result("a3", 0, 1.0),
        _result("b1", 1, 0.2),
        _result("b2", 1, None),
    ]
    transitions = TransitionBatch(
        [
            Transition(None, [1], [2], None, 0.0, 0.0, rollout_id=r.rollout.rollout_id, group_id="")
            for r in results
        ]
    )
    batch = StepBatch(1, 0, results, [], transitions)
    kept = best_transitions(batch, top_k=1, min_reward=0.5)
    assert [t.rollout_id for t in kept] == ["a1"]
    kept = best_transitions(batch, top_k=2, min_reward=0.0)
    assert [t.rollout_id for t in kept] == ["a1", "a3", "b1"]


def test_lora_run_serves_merged_weights_and_saves_the_adapter(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    algorithm = LightningRLTorch(
        tiny_model_dir,
        loop=agl.LoopSettings(n_samples=2, batch_size=2, max_steps=2),
        learner=LearnerSettings(lr=1e-2, lora=LoraSettings(r=4, alpha=8)),
        sampling=agl.SamplingSettings(max_tokens=8),
        transitions=agl.TransitionBuilder(drop_zero_variance=False),
    )
    _trainer(tmp_path, algorithm).fit(calculator_agent, tasks(4, seed=1))
    rows = [row for row in read_metrics(tmp_path) if "actor/loss" in row]
    # version 1: the merged (untrained) adapters served at the start; then one per step
    assert [row["weights/version"] for row in rows] == [2.0, 3.0]
    checkpoint = find_checkpoint(tmp_path)
    assert checkpoint is not None
    assert (checkpoint / "model" / "adapter_config.json").is_file()
    assert (tmp_path / "model" / "config.json").is_file()  # the final model: merged, servable
