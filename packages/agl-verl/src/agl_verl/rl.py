"""LightningRL on verl: the algorithm ``"lightningrl-verl"``.

::

    algorithm = LightningRLVerl(
        "Qwen/Qwen2.5-1.5B-Instruct",
        loop=agl.LoopSettings(batch_size=32, n_samples=8),
        config="configs/1gpu.yaml",            # verl's own config keys (a dict works too)
    )
    agl.Trainer(algorithm=algorithm).fit(agent, "train.jsonl", val_dataset="val.jsonl")

verl's engine (FSDP workers, vLLM replicas, Ray) trains the model; agl's loop replaces verl's
generation step. Each step:

1. agl enqueues ``loop.n_samples`` rollouts of each of ``loop.batch_size`` tasks; runners (in this
   process, in subprocesses, or on CPU machines anywhere) run the agent, whose LLM resource
   points at agl's gateway in front of verl's vLLM servers (token ids and logprobs on);
2. the step waits for them, each attempt bounded by the rollout config's time limits and the
   whole wait by ``loop.step_timeout``; failed and cancelled rollouts are dropped with a counted
   reason, never trained on as reward 0;
3. LightningRL turns the spans into transitions (credit assignment, rollout-level group
   advantages), :func:`~agl_verl.dataproto.to_dataproto` lays them out as verl's
   ``DataProto``;
4. :class:`~agl_verl.engine.VerlEngine` runs verl's update (old/reference logprobs, critic,
   advantages: agl's by default or any of verl's estimators, PPO update) and syncs the new
   weights into the vLLM replicas; a new version of the LLM resource is published, naming the
   new weight version, so every call records which policy version produced it.

With ``loop=agl.LoopSettings(max_staleness=k)`` the rollouts of the next ``k`` steps keep
running while verl updates, on agl's own asynchronous loop (verl's fully asynchronous trainer
is a separate recipe with its own rollout workers, not the engine this package drives). In
verl's colocated layout the vLLM replicas sleep while the actor trains, so generation pauses
during an update; the overlap is then in everything around it (agents, tools, the gateway,
the store), and every call is recorded with the version of the LLM resource its rollout was
enqueued with, an upper bound on its staleness (see :attr:`agl.LLM.weight_version`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

import httpx
from omegaconf import DictConfig, OmegaConf

from agl import (
    LLM,
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
from agl_verl.config import build_config, load_overrides, validate_config
from agl_verl.dataproto import to_dataproto
from agl_verl.engine import VerlEngine

__all__ = ["MODEL_ENV", "LightningRLVerl"]

MODEL_ENV = "AGL_VERL_MODEL"


class LightningRLVerl(StepAlgorithm):
    """Train an agent's LLM with LightningRL on verl (see the module docstring).

    Args:
        model: The model to train: a Hugging Face folder or hub id (default:
            ``$AGL_VERL_MODEL``).
        config: verl config overrides: a dict (nested or dotted keys), a YAML file, or YAML
            text; they win over agl's defaults and the values below.
        resource: The name of the LLM resource agents receive.
        loop: The loop (:class:`agl.LoopSettings`; ``n_samples`` 4 by default): its
            ``batch_size`` is ``data.train_batch_size`` and its ``n_samples``
            ``actor_rollout_ref.rollout.n`` in verl's terms.
        transitions: How transitions are built (default: :class:`agl.TransitionBuilder` with
            GRPO and verl's prompt/response length limits, over-long samples dropped and
            counted).
        sampling: Sampling parameters published with the LLM resource
            (:class:`agl.SamplingSettings`).
        weight_advantages: Scale each sample's advantage by ``1 / samples of its rollout``, so
            a rollout that made many calls counts once (agl-torch does the same).
        engine: Build the engine from the final config (default: :class:`VerlEngine`).
    """

    name = "lightningrl-verl"

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        resource: str = "llm",
        loop: LoopSettings | Mapping[str, Any] | None = None,
        transitions: TransitionBuilder | None = None,
        sampling: SamplingSettings | Mapping[str, Any] | None = None,
        weight_advantages: bool = True,
        engine: Any = None,
    ) -> None:
        self.model = model_or_env(model, MODEL_ENV)
        self.overrides = load_overrides(config)
        self.resource = resource
        self.loop = settings("loop", loop, LoopSettings(n_samples=4))
        self._transitions = transitions
        self.sampling = settings("sampling", sampling, SamplingSettings())
        self.weight_advantages = weight_advantages
        self.engine_factory = engine or VerlEngine
        self.config: DictConfig | None = None
        self.engine: Any = None
        self.llm: LLM | None = None
        self.version = 0
        """Weight updates synced into the vLLM replicas in this run (0: the weights loaded at
        start, from the model or a checkpoint)."""

    # --- config -------------------------------------------------------------------------------

    def build_config(self, ctx: AlgorithmContext | None = None) -> DictConfig:
        """verl's config for this run, validated (no GPU work): see :mod:`agl_verl.config`."""
        tasks = len(ctx.train_tasks) if ctx is not None else None
        loop = ctx.loop if ctx is not None else self.loop  # the run's loop wins over its own
        batch_size = loop.batch_size or tasks
        overrides: Any = self.overrides
        if ctx is not None and OmegaConf.select(overrides, "trainer.default_local_dir") is None:
            overrides = OmegaConf.merge(
                overrides, {"trainer": {"default_local_dir": str(ctx.run_dir / "verl")}}
            )
        config = build_config(
            overrides,
            model_path=self.model,
            batch_size=batch_size,
            n_samples=loop.n_samples,
        )
        validate_config(config)
        if int(config.actor_rollout_ref.rollout.n) != loop.n_samples:
            raise InvalidInputError(
                f"actor_rollout_ref.rollout.n={config.actor_rollout_ref.rollout.n} in the verl "
                f"config differs from n_samples={loop.n_samples}: set n_samples instead",
                field="config",
            )
        return config

    @property
    def transitions(self) -> TransitionBuilder | None:  # type: ignore[override]
        if self._transitions is None and self.config is not None:
            self._transitions = TransitionBuilder(
                advantage="grpo",
                max_prompt_length=int(self.config.data.max_prompt_length),
                max_response_length=int(self.config.data.max_response_length),
            )
        return self._transitions or TransitionBuilder(advantage="grpo")

    # --- the algorithm ------------------------------------------------------------------------

    async def setup(self, ctx: AlgorithmContext) -> Mapping[str, Resource]:
        if self.model is None:
            raise InvalidInputError(
                f"{self.name} needs a model to train: LightningRLVerl(model='path/or/hub-id'), "
                f"or ${MODEL_ENV}",
                field="model",
            )
        self.config = self.build_config(ctx)
        total, per_epoch = self.total_steps(len(ctx.train_tasks))
        # verl's learning-rate schedule and epoch count need at least one step.
        self.engine = self.engine_factory(
            self.config, total_steps=max(total, 1), steps_per_epoch=max(per_epoch, 1)
        )
        upstreams = await asyncio.to_thread(self.engine.start)
        model_name = await served_model(upstreams[0])
        llm = await ctx.serve_llm(upstreams, model_name, self.sampling.parameters())
        self.llm = llm.model_copy(update={"weight_version": self.version})
        return {self.resource: self.llm}

    def resume_step(self) -> int:
        return int(getattr(self.engine, "resumed_step", 0)) if self.engine is not None else 0

    def policy_version(self) -> int | None:
        # vLLM names no version on its responses: each update publishes the LLM resource with
        # the new one, and the gateway records the resource's on every call of a rollout.
        return self.version

    async def step(self, ctx: AlgorithmContext, batch: StepBatch) -> Mapping[str, Resource]:
        assert self.engine is not None, "step() before setup()"
        assert self.config is not None
        assert self.llm is not None
        transitions = batch.transitions
        if transitions is None or len(transitions) == 0:
            batch.metrics["verl/skipped_update"] = 1.0
            return {}
        data = to_dataproto(
            transitions,
            pad_token_id=self.engine.pad_token_id,
            max_prompt_length=int(self.config.data.max_prompt_length),
            max_response_length=int(self.config.data.max_response_length),
            advantages=str(self.config.algorithm.adv_estimator) == "agl",
            weight_advantages=self.weight_advantages,
        )
        metrics = await asyncio.to_thread(self.engine.update, data, batch.step)
        batch.metrics.update(metrics)
        # The same servers with new weights: a new resource version naming the new weight
        # version, so every later call records which update produced it.
        self.version += 1
        self.llm = self.llm.model_copy(update={"weight_version": self.version})
        batch.metrics["weights/version"] = float(self.version)
        return {self.resource: self.llm}

    async def close(self, ctx: AlgorithmContext) -> None:
        if self.engine is not None:
            await asyncio.to_thread(self.engine.close)
            self.engine = None


async def served_model(upstream: str, *, timeout: float = 30.0) -> str:
    """The model id an OpenAI-compatible server answers to (its first ``/v1/models`` entry)."""
    url = upstream.rstrip("/")
    url = url if url.endswith("/v1") else f"{url}/v1"
    async with httpx.AsyncClient(timeout=timeout) as client:
        response = await client.get(f"{url}/models")
        response.raise_for_status()
        models = response.json().get("data") or []
    if not models:
        raise InvalidInputError(f"{url}/models lists no model", field="upstream")
    return str(models[0]["id"])
