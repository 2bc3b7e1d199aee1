"""Supervised fine-tuning on PyTorch: the algorithm ``"sft-torch"``, and SFT on chat data.

(torch loads when the algorithm runs, not on import: agl imports plugins' algorithm classes
in every process that looks one up.)

Two sources of examples, usable together:

- **a dataset of chat conversations** (OpenAI-format messages, optionally with tools): trained
  on before the first rollout, ``message_epochs`` passes, loss on assistant tokens only (the
  chat template's generation mask). :func:`train_on_messages` does the same outside a run
  (a warm-up before RL, as the quickstart does);
- **the best rollouts of each step** (rejection-sampling fine-tuning): every step runs
  ``loop.n_samples`` rollouts per task, keeps the ``top_k`` best of each task whose reward reaches
  ``min_reward``, and trains on their transitions' response tokens (the exact token ids the
  engine produced, so nothing is re-tokenized).

Checkpoints, resume and serving are the same as :mod:`agl_torch.rl`'s.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from agl import (
    AlgorithmContext,
    DatasetSource,
    InvalidInputError,
    LoopSettings,
    Resource,
    SamplingSettings,
    StepAlgorithm,
    StepBatch,
    load_tasks,
    model_or_env,
    settings,
)
from agl.lightning import TransitionBuilder, best_transitions
from agl_torch.served_policy import MODEL_ENV, ServedPolicy
from agl_torch.settings import CheckpointSettings, LearnerSettings, ServingSettings

if TYPE_CHECKING:
    from agl_torch.data import SFTExample, TrainOn

__all__ = ["LRSchedule", "SFTTorch", "best_transitions", "train_on_messages"]

LRSchedule = Literal["constant", "linear"]
"""How :func:`train_on_messages` moves the learning rate over its optimizer steps:
``"constant"``, the learner's throughout, or ``"linear"``, from the learner's down to nearly
0 at the last step (as ``transformers``' ``Trainer`` does by default). With a constant rate
the model saved is wherever the last steps left it, a loss spike included; a decaying one
settles it. On ``benchmarks/learning.py``'s warm-up (40 epochs at 3e-3), seed 0 ended at a
loss of 0.252 with a constant rate, on a spike (0.194 two epochs before), and 0.171 with a
linear one; six updates of RL then gained 0.000 to 0.100 in three runs from the first model,
0.150 to 0.500 in six runs from the second. Seeds 1 and 2, without a spike, ended within 0.01
of each other either way."""


def train_on_messages(
    learner: Any,
    conversations: Sequence[Any],
    *,
    epochs: int = 1,
    batch_size: int = 32,
    tools: Sequence[Mapping[str, Any]] | None = None,
    max_length: int = 2048,
    seed: int = 0,
    on_step: Callable[[int, int, dict[str, float]], None] | None = None,
    train_on: TrainOn = "all",
    lr_schedule: LRSchedule = "constant",
) -> list[dict[str, float]]:
    """Fine-tune ``learner``'s model on chat conversations; return each epoch's metrics.

    Args:
        learner: A :class:`~agl_torch.learner.Learner`.
        conversations: Lists of chat messages, or dicts with ``messages`` (and ``tools``).
        epochs: Passes over the data (shuffled each pass, reproducibly from ``seed``).
        batch_size: Conversations per optimizer step.
        tools: Tools rendered into every conversation's prompt (unless it has its own).
        max_length: Longer conversations are dropped (counted in ``dropped/too_long``).
        on_step: Called after each optimizer step with (step, steps in all, metrics), for a
            progress display.
        train_on: ``"all"`` assistant turns, the ``"last"`` one only (demonstrations
            recorded per request), or the whole ``"text"`` (a model built from scratch
            learns to read its prompts): :data:`agl_torch.data.TrainOn`.
        lr_schedule: ``"constant"`` or ``"linear"`` decay to 0 over the run
            (:data:`LRSchedule`); the learner's rate is restored afterwards.
    """
    from agl_torch.data import sft_examples_from_messages

    if epochs < 0 or batch_size < 1:
        raise InvalidInputError(
            f"epochs must be >= 0 and batch_size >= 1 (got {epochs}, {batch_size})"
        )
    _checked_schedule(lr_schedule, "lr_schedule")
    built = sft_examples_from_messages(
        learner.tokenizer, conversations, tools=tools, max_length=max_length, train_on=train_on
    )
    examples = built.examples
    if not examples and conversations:
        raise InvalidInputError(
            f"no conversation could be trained on (dropped: {dict(built.dropped)})",
            field="messages",
        )
    order = random.Random(seed)
    per_epoch = -(-len(examples) // batch_size)
    steps = epochs * per_epoch
    rates = [group["lr"] for group in learner.optimizer.param_groups]
    history: list[dict[str, float]] = []
    try:
        for epoch in range(epochs):
            shuffled = list(examples)
            order.shuffle(shuffled)
            losses: list[float] = []
            for index in range(0, len(shuffled), batch_size):
                step = epoch * per_epoch + index // batch_size
                if lr_schedule == "linear":
                    _set_rates(learner.optimizer, rates, 1.0 - step / steps)
                metrics = learner.sft_step(shuffled[index : index + batch_size])
                losses.append(metrics["loss"])
                if on_step is not None:
                    on_step(step + 1, steps, metrics)
            history.append(
                {
                    "epoch": float(epoch + 1),
                    "loss": statistics.fmean(losses) if losses else 0.0,
                    "examples": float(len(examples)),
                    **{f"dropped/{k}": float(v) for k, v in built.dropped.items()},
                }
            )
    finally:
        _set_rates(learner.optimizer, rates, 1.0)
    return history


def _checked_schedule(schedule: Any, field: str) -> LRSchedule:
    if schedule not in ("constant", "linear"):
        raise InvalidInputError(
            f"{field} must be 'constant' or 'linear' (got {schedule!r})",
            field=field,
            value=schedule,
        )
    return schedule  # type: ignore[no-any-return]


def _set_rates(optimizer: Any, rates: list[float], scale: float) -> None:
    for group, rate in zip(optimizer.param_groups, rates, strict=True):
        group["lr"] = rate * scale


class SFTTorch(StepAlgorithm):
    """Supervised fine-tuning of an agent's LLM (see the module docstring).

    Args:
        model: The model to train: a Hugging Face model folder.
        messages: Chat conversations to train on before the first rollout (a list, or any
            dataset :func:`agl.load_tasks` reads: JSONL, Parquet, a HF dataset).
        tools: Tools rendered into the conversations' prompts.
        message_epochs / message_batch_size / message_lr_schedule: Passes over ``messages``,
            conversations per optimizer step, and the learning rate over those steps
            (:data:`LRSchedule`).
        max_length: Longer conversations are dropped (counted).
        top_k / min_reward: Which rollouts of each step to learn from (see
            :func:`best_transitions`).
        resource / loop / sampling / serving / checkpoints: As in
            :class:`~agl_torch.rl.LightningRLTorch` (``loop.n_samples`` is 4 by default).
        learner: The update (:class:`~agl_torch.settings.LearnerSettings`; its PPO and KL
            fields do not apply to SFT; ``seed`` also orders the conversations).
    """

    name = "sft-torch"

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        messages: DatasetSource | Sequence[Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        message_epochs: int = 1,
        message_batch_size: int = 32,
        message_lr_schedule: LRSchedule = "constant",
        max_length: int = 2048,
        top_k: int = 1,
        min_reward: float = 1.0,
        resource: str = "llm",
        loop: LoopSettings | None = None,
        learner: LearnerSettings | None = None,
        sampling: SamplingSettings | None = None,
        serving: ServingSettings | None = None,
        checkpoints: CheckpointSettings | None = None,
    ) -> None:
        self.model = model_or_env(model, MODEL_ENV)
        self.messages = messages
        self.tools = tools
        self.message_epochs = message_epochs
        self.message_batch_size = message_batch_size
        self.message_lr_schedule = _checked_schedule(message_lr_schedule, "message_lr_schedule")
        self.max_length = max_length
        self.top_k = top_k
        self.min_reward = min_reward
        self.resource = resource
        self.loop = settings("loop", loop, LoopSettings(n_samples=4))
        # Every group counts for SFT, the ones whose rollouts all succeeded above all.
        self.transitions = TransitionBuilder(drop_zero_variance=False)
        self.learner = settings("learner", learner, LearnerSettings())
        self.policy = ServedPolicy(
            self.model or "",
            self.learner,
            settings("sampling", sampling, SamplingSettings()),
            settings("serving", serving, ServingSettings()),
            settings("checkpoints", checkpoints, CheckpointSettings()),
        )
        self.message_history: list[dict[str, float]] = []

    async def setup(self, ctx: AlgorithmContext) -> Mapping[str, Resource]:
        if self.model is None:
            raise InvalidInputError(
                f"{self.name} needs a model to train: SFTTorch(model='path/to/hf-model'), "
                "or the folder in $AGL_TORCH_MODEL",
                field="model",
            )
        llm = await self.policy.start(ctx)
        if self.messages is not None and not self.policy.resumed_step:
            conversations = (
                list(self.messages)
                if isinstance(self.messages, Sequence) and not isinstance(self.messages, str)
                else load_tasks(self.messages)
            )
            self.message_history = await asyncio.to_thread(
                train_on_messages,
                self.policy.learner,
                conversations,
                epochs=self.message_epochs,
                batch_size=self.message_batch_size,
                lr_schedule=self.message_lr_schedule,
                tools=self.tools,
                max_length=self.max_length,
                seed=self.learner.seed,
            )
            for row in self.message_history:
                ctx.log(0, {f"sft/messages/{k}": v for k, v in row.items()})
            self.policy.steps_trained += 1
            await self.policy.publish()
        return {self.resource: llm}

    def resume_step(self) -> int:
        return self.policy.resumed_step

    async def step(self, ctx: AlgorithmContext, batch: StepBatch) -> Mapping[str, Resource]:
        from agl_torch.data import sft_examples_from_transitions

        kept = best_transitions(batch, top_k=self.top_k, min_reward=self.min_reward)
        examples: list[SFTExample] = sft_examples_from_transitions(kept)
        metrics = await asyncio.to_thread(self.policy.learner.sft_step, examples)
        batch.metrics.update({f"sft/{key}": value for key, value in metrics.items()})
        batch.metrics["sft/kept_transitions"] = float(len(kept))
        batch.metrics.update(await self.policy.after_step(ctx, batch.step))
        return {}

    async def close(self, ctx: AlgorithmContext) -> None:
        await self.policy.close(ctx)
