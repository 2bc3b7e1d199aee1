"""One trained policy in a run: its learner, the policy server agents call, and checkpoints.

The RL and SFT algorithms of agl-torch both train a model that agents call while it trains;
:class:`ServedPolicy` is that shared part. :meth:`ServedPolicy.start` loads the model, restores
a checkpoint when resuming, starts a :class:`~agl_torch.server.PolicyServer` on loopback with
its own copy of the weights, and puts agl's gateway in front of it (the gateway records every
call with the server's token ids). After each update :meth:`ServedPolicy.publish` hands the new
weights to the server, which swaps them in between generation batches: requests in flight
finish on the weights they started with, and every response names its weight version.

Checkpoints go to ``<run_dir>/checkpoints/step-000012/`` (see
:meth:`agl_torch.learner.Learner.save_checkpoint`); the last ``checkpoints.keep`` are kept.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agl import LLM, AlgorithmContext, InvalidInputError, SamplingSettings
from agl_torch.settings import CheckpointSettings, LearnerSettings, ServingSettings

__all__ = ["MODEL_ENV", "ServedPolicy", "find_checkpoint"]

MODEL_ENV = "AGL_TORCH_MODEL"
"""The model folder agl-torch's algorithms train when built without one (by name, say)."""


logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
_STEP_PREFIX = "step-"
_COMPLETE_MARKER = "state.json"  # written last by Learner.save_checkpoint


def find_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The latest complete checkpoint under ``run_dir/checkpoints`` (None if there is none)."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return None
    complete = [
        path
        for path in root.iterdir()
        if path.name.startswith(_STEP_PREFIX) and (path / _COMPLETE_MARKER).is_file()
    ]
    return max(complete, key=lambda path: path.name, default=None)


@dataclass
class ServedPolicy:
    """A model that trains while a policy server serves it (see the module docstring).

    Args:
        model: A Hugging Face model folder (``save_pretrained`` output; tiny ones:
            :func:`agl_torch.tiny.build_tiny_model`).
        learner: How the :class:`~agl_torch.learner.Learner` updates it.
        sampling: Published in the LLM resource (agents may pass the parameters on).
        serving: The model name, the server's batch size and the device.
        checkpoints: When to save, and whether to resume.
    """

    model: str | os.PathLike[str]
    learner_settings: LearnerSettings = field(default_factory=LearnerSettings)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    serving: ServingSettings = field(default_factory=ServingSettings)
    checkpoints: CheckpointSettings = field(default_factory=CheckpointSettings)

    def __post_init__(self) -> None:
        self.learner: Any = None
        self.server: Any = None
        self.resumed_step = 0
        self.last_saved_step = 0
        self.steps_trained = 0

    async def start(self, ctx: AlgorithmContext) -> LLM:
        """Load (or resume) the model, start its server and the gateway; return the resource."""
        path = Path(self.model)
        if not (path / "config.json").is_file():
            raise InvalidInputError(
                f"{str(path)!r} is not a Hugging Face model folder (no config.json); build one "
                "with agl_torch.tiny.build_tiny_model or save_pretrained",
                field="model",
                value=str(path),
            )
        self.learner = await asyncio.to_thread(self._build_learner, path)
        checkpoint = self._checkpoint_to_resume(ctx.run_dir)
        if checkpoint is not None:
            step, _ = await asyncio.to_thread(self.learner.load_checkpoint, checkpoint)
            self.resumed_step = self.last_saved_step = step
            logger.info("resumed from %s (step %d)", checkpoint, step)
        self.server = await asyncio.to_thread(self._start_server, path)
        if checkpoint is not None or self.learner.lora is not None:
            await self.publish()
        return await ctx.serve_llm(
            [self.server.url], self.serving.model_name, self.sampling.parameters()
        )

    def _build_learner(self, path: Path) -> Any:
        from agl_torch.learner import Learner
        from agl_torch.policy import load_policy

        model, tokenizer = load_policy(path, device=self.serving.device)
        return Learner(model, tokenizer, self.learner_settings, device=self.serving.device)

    def _start_server(self, path: Path) -> Any:
        from agl_torch.server import PolicyServer

        server = PolicyServer(
            path,
            model_name=self.serving.model_name,
            device=self.serving.device,
            max_batch_size=self.serving.max_batch_size,
        )
        server.start()
        return server

    def _checkpoint_to_resume(self, run_dir: Path) -> Path | None:
        resume = self.checkpoints.resume
        if resume is False:
            return None
        if resume is True:
            return find_checkpoint(run_dir)
        path = Path(resume)
        if not (path / _COMPLETE_MARKER).is_file():
            raise InvalidInputError(
                f"cannot resume from {str(path)!r}: not a complete checkpoint "
                f"(no {_COMPLETE_MARKER})",
                field="resume",
                value=str(path),
            )
        return path

    async def publish(self) -> int:
        """Hand the learner's current weights to the server; return the new weight version."""
        state = await asyncio.to_thread(self.learner.serving_state_dict)
        version: int = await asyncio.to_thread(self.server.update_weights, state)
        return version

    async def after_step(self, ctx: AlgorithmContext, step: int) -> dict[str, float]:
        """Publish the new weights and checkpoint when due; return the step's metrics."""
        self.steps_trained += 1
        started = asyncio.get_running_loop().time()
        version = await self.publish()
        metrics = {
            "weights/version": float(version),
            "time/sync_s": asyncio.get_running_loop().time() - started,
        }
        every = self.checkpoints.every
        if every and step % every == 0:
            started = asyncio.get_running_loop().time()
            await asyncio.to_thread(self._save, ctx.run_dir, step)
            metrics["time/checkpoint_s"] = asyncio.get_running_loop().time() - started
        return metrics

    def _save(self, run_dir: Path, step: int) -> None:
        root = run_dir / CHECKPOINTS_DIR
        self.learner.save_checkpoint(root / f"{_STEP_PREFIX}{step:06d}", step=step)
        self.last_saved_step = step
        complete = sorted(path for path in root.iterdir() if path.name.startswith(_STEP_PREFIX))
        for old in complete[: max(0, len(complete) - self.checkpoints.keep)]:
            shutil.rmtree(old, ignore_errors=True)

    async def close(self, ctx: AlgorithmContext) -> None:
        """Save the final model to ``<run_dir>/model`` (if it trained) and stop the server."""
        try:
            if self.learner is not None and self.steps_trained:
                await asyncio.to_thread(self.learner.save_pretrained, ctx.run_dir / "model")
        finally:
            if self.server is not None:
                await asyncio.to_thread(self.server.stop)
                self.server = None
