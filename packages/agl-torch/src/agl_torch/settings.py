"""agl-torch's settings objects: the learner, the policy server and checkpoints.

Each is a frozen dataclass checked when built (a bad value names its field), and
:class:`~agl_torch.LightningRLTorch` and :class:`~agl_torch.SFTTorch` take them whole::

    LightningRLTorch(
        "models/policy",
        loop=agl.LoopSettings(n_samples=8, batch_size=8),
        learner=LearnerSettings(lr=1e-4, lora=LoraSettings(r=8)),
        sampling=agl.SamplingSettings(max_tokens=256),
        checkpoints=CheckpointSettings(every=5),
    )

(No torch here: agl imports plugins' algorithm classes in every process that looks one up.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, get_args

from agl import InvalidInputError, check_at_least

__all__ = [
    "AGGREGATIONS",
    "KL_KINDS",
    "OFF_POLICY",
    "Aggregation",
    "CheckpointSettings",
    "KLKind",
    "LearnerSettings",
    "LoraSettings",
    "OffPolicy",
    "ServingSettings",
    "check_choice",
]

Aggregation = Literal["token-mean", "sequence-mean"]
KLKind = Literal["k1", "k2", "k3", "low_var_kl"]
OffPolicy = Literal["auto", "ppo", "decoupled"]
OFF_POLICY: tuple[str, ...] = get_args(OffPolicy)
"""The values of :attr:`LearnerSettings.off_policy`."""
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)
"""The names :func:`~agl_torch.losses.aggregate` accepts."""
KL_KINDS: tuple[str, ...] = get_args(KLKind)
"""The names :func:`~agl_torch.losses.kl_penalty` accepts."""


def check_choice(value: str, allowed: tuple[str, ...], field: str) -> None:
    """Raise :class:`~agl.InvalidInputError` unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise InvalidInputError(
            f"{field} must be one of {', '.join(allowed)}; got {value!r}", field=field, value=value
        )


@dataclass(frozen=True)
class LoraSettings:
    """Train low-rank adapters (peft's LoRA) instead of every weight.

    Attributes:
        r: The adapters' rank.
        alpha: Scales the adapters' output by ``alpha / r``.
        dropout: Dropout on the adapters' input while training.
        target_modules: Module names to adapt, or ``"all-linear"`` (every linear layer but
            the output head).
    """

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | tuple[str, ...] = "all-linear"

    def __post_init__(self) -> None:
        check_at_least("LoraSettings", "r", self.r, 1, integer=True)
        check_at_least("LoraSettings", "alpha", self.alpha, 0, above=True)
        check_at_least("LoraSettings", "dropout", self.dropout, 0)


@dataclass(frozen=True)
class LearnerSettings:
    """How the :class:`~agl_torch.learner.Learner` updates the model.

    Attributes:
        lr / weight_decay / betas: AdamW's settings (constant learning rate).
        max_grad_norm: Clip the gradient's global norm to this (None: no clipping).
        micro_batch_tokens: Tokens per forward pass, padding included.
        clip_low / clip_high: PPO's trust region ``[1 - clip_low, 1 + clip_high]`` (RL only).
        aggregation: ``"token-mean"`` or ``"sequence-mean"`` (:mod:`agl_torch.losses`).
        kl_coef: Weight of the KL penalty to the reference policy (0: none; RL only).
        kl_kind: The KL estimator (:func:`~agl_torch.losses.kl_penalty`).
        ppo_epochs: Optimizer steps per RL step, each over the whole batch.
        off_policy: How the policy loss treats data from older weights
            (:func:`~agl_torch.losses.policy_loss`): ``"ppo"`` takes the ratio against the
            behaviour logprobs the engine sampled with; ``"decoupled"`` is decoupled PPO, the
            ratio against the weights before the update and a truncated importance weight
            from behaviour to those weights (one more forward pass per step); ``"auto"`` (the
            default) is ``"decoupled"`` when the run's loop trains on stale data
            (``LoopSettings(max_staleness >= 1)``) and ``"ppo"`` otherwise.
        importance_cap: Truncates decoupled PPO's importance weights (None: no cap).
        lora: Train LoRA adapters only (needs ``agl-torch[lora]``).
        seed: Seeds torch's generators (LoRA's initial weights, dropout) and the order SFT
            goes through its conversations.
    """

    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    max_grad_norm: float | None = 1.0
    micro_batch_tokens: int = 8192
    clip_low: float = 0.2
    clip_high: float = 0.28
    aggregation: Aggregation = "token-mean"
    kl_coef: float = 0.0
    kl_kind: KLKind = "low_var_kl"
    ppo_epochs: int = 1
    off_policy: OffPolicy = "auto"
    importance_cap: float | None = 2.0
    lora: LoraSettings | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        owner = "LearnerSettings"
        check_at_least(owner, "lr", self.lr, 0, above=True)
        check_at_least(owner, "weight_decay", self.weight_decay, 0)
        check_at_least(owner, "max_grad_norm", self.max_grad_norm, 0, above=True, optional=True)
        check_at_least(owner, "micro_batch_tokens", self.micro_batch_tokens, 1, integer=True)
        check_at_least(owner, "clip_low", self.clip_low, 0)
        check_at_least(owner, "clip_high", self.clip_high, 0)
        check_at_least(owner, "kl_coef", self.kl_coef, 0)
        check_at_least(owner, "ppo_epochs", self.ppo_epochs, 1, integer=True)
        check_at_least(owner, "seed", self.seed, 0, integer=True)
        check_choice(self.aggregation, AGGREGATIONS, "aggregation")
        check_choice(self.kl_kind, KL_KINDS, "kl_kind")
        check_choice(self.off_policy, OFF_POLICY, "off_policy")
        check_at_least(owner, "importance_cap", self.importance_cap, 0, above=True, optional=True)
        if len(self.betas) != 2 or not all(0 <= beta < 1 for beta in self.betas):
            raise InvalidInputError(
                f"LearnerSettings.betas must be two numbers in [0, 1), got {self.betas!r}",
                field="betas",
                value=list(self.betas),
            )
        if self.lora is not None and not isinstance(self.lora, LoraSettings):
            raise InvalidInputError(
                f"LearnerSettings.lora must be a LoraSettings or None, got "
                f"{type(self.lora).__name__}",
                field="lora",
            )


@dataclass(frozen=True)
class ServingSettings:
    """How the policy server agents call serves the model while it trains.

    Attributes:
        model_name: The model name agents send (and the server reports).
        max_batch_size: Requests the server generates for at once.
        device: Where to train and serve (default: CUDA when present, else CPU).
    """

    model_name: str = "policy"
    max_batch_size: int = 64
    device: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise InvalidInputError(
                f"ServingSettings.model_name must be a non-empty string, got {self.model_name!r}",
                field="model_name",
                value=self.model_name,
            )
        check_at_least("ServingSettings", "max_batch_size", self.max_batch_size, 1, integer=True)


@dataclass(frozen=True)
class CheckpointSettings:
    """When a run saves and where it resumes from.

    Attributes:
        every: Save after every this many steps (0: never; the final model is still saved).
        keep: How many of the latest checkpoints to keep.
        resume: False starts fresh; True resumes from the latest complete checkpoint in the
            run directory, if there is one; a path resumes from that checkpoint folder.
    """

    every: int = 1
    keep: int = 2
    resume: bool | str | os.PathLike[str] = False

    def __post_init__(self) -> None:
        check_at_least("CheckpointSettings", "every", self.every, 0, integer=True)
        check_at_least("CheckpointSettings", "keep", self.keep, 1, integer=True)
