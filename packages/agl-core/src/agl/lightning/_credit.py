"""Credit assignment: how a rollout's rewards become one return per LLM call.

A strategy sees every call of one attempt (all agents, in the order they started, each with the
step rewards :func:`~agl.lightning._calls.extract_calls` gave it) and the attempt's final reward,
and returns one number per call: the return that call is credited with. Advantages are computed
from these returns afterwards (:mod:`agl.lightning._advantages`).

Worked example: an agent makes three calls; ``emit_reward(0.2)`` follows the first, the
second's response is linked by id to ``emit_reward(0.5, response_id=...)``, and the rollout
ends with a final reward of 1.0. Step rewards are ``[0.2, 0.5, 0.0]``.

=========================  =====================  ===========================================
strategy                   returns                how
=========================  =====================  ===========================================
``FinalReward()``          ``[1.0, 1.0, 1.0]``    the final reward, copied to every call
``StepRewards()``          ``[1.2, 1.5, 1.0]``    each call's own step rewards + the final reward
``DiscountedReturn(0.9)``  ``[1.46, 1.4, 1.0]``   ``r = [0.2, 0.5, 1.0]`` (final on the last call),
                                                  ``G_t = r_t + 0.9 * G_t+1``
=========================  =====================  ===========================================

Custom strategies implement :class:`CreditAssigner` and are passed as objects, or registered by
name through the ``agl_credit_assigners`` plugin hook and named in
``TransitionBuilder(credit="name")``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from agl._errors import InvalidInputError
from agl.lightning._calls import LLMCall

__all__ = [
    "BUILTIN_CREDIT",
    "CreditAssigner",
    "DiscountedReturn",
    "FinalReward",
    "PluginCredit",
    "StepRewards",
    "credit_assigner",
]


@runtime_checkable
class CreditAssigner(Protocol):
    """A credit-assignment strategy.

    ``assign`` gets the calls of one attempt (all agents, in call order) and the attempt's
    final reward, and returns one return per call, in the same order.
    """

    def assign(self, calls: Sequence[LLMCall], final_reward: float) -> list[float]:
        """Return one return (the reward the call is credited with) per call."""
        ...


class FinalReward:
    """Every call is credited with the rollout's final reward (step rewards are ignored)."""

    name = "final"

    def assign(self, calls: Sequence[LLMCall], final_reward: float) -> list[float]:
        return [final_reward] * len(calls)

    def __repr__(self) -> str:
        return "FinalReward()"


class StepRewards:
    """Each call gets the step rewards emitted for it, plus the final reward.

    Args:
        final_weight: How much of the final reward each call gets (0 trains on step rewards
            alone).
    """

    name = "step"

    def __init__(self, final_weight: float = 1.0) -> None:
        self.final_weight = final_weight

    def assign(self, calls: Sequence[LLMCall], final_reward: float) -> list[float]:
        bonus = self.final_weight * final_reward
        return [sum(call.step_rewards) + bonus for call in calls]

    def __repr__(self) -> str:
        return f"StepRewards(final_weight={self.final_weight})"


class DiscountedReturn:
    """Discounted returns: ``G_t = r_t + gamma * G_(t+1)``.

    ``r_t`` is call ``t``'s step rewards, and the last call's also includes the final reward, so
    with no step rewards, call ``t`` of ``T`` gets ``gamma ** (T - 1 - t) * final``: later calls,
    closer to the outcome, get more of it.

    Args:
        gamma: The discount, in ``[0, 1]``.
    """

    name = "discounted"

    def __init__(self, gamma: float = 0.95) -> None:
        if not 0.0 <= gamma <= 1.0:
            raise InvalidInputError(f"gamma must be in [0, 1], got {gamma}", field="gamma")
        self.gamma = gamma

    def assign(self, calls: Sequence[LLMCall], final_reward: float) -> list[float]:
        returns = [0.0] * len(calls)
        following = 0.0
        for index in range(len(calls) - 1, -1, -1):
            reward = sum(calls[index].step_rewards)
            if index == len(calls) - 1:
                reward += final_reward
            following = reward + self.gamma * following
            returns[index] = following
        return returns

    def __repr__(self) -> str:
        return f"DiscountedReturn(gamma={self.gamma})"


BUILTIN_CREDIT: dict[str, type[CreditAssigner]] = {
    cls.name: cls for cls in (FinalReward, StepRewards, DiscountedReturn)
}
"""Core's strategies by name (what ``TransitionBuilder(credit="name")`` resolves on its own)."""


class PluginCredit:
    """A strategy named but not built yet: a plugin's, which the trainer resolves by name
    (:meth:`agl.plugins.PluginManager.create_credit_assigner`) before the run starts."""

    def __init__(self, name: str) -> None:
        self.name = name

    def assign(self, calls: Sequence[LLMCall], final_reward: float) -> list[float]:
        raise InvalidInputError(
            f"credit strategy {self.name!r} is not one of agl's {sorted(BUILTIN_CREDIT)}; a "
            "plugin's strategy is looked up by a Trainer before the run (outside one, build "
            "it with agl.plugins.PluginManager().create_credit_assigner(name) and pass it)",
            field="credit",
            value=self.name,
        )

    def __repr__(self) -> str:
        return f"PluginCredit({self.name!r})"


def credit_assigner(spec: object, *, name: str | None = None) -> CreditAssigner:
    """The strategy ``spec`` names, or ``spec`` itself, checked.

    A name of one of agl's strategies builds it; any other name becomes a
    :class:`PluginCredit`, which the trainer replaces with the plugin's strategy.

    Args:
        spec: A strategy, or its name.
        name: The name ``spec`` was built from, for messages.

    Raises:
        InvalidInputError: ``spec`` is neither a name nor has an ``assign`` method.
    """
    if isinstance(spec, str):
        cls = BUILTIN_CREDIT.get(spec)
        return PluginCredit(spec) if cls is None else cls()
    if not isinstance(spec, CreditAssigner):
        what = f"credit strategy {name!r} built a" if name else "credit must be a strategy name or"
        raise InvalidInputError(
            f"{what} {type(spec).__name__}, which has no assign(calls, final_reward) method",
            field="credit",
            value=name,
        )
    return spec
