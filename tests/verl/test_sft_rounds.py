"""When sft-verl trains: every ``train_every`` steps once a full SFT batch is kept, and always
after the last step. (The rounds themselves run verl: ``test_sft_cpu.py``.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agl_verl.sft
from agl.algorithm import StepBatch
from agl_verl.sft import SFTVerl


def rounds(monkeypatch: pytest.MonkeyPatch, kept_per_step: list[int], **options: Any) -> list[Any]:
    """Drive ``step`` over as many steps as ``kept_per_step``; return (round, samples) per round."""
    algorithm = SFTVerl("model", **options)
    algorithm.last_step = len(kept_per_step)
    trained: list[tuple[str, int]] = []

    async def train(ctx: Any, label: str, **data: Any) -> Any:
        trained.append((label, len(data["transitions"])))
        return agl_verl.sft.SFTRun(output_dir=None)  # type: ignore[arg-type]

    monkeypatch.setattr(algorithm, "_train", train)
    for step, kept in enumerate(kept_per_step, start=1):
        monkeypatch.setattr(
            agl_verl.sft, "best_transitions", lambda *a, k=kept, **o: [object()] * k
        )
        batch = StepBatch(step=step, epoch=0, results=[], calls=[])
        asyncio.run(algorithm.step(None, batch))  # type: ignore[arg-type]
        assert batch.metrics["sft/kept_transitions"] == kept
    return trained


def test_one_round_after_the_last_step_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rounds(monkeypatch, [2, 0, 3]) == [("step-3", 5)]


def test_a_round_every_n_steps_waits_for_a_full_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    trained = rounds(monkeypatch, [1, 1, 3, 0, 1], train_every=1, sft_batch_size=2)
    # step 1 keeps too few and waits; the last step trains what is left, however little
    assert trained == [("step-2", 2), ("step-3", 3), ("step-5", 1)]


def test_nothing_kept_trains_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rounds(monkeypatch, [0, 0], train_every=1) == []
