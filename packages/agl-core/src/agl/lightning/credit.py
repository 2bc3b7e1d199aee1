"""Credit assignment: how a rollout's rewards become one return per LLM call.

(Work in progress: the built-in strategies land in this module.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from agl.lightning.calls import LLMCall

__all__ = ["CreditAssigner"]


@runtime_checkable
class CreditAssigner(Protocol):
    """A credit-assignment strategy.

    ``assign`` gets the calls of one rollout (all agents, in call order) and the rollout's final
    reward, and returns one return per call, in the same order.
    """

    def assign(self, calls: Sequence[LLMCall], final_reward: float) -> list[float]:
        """Return one return (the reward the call is credited with) per call."""
        ...
