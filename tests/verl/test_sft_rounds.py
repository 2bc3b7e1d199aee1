"""When sft-verl trains: every ``train_every`` steps once a full SFT batch is kept, and always
after the last step; and how a stopped run resumes. (The rounds themselves run verl:
``test_sft_cpu.py``; here ``train_sft`` is replaced by a recorder that makes a model folder.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openai
import pytest

import agl
import agl_verl.sft
from agl import StepBatch, read_metrics
from agl.lightning import Transition
from agl.testing.openai_server import OpenAIServer
from agl_verl.sft import SFTVerl
from agl_verl.sft_settings import SFTSettings
from agl_verl.sft_trainer import SFTRun


def transition(step: int, index: int) -> Transition:
    return Transition(
        agent=None,
        prompt_ids=[1, 2, step],
        response_ids=[3, index, 4],
        response_logprobs=[-0.5, -0.25, -0.125],
        reward=1.0,
        advantage=0.5,
        rollout_id=f"ro-{step}-{index}",
        group_id=f"task-{step}",
        step=step,
        response_mask=[1, 0, 1],
    )


class Rounds:
    """Records each round ``train_sft`` is asked for: (label, student, transitions)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trained: list[tuple[str, str, list[Transition]]] = []
        self.monkeypatch = monkeypatch
        monkeypatch.setattr(agl_verl.sft, "train_sft", self.train_sft)

    def train_sft(self, student: str, *, output_dir: Path, **data: Any) -> SFTRun:
        hf_model = output_dir / "hf_model"
        hf_model.mkdir(parents=True)
        self.trained.append((output_dir.name, student, list(data["transitions"])))
        return SFTRun(output_dir=output_dir, hf_model=hf_model)

    def steps(self, algorithm: SFTVerl, kept_per_step: dict[int, int]) -> None:
        """Run ``step`` for each step number, keeping that many new transitions."""
        for step, kept in kept_per_step.items():
            batch_kept = [transition(step, i) for i in range(kept)]
            self.monkeypatch.setattr(
                agl_verl.sft, "best_transitions", lambda *a, k=batch_kept, **o: k
            )
            batch = StepBatch(step=step, epoch=0, results=[], calls=[])
            asyncio.run(algorithm.step(None, batch))  # type: ignore[arg-type]
            assert batch.metrics["sft/kept_transitions"] == kept


def started(run_dir: Path, last_step: int, **options: Any) -> SFTVerl:
    """An algorithm after ``setup`` in ``run_dir``, whose run ends at ``last_step``."""
    algorithm = SFTVerl("base-model", **options)
    ctx = SimpleNamespace(run_dir=run_dir, train_tasks=[], log=lambda step, metrics: None)
    asyncio.run(algorithm.setup(ctx))  # type: ignore[arg-type]
    algorithm.last_step = last_step
    return algorithm


def labels(rounds: Rounds) -> list[tuple[str, int]]:
    return [(label, len(kept)) for label, _, kept in rounds.trained]


def test_one_round_after_the_last_step_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rounds = Rounds(monkeypatch)
    rounds.steps(started(tmp_path, 3), {1: 2, 2: 0, 3: 3})
    assert labels(rounds) == [("step-3", 5)]


def test_a_round_every_n_steps_waits_for_a_full_batch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rounds = Rounds(monkeypatch)
    algorithm = started(tmp_path, 5, train_every=1, sft=SFTSettings(batch_size=2))
    rounds.steps(algorithm, {1: 1, 2: 1, 3: 3, 4: 0, 5: 1})
    # step 1 keeps too few and waits; the last step trains what is left, however little
    assert labels(rounds) == [("step-2", 2), ("step-3", 3), ("step-5", 1)]
    # each round starts from the one before
    students = [student for _, student, _ in rounds.trained]
    models = [str(tmp_path / f"sft-verl/step-{step}/hf_model") for step in (2, 3)]
    assert students == ["base-model", *models]


def test_nothing_kept_trains_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rounds = Rounds(monkeypatch)
    rounds.steps(started(tmp_path, 2, train_every=1), {1: 0, 2: 0})
    assert rounds.trained == []


def test_a_resumed_run_keeps_the_samples_kept_before_it_stopped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rounds = Rounds(monkeypatch)
    rounds.steps(started(tmp_path, 4), {1: 2, 2: 1})  # then the run stops
    assert rounds.trained == []

    resumed = started(tmp_path, 4, resume=True)
    assert resumed.resume_step() == 2
    rounds.steps(resumed, {3: 0, 4: 1})
    [(label, student, kept)] = rounds.trained
    assert (label, student) == ("step-4", "base-model")
    # the transitions come back exactly as they were kept, in order
    assert kept == [transition(1, 0), transition(1, 1), transition(2, 0), transition(4, 0)]


def test_a_resumed_run_continues_from_the_last_rounds_model_without_training_it_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rounds = Rounds(monkeypatch)
    conversations = [[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]]
    monkeypatch.setattr(SFTVerl, "_train", recording_messages(rounds, SFTVerl._train))
    first = started(tmp_path, 4, messages=conversations, train_every=2)
    rounds.steps(first, {1: 1, 2: 1, 3: 2})  # a round at step 2; step 3's samples wait
    assert [label for label, _, _ in rounds.trained] == ["messages", "step-2"]

    resumed = started(tmp_path, 4, messages=conversations, train_every=2, resume=True)
    assert resumed.resume_step() == 3
    assert resumed.trained_model == tmp_path / "sft-verl/step-2/hf_model"
    rounds.steps(resumed, {4: 1})
    # no second round on the conversations; the new round starts from step 2's model
    assert [label for label, _, _ in rounds.trained] == ["messages", "step-2", "step-4"]
    _, student, kept = rounds.trained[-1]
    assert student == str(tmp_path / "sft-verl/step-2/hf_model")
    assert kept == [transition(3, 0), transition(3, 1), transition(4, 0)]
    state = json.loads((tmp_path / "sft-verl/state.json").read_text())
    assert state == {
        "step": 4,
        "messages_trained": True,
        "trained_model": str(tmp_path / "sft-verl/step-4/hf_model"),
        "pending": 0,
    }


def recording_messages(rounds: Rounds, train: Any) -> Any:
    """``_train`` that records the round on conversations too (``train_sft`` gets messages)."""

    async def wrapped(self: SFTVerl, ctx: Any, label: str, **data: Any) -> SFTRun:
        if "messages" in data:
            hf_model = self.root / label / "hf_model"  # type: ignore[operator]
            hf_model.mkdir(parents=True)
            rounds.trained.append((label, str(self.model), []))
            self.trained_model = hf_model
            return SFTRun(output_dir=hf_model.parent, hf_model=hf_model)
        run: SFTRun = await train(self, ctx, label, **data)
        return run

    return wrapped


def test_without_resume_a_run_starts_afresh(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rounds = Rounds(monkeypatch)
    rounds.steps(started(tmp_path, 4), {1: 2})
    fresh = started(tmp_path, 1)
    assert fresh.resume_step() == 0
    rounds.steps(fresh, {1: 1})
    assert labels(rounds) == [("step-1", 1)]


def test_a_failed_round_keeps_its_samples_for_the_next_try(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rounds = Rounds(monkeypatch)
    algorithm = started(tmp_path, 2, train_every=1)

    def broken(*args: Any, **kwargs: Any) -> SFTRun:
        raise RuntimeError("verl failed")

    monkeypatch.setattr(agl_verl.sft, "train_sft", broken)
    with pytest.raises(RuntimeError, match="verl failed"):
        rounds.steps(algorithm, {1: 2})
    assert algorithm.pending == [transition(1, 0), transition(1, 1)]
    # the state on disk is still the one before the failed step
    assert not (tmp_path / "sft-verl/state.json").exists()


@agl.rollout
async def yes_agent(task: dict[str, str], llm: agl.LLM) -> float:
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="none", max_retries=0) as client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["question"]}]
        )
    return 1.0 if reply.choices[0].message.content == "yes" else 0.0


def test_a_stopped_trainer_run_resumes_after_its_last_step(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Through the trainer: the second run skips the steps the first one did, rolls out only
    the tasks left, and its round starts from the first run's model."""
    rounds = Rounds(monkeypatch)
    tasks = [{"question": f"say yes {i}"} for i in range(4)]
    store = f"sqlite:///{tmp_path / 'store.db'}"

    def fit(max_steps: int | None, resume: bool) -> SFTVerl:
        algorithm = SFTVerl(
            "base-model",
            llm=teacher.url,
            loop=agl.LoopSettings(batch_size=1, n_samples=2, max_steps=max_steps),
            resume=resume,
        )
        trainer = agl.Trainer(
            algorithm, store=store, run_dir=tmp_path / "run", console=False, plot=False
        )
        result = trainer.fit(yes_agent, tasks)
        assert result.totals["succeeded"] == 4  # 2 steps x 1 task x 2 samples, each run
        return algorithm

    with OpenAIServer(lambda request: "yes") as teacher:
        fit(max_steps=2, resume=False)
        # the last step of that run trains, on each task's best rollout (top_k=1)
        assert labels(rounds) == [("step-2", 2)]
        second = fit(max_steps=None, resume=True)
    assert second.resume_step() == 2
    assert labels(rounds) == [("step-2", 2), ("step-4", 2)]
    assert rounds.trained[-1][1] == str(tmp_path / "run/sft-verl/step-2/hf_model")
    # the second round learns the two tasks the first run did not reach
    first, second_round = ({str(t.prompt_ids) for t in kept} for _, _, kept in rounds.trained)
    assert len(first) == len(second_round) == 2
    assert not first & second_round
    steps = [row["step"] for row in read_metrics(tmp_path / "run") if "sft/kept_transitions" in row]
    assert steps == [1, 2, 3, 4]
