"""SFT on chat conversations: the learning-rate schedule over the run, and what it refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agl
from agl_torch.learner import Learner
from agl_torch.policy import load_policy
from agl_torch.settings import LearnerSettings
from agl_torch.sft import SFTTorch, train_on_messages

CONVERSATIONS = [
    [{"role": "user", "content": f"What is {a}+{b}?"}, {"role": "assistant", "content": str(a + b)}]
    for a in range(2, 7)
    for b in range(2, 4)
]
"""Ten conversations: three steps an epoch in batches of four."""


@pytest.fixture
def learner(tiny_model_dir: Path) -> Learner:
    model, tokenizer = load_policy(tiny_model_dir, device="cpu")
    return Learner(model, tokenizer, LearnerSettings(lr=1e-3), device="cpu")


def rates(learner: Learner, schedule: Any) -> list[float]:
    seen: list[float] = []
    history = train_on_messages(
        learner,
        CONVERSATIONS,
        epochs=2,
        batch_size=4,
        lr_schedule=schedule,
        on_step=lambda step, total, metrics: seen.append(metrics["lr"]),
    )
    assert len(history) == 2
    return seen


def test_a_linear_schedule_decays_the_rate_each_step_and_restores_it_after(
    learner: Learner,
) -> None:
    seen = rates(learner, "linear")
    assert seen == pytest.approx([1e-3 * (6 - step) / 6 for step in range(6)])
    assert learner.optimizer.param_groups[0]["lr"] == 1e-3


def test_a_constant_schedule_keeps_the_rate(learner: Learner) -> None:
    assert rates(learner, "constant") == pytest.approx([1e-3] * 6)


def test_an_unknown_schedule_is_refused_by_name_before_any_step(learner: Learner) -> None:
    before = [p.detach().clone() for p in learner.model.parameters()]
    with pytest.raises(agl.InvalidInputError, match="lr_schedule must be 'constant' or 'linear'"):
        train_on_messages(learner, CONVERSATIONS, lr_schedule="cosine")  # type: ignore[arg-type]
    assert all((a == b).all() for a, b in zip(before, learner.model.parameters(), strict=True))
    with pytest.raises(agl.InvalidInputError, match="message_lr_schedule must be"):
        SFTTorch("unused", message_lr_schedule="cosine")  # type: ignore[arg-type]
