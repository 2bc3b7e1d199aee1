"""agl on one machine: LightningRL and SFT with PyTorch, and a policy server with token ids.

``import agl_torch`` stays light: the names below load their module (and torch) on first use.

- :class:`LightningRLTorch` (``"lightningrl-torch"``): GRPO / PPO-clip from LightningRL
  transitions, the policy served while it trains.
- :class:`SFTTorch` (``"sft-torch"``): SFT on chat conversations and on the best rollouts.
- :class:`PolicyServer`: an OpenAI-compatible server for a transformers model that returns
  token ids and logprobs the way vLLM does, and swaps weights without failing requests.
- :class:`LearnerSettings`, :class:`LoraSettings`, :class:`ServingSettings`,
  :class:`CheckpointSettings`: the algorithms' settings (beside :class:`agl.LoopSettings` and
  :class:`agl.SamplingSettings`).
- :class:`Learner`: the optimizer steps underneath.
- :func:`build_tiny_model`: a small model and tokenizer built in code (nothing downloaded).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agl_torch.learner import Learner
    from agl_torch.rl import LightningRLTorch
    from agl_torch.server import PolicyServer
    from agl_torch.settings import (
        CheckpointSettings,
        LearnerSettings,
        LoraSettings,
        ServingSettings,
    )
    from agl_torch.sft import SFTTorch
    from agl_torch.tiny import build_tiny_model

__all__ = [
    "CheckpointSettings",
    "Learner",
    "LearnerSettings",
    "LightningRLTorch",
    "LoraSettings",
    "PolicyServer",
    "SFTTorch",
    "ServingSettings",
    "build_tiny_model",
]

_HOMES = {
    "CheckpointSettings": "agl_torch.settings",
    "Learner": "agl_torch.learner",
    "LearnerSettings": "agl_torch.settings",
    "LoraSettings": "agl_torch.settings",
    "ServingSettings": "agl_torch.settings",
    "LightningRLTorch": "agl_torch.rl",
    "PolicyServer": "agl_torch.server",
    "SFTTorch": "agl_torch.sft",
    "build_tiny_model": "agl_torch.tiny",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'agl_torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
