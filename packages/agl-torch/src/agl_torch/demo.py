"""LightningRL on a tiny model built in code: ``--train`` for a script with no model at hand.

A script's training run (:class:`agl.Script`) needs a model to train. :func:`tiny_rl` builds
one from random weights (:func:`~agl_torch.tiny.build_tiny_model`, its tokenizer trained on the
task's own text so the prompts stay short) and returns :class:`~agl_torch.rl.LightningRLTorch`
set to run the script's ``--steps``::

    def writer_rl(run: agl.ScriptRun) -> dict[str, Any]:
        return {"writer": tiny_rl(run, corpus=[WRITER_PROMPT, *documents]), "*": None}

Its answers are noise and its rewards mostly 0: the run shows the machinery (token ids,
attribution, the update), not learning. It keeps groups whose rewards are all equal
(advantage 0) so that their transitions exist to look at; with a real model, leave
:class:`agl.TransitionBuilder` at its default and drop them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import agl
from agl_torch.rl import LightningRLTorch
from agl_torch.settings import CheckpointSettings, LearnerSettings
from agl_torch.tiny import build_tiny_model

__all__ = ["tiny_rl"]


def tiny_rl(
    run: agl.ScriptRun,
    corpus: Sequence[str],
    *,
    tasks_per_step: int = 2,
    n_samples: int = 2,
    max_tokens: int = 24,
    lr: float = 1e-3,
    algorithm: type[LightningRLTorch] = LightningRLTorch,
) -> LightningRLTorch:
    """LightningRL for ``run.steps`` steps on a tiny model built under ``run.run_dir``.

    Args:
        run: The script's run: its directory, steps, tasks and seed.
        corpus: Text the tokenizer is trained on (the prompts, the tasks, what tools return).
        tasks_per_step / n_samples: Tasks a step, rollouts a task.
        max_tokens: The longest answer.
        lr: The learning rate.
        algorithm: :class:`~agl_torch.rl.LightningRLTorch` or a subclass of it (to look at
            each step's batch, say).
    """
    model = build_tiny_model(
        run.run_dir / "tiny-model",
        corpus=corpus,
        vocab_size=512,
        max_position_embeddings=4096,
        seed=run.seed,
    )
    epochs = math.ceil(run.steps * tasks_per_step / max(len(run.tasks), 1))
    return algorithm(
        model,
        loop=agl.LoopSettings(
            n_epochs=epochs,  # as many as the steps need
            n_samples=n_samples,
            batch_size=tasks_per_step,
            max_steps=run.steps,
        ),
        learner=LearnerSettings(lr=lr, seed=run.seed),
        sampling=agl.SamplingSettings(max_tokens=max_tokens),
        # Random weights: most rewards are 0. Keep those groups (advantage 0) to show them.
        transitions=agl.TransitionBuilder(drop_zero_variance=False),
        checkpoints=CheckpointSettings(every=0),
    )
