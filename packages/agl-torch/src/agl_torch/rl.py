"""LightningRL on one machine: GRPO / PPO-clip with PyTorch, the algorithm ``"lightningrl-torch"``.

::

    algorithm = LightningRLTorch("models/my-policy", n_samples=8, batch_size=8, lr=1e-4)
    agl.Trainer(algorithm=algorithm).fit(agent, "train.jsonl", val_dataset="val.jsonl")

Each step runs ``n_samples`` rollouts of ``batch_size`` tasks against the policy server (through
agl's gateway, which records the engine's token ids), turns their traces into transitions with
:class:`agl.LightningRL` (credit assignment and group advantages: GRPO by default), takes one
PPO-clip optimizer step per ``ppo_epochs`` with importance ratios against the logprobs the
engine sampled with (:class:`~agl_torch.learner.Learner`), and swaps the new weights into the
server before the next step. In a multi-agent system it trains only the agents it is given
(``Trainer(algorithm={"writer": LightningRLTorch(...), "*": None})``).

The server reports raw logprobs (the model's own distribution, as vLLM does by default), so
the importance ratios are exact when agents sample at temperature 1 (the default published in
the LLM resource).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue

from agl.algorithm import AlgorithmContext, LoopSettings, StepAlgorithm, StepBatch, model_or_env
from agl.errors import InvalidInputError
from agl.lightning import LightningRL
from agl.resources import Resource
from agl_torch.served_policy import MODEL_ENV, CheckpointSettings, ServedPolicy

__all__ = ["LightningRLTorch"]


class LightningRLTorch(StepAlgorithm):
    """Train an agent's LLM with LightningRL on PyTorch (see the module docstring).

    Args:
        model: The policy to train: a Hugging Face model folder (default: the folder
            ``$AGL_TORCH_MODEL`` names, so that the algorithm builds by name).
        resource: The name of the LLM resource agents receive (``llm`` by default).
        model_name: The model name the server answers to.
        n_epochs / batch_size / n_samples / max_steps: The loop (:class:`agl.StepAlgorithm`);
            ``n_samples`` is the group size of the group baseline.
        lightning: How transitions are built (default: :class:`agl.LightningRL` with GRPO).
        lr / weight_decay / max_grad_norm / micro_batch_tokens / clip_low / clip_high /
            aggregation / kl_coef / kl_kind / ppo_epochs / lora / seed: The update
            (:class:`~agl_torch.learner.Learner`).
        temperature / max_tokens: Sampling parameters published with the LLM resource.
        max_batch_size: Requests the policy server generates for at once.
        device: Where to train and serve (default: CUDA when present, else CPU).
        checkpoint_every / keep_checkpoints / resume: See
            :class:`~agl_torch.served_policy.CheckpointSettings`.
    """

    name = "lightningrl-torch"

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        resource: str = "llm",
        model_name: str = "policy",
        n_epochs: int = 1,
        batch_size: int | None = None,
        n_samples: int = 8,
        max_steps: int | None = None,
        lightning: LightningRL | None = None,
        lr: float = 1e-5,
        weight_decay: float = 0.0,
        max_grad_norm: float | None = 1.0,
        micro_batch_tokens: int = 8192,
        clip_low: float = 0.2,
        clip_high: float = 0.28,
        aggregation: str = "token-mean",
        kl_coef: float = 0.0,
        kl_kind: str = "low_var_kl",
        ppo_epochs: int = 1,
        lora: Any = None,
        seed: int = 0,
        temperature: float = 1.0,
        max_tokens: int | None = None,
        max_batch_size: int = 64,
        device: str | None = None,
        checkpoint_every: int = 1,
        keep_checkpoints: int = 2,
        resume: bool | str | os.PathLike[str] = False,
    ) -> None:
        self.model = model_or_env(model, MODEL_ENV)
        self.resource = resource
        self.loop = LoopSettings(
            n_epochs=n_epochs, batch_size=batch_size, n_samples=n_samples, max_steps=max_steps
        )
        self.lightning = lightning or LightningRL(advantage="grpo")
        sampling: dict[str, JsonValue] = {"temperature": temperature}
        if max_tokens is not None:
            sampling["max_tokens"] = max_tokens
        self.learner_options: dict[str, Any] = {
            "lr": lr,
            "weight_decay": weight_decay,
            "max_grad_norm": max_grad_norm,
            "micro_batch_tokens": micro_batch_tokens,
            "clip_low": clip_low,
            "clip_high": clip_high,
            "aggregation": aggregation,
            "kl_coef": kl_coef,
            "kl_kind": kl_kind,
            "ppo_epochs": ppo_epochs,
            "lora": lora,
            "seed": seed,
        }
        self.model_name = model_name
        self.sampling = sampling
        self.max_batch_size = max_batch_size
        self.device = device
        self.checkpoints = CheckpointSettings(checkpoint_every, keep_checkpoints, resume)
        self.policy: ServedPolicy | None = None

    async def setup(self, ctx: AlgorithmContext) -> Mapping[str, Resource]:
        if self.model is None:
            raise InvalidInputError(
                f"{self.name} needs a model to train: LightningRLTorch(model='path/to/hf-model'), "
                "or the folder in $AGL_TORCH_MODEL",
                field="model",
            )
        self.policy = ServedPolicy(
            self.model,
            learner_options=self.learner_options,
            model_name=self.model_name,
            sampling_parameters=self.sampling,
            max_batch_size=self.max_batch_size,
            device=self.device,
            checkpoints=self.checkpoints,
        )
        llm = await self.policy.start(ctx)
        return {self.resource: llm}

    def resume_step(self) -> int:
        return self.policy.resumed_step if self.policy is not None else 0

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
