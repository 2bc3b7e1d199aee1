"""Credit assignment strategies, on the worked example of agl.lightning._credit's docstring."""

from __future__ import annotations

from typing import Any

import pytest

import agl
from agl import InvalidInputError
from agl._train._trainer import resolve_algorithm
from agl.lightning import DiscountedReturn, FinalReward, LLMCall, StepRewards, TransitionBuilder
from agl.lightning._credit import PluginCredit, credit_assigner
from agl.plugins import PluginManager


def calls(*step_rewards: list[float]) -> list[LLMCall]:
    return [LLMCall("r", "a", i, step_rewards=list(s)) for i, s in enumerate(step_rewards)]


EXAMPLE = calls([0.2], [0.5], [])


def test_the_worked_example() -> None:
    assert FinalReward().assign(EXAMPLE, 1.0) == [1.0, 1.0, 1.0]
    assert StepRewards().assign(EXAMPLE, 1.0) == pytest.approx([1.2, 1.5, 1.0])
    assert DiscountedReturn(0.9).assign(EXAMPLE, 1.0) == pytest.approx([1.46, 1.4, 1.0])


def test_discounting_without_step_rewards_favours_later_calls() -> None:
    returns = DiscountedReturn(0.5).assign(calls([], [], [], []), 8.0)
    assert returns == [1.0, 2.0, 4.0, 8.0]
    assert DiscountedReturn(1.0).assign(calls([1.0], [], [2.0]), 3.0) == [6.0, 5.0, 5.0]
    assert StepRewards(final_weight=0.0).assign(EXAMPLE, 1.0) == pytest.approx([0.2, 0.5, 0.0])


def test_no_calls_no_returns() -> None:
    for strategy in (FinalReward(), StepRewards(), DiscountedReturn()):
        assert strategy.assign([], 1.0) == []


def test_strategies_by_name_and_bad_ones() -> None:
    assert isinstance(credit_assigner("final"), FinalReward)
    assert isinstance(credit_assigner("discounted"), DiscountedReturn)
    assert isinstance(credit_assigner("step"), StepRewards)
    mine = FinalReward()
    assert credit_assigner(mine) is mine
    # Any other name may be a plugin's: the trainer looks it up; used unresolved, it says so.
    pending = credit_assigner("finale")
    assert isinstance(pending, PluginCredit)
    with pytest.raises(InvalidInputError, match="'finale' is not one of agl's"):
        pending.assign(EXAMPLE, 1.0)
    with pytest.raises(InvalidInputError, match="assign"):
        credit_assigner(42)
    with pytest.raises(InvalidInputError, match="gamma"):
        DiscountedReturn(1.5)


class _LastCallOnly:
    """A plugin's strategy: the whole final reward to the last call, nothing before."""

    def assign(self, calls: list[LLMCall], final_reward: float) -> list[float]:
        return [0.0] * (len(calls) - 1) + [final_reward] if calls else []


class _Plugin:
    @agl.hookimpl
    def agl_credit_assigners(self) -> dict[str, type[_LastCallOnly]]:
        return {"last-call-only": _LastCallOnly}


class _Learner(agl.StepAlgorithm):
    def __init__(self, credit: str) -> None:
        self.transitions = TransitionBuilder(credit=credit)

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> dict[str, Any]:
        return {}


def test_the_trainer_looks_a_plugin_strategy_up_by_name() -> None:
    plugins = PluginManager([_Plugin()])
    assert isinstance(plugins.create_credit_assigner("last-call-only"), _LastCallOnly)
    for algorithm in (_Learner("last-call-only"), {"*": _Learner("last-call-only")}):
        resolved = resolve_algorithm(algorithm, plugins)
        learner = resolved.members[0].algorithm if isinstance(resolved, agl.PerAgent) else resolved
        assert isinstance(learner, _Learner)
        assert learner.transitions is not None
        assert learner.transitions.credit.assign(EXAMPLE, 2.0) == [0, 0, 2.0]
    unknown = r"no credit assigner named 'finale'.*did you mean 'final'"
    with pytest.raises(InvalidInputError, match=unknown):
        resolve_algorithm(_Learner("finale"), plugins)
    with pytest.raises(InvalidInputError, match="last-call-only"):  # another manager: unknown
        resolve_algorithm(_Learner("last-call-only"), PluginManager())
