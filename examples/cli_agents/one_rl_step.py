"""The algorithm of ``run.py --train``: RL steps on the programs' calls, with the stand-in as
the engine.

The programs need a model that can drive them, and a model small enough to build here cannot:
the stand-in (``stand_in.py``) serves the calls, through agl's gateway, which records them with
its token ids; the policy that learns from them is a tiny model built in code. So a step shows
the machinery (token ids from the programs' calls, rewards, group advantages, the update), not
learning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import agl

__all__ = ["OneRLStep"]


class OneRLStep(agl.StepAlgorithm):
    """Serve ``engine`` through agl's gateway; each step, one RL step on the calls.

    Args:
        engine: The model that serves the programs' calls (the stand-in, or ``--endpoint``'s).
        policy_dir: Where the tiny policy is built.
        samples: Rollouts per task (a group: the advantages compare them).
        steps: Steps, each over every task.

    Attributes (after a step): ``results`` (its rollouts), ``batch`` (their transitions) and
    ``metrics`` (its RL step's).
    """

    name = "one-rl-step"

    def __init__(
        self, engine: agl.LLM, policy_dir: Path, *, samples: int = 2, steps: int = 1
    ) -> None:
        self.engine = engine
        self.policy_dir = policy_dir
        self.loop = agl.LoopSettings(n_samples=samples, n_epochs=steps)
        # The stand-in's rewards differ within each group by design; keep uniform ones anyway.
        # Each program resends its conversation token for token: a rollout is one sample.
        self.transitions = agl.TransitionBuilder(drop_zero_variance=False, trajectory=True)
        self.learner: Any = None
        self.results: list[agl.RolloutResult] = []
        self.batch: agl.TransitionBatch | None = None
        self.metrics: dict[str, float] = {}

    async def setup(self, ctx: agl.AlgorithmContext) -> Mapping[str, agl.Resource]:
        self.learner = await asyncio.to_thread(self._learner)
        return {"llm": await ctx.serve_llm([self.engine.endpoint], self.engine.model)}

    async def step(
        self, ctx: agl.AlgorithmContext, batch: agl.StepBatch
    ) -> Mapping[str, agl.Resource]:
        self.results, self.batch = batch.results, batch.transitions
        transitions = list(batch.transitions or [])
        self.metrics = await asyncio.to_thread(self.learner.rl_step, transitions)
        batch.metrics.update({f"actor/{key}": value for key, value in self.metrics.items()})
        return {}

    def _learner(self) -> Any:
        from agl_torch.learner import Learner, LearnerSettings
        from agl_torch.policy import load_policy
        from agl_torch.tiny import build_tiny_model

        # The ids are the stand-in's (a byte tokenizer, ids < 259); any vocabulary that large
        # takes them. A real run trains the model that served the calls.
        build_tiny_model(self.policy_dir, vocab_size=512, max_position_embeddings=16384)
        model, tokenizer = load_policy(self.policy_dir, quiet=True)
        return Learner(model, tokenizer, LearnerSettings(lr=1e-4))
