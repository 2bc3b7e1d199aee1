"""What the examples' RL tests share: an agl-torch algorithm that keeps what it trained on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

import agl
from agl.lightning import TransitionBatch


@dataclass
class Recorded:
    """:attr:`algorithm` is LightningRLTorch keeping every step's transitions (``.batches``);
    each one built is appended to :attr:`instances`."""

    algorithm: type[Any]
    instances: list[Any] = field(default_factory=list)


@pytest.fixture
def recorded_rl() -> Recorded:
    from agl_torch.rl import LightningRLTorch

    recorded = Recorded(LightningRLTorch)

    class Recording(LightningRLTorch):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.batches: list[TransitionBatch | None] = []
            recorded.instances.append(self)

        async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> Mapping[str, Any]:
            self.batches.append(batch.transitions)
            return await super().step(ctx, batch)

    recorded.algorithm = Recording
    return recorded
