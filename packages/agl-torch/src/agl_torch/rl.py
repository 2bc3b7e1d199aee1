"""LightningRL on one machine: GRPO / PPO-clip with PyTorch, the algorithm ``"lightningrl-torch"``.

::

    algorithm = LightningRLTorch(
        "models/my-policy",
        loop=agl.LoopSettings(n_samples=8, batch_size=8),
        learner=LearnerSettings(lr=1e-4),
    )
    agl.Trainer(algorithm=algorithm).fit(agent, "train.jsonl", val_dataset="val.jsonl")

Each step runs ``loop.n_samples`` rollouts of ``loop.batch_size`` tasks against the policy
server (through agl's gateway, which records the engine's token ids), turns their traces into
transitions with :class:`agl.TransitionBuilder` (credit assignment and group advantages: GRPO by
default), takes one PPO-clip optimizer step per ``learner.ppo_epochs`` with importance ratios
against the logprobs the engine sampled with (:class:`~agl_torch.learner.Learner`), and swaps
the new weights into the server before the next step. In a multi-agent system it trains only
the agents it is given (``Trainer(algorithm={"writer": LightningRLTorch(...), "*": None})``).

The server reports raw logprobs (the model's own distribution, as vLLM does by default), so
the importance ratios are exact when agents sample at temperature 1 (the default published in
the LLM resource).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from agl import (
    AlgorithmContext,
    InvalidInputError,
    LoopSettings,
    Resource,
    SamplingSettings,
    StepAlgorithm,
    StepBatch,
    model_or_env,
    settings,
)
from agl.lightning import TransitionBuilder
from agl_torch.served_policy import MODEL_ENV, ServedPolicy
from agl_torch.settings import (
    CheckpointSettings,
    LearnerSettings,
    OffPolicy,
    ServingSettings,
)

__all__ = ["LightningRLTorch"]


class LightningRLTorch(StepAlgorithm):
    """Train an agent's LLM with LightningRL on PyTorch (see the module docstring).

    Args:
        model: The policy to train: a Hugging Face model folder (default: the folder
            ``$AGL_TORCH_MODEL`` names, so that the algorithm builds by name).
        resource: The name of the LLM resource agents receive (``llm`` by default).
        loop: Epochs, tasks per step, rollouts per task (the group size of the group
            baseline, 8 by default), a step limit (:class:`agl.LoopSettings`).
        transitions: How transitions are built (default: :class:`agl.TransitionBuilder` with
            GRPO).
        learner: The update (:class:`~agl_torch.settings.LearnerSettings`: optimizer, PPO
            clipping, KL, micro-batches, LoRA, seed).
        sampling: Sampling parameters published with the LLM resource
            (:class:`agl.SamplingSettings`).
        serving: The policy server (:class:`~agl_torch.settings.ServingSettings`: model name,
            batch size, device).
        checkpoints: When to save and whether to resume
            (:class:`~agl_torch.settings.CheckpointSettings`).

    Each settings argument also takes a mapping of its fields (``loop={"n_epochs": 2}``).
    """

    name = "lightningrl-torch"

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        resource: str = "llm",
        loop: LoopSettings | None = None,
        transitions: TransitionBuilder | None = None,
        learner: LearnerSettings | None = None,
        sampling: SamplingSettings | None = None,
        serving: ServingSettings | None = None,
        checkpoints: CheckpointSettings | None = None,
    ) -> None:
        self.model = model_or_env(model, MODEL_ENV)
        self.resource = resource
        self.loop = settings("loop", loop, LoopSettings(n_samples=8))
        self.transitions = transitions or TransitionBuilder(advantage="grpo")
        self.learner = settings("learner", learner, LearnerSettings())
        self.sampling = settings("sampling", sampling, SamplingSettings())
        self.serving = settings("serving", serving, ServingSettings())
        self.checkpoints = settings("checkpoints", checkpoints, CheckpointSettings())
        self.policy: ServedPolicy | None = None

    async def setup(self, ctx: AlgorithmContext) -> Mapping[str, Resource]:
        if self.model is None:
            raise InvalidInputError(
                f"{self.name} needs a model to train: LightningRLTorch(model='path/to/hf-model'), "
                "or the folder in $AGL_TORCH_MODEL",
                field="model",
            )
        learner = self.learner_settings(ctx.loop)
        self.policy = ServedPolicy(
            self.model, learner, self.sampling, self.serving, self.checkpoints
        )
        llm = await self.policy.start(ctx)
        return {self.resource: llm}

    def learner_settings(self, loop: LoopSettings | None = None) -> LearnerSettings:
        """The learner's settings for a run going by ``loop`` (the run's, ``ctx.loop``; None:
        this algorithm's own): ``off_policy="auto"`` settled by it (decoupled PPO when it
        trains on data from older weights, ``max_staleness >= 1``)."""
        if self.learner.off_policy != "auto":
            return self.learner
        staleness = (loop or self.loop).max_staleness
        off_policy: OffPolicy = "decoupled" if staleness > 0 else "ppo"
        return dataclasses.replace(self.learner, off_policy=off_policy)

    def resume_step(self) -> int:
        return self.policy.resumed_step if self.policy is not None else 0

    def policy_version(self) -> int | None:
        # The policy server's version: the one every response names, and the gateway records.
        if self.policy is None or self.policy.server is None:
            return None
        return int(self.policy.server.engine.version)

    async def step(self, ctx: AlgorithmContext, batch: StepBatch) -> Mapping[str, Resource]:
        import asyncio

        assert self.policy is not None, "step() before setup()"
        transitions = batch.transitions if batch.transitions is not None else []
        metrics = await asyncio.to_thread(self.policy.learner.rl_step, transitions)
        batch.metrics.update({f"actor/{key}": value for key, value in metrics.items()})
        batch.metrics.update(await self.policy.after_step(ctx, batch.step))
        return {}

    async def close(self, ctx: AlgorithmContext) -> None:
        if self.policy is not None:
            await self.policy.close(ctx)
