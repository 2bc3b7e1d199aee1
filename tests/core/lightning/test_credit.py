"""Credit assignment strategies, on the worked example of agl.lightning.credit's docstring."""

from __future__ import annotations

import pytest

import agl
from agl import InvalidInputError
from agl.lightning import DiscountedReturn, FinalReward, LightningRL, LLMCall, StepRewards
from agl.lightning.credit import credit_assigner


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
    unknown = r"no credit assigner named 'finale'.*did you mean 'final'"
    with pytest.raises(InvalidInputError, match=unknown):
        credit_assigner("finale")
    with pytest.raises(InvalidInputError, match="assign"):
        credit_assigner(42)  # type: ignore[arg-type]
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


def test_a_plugin_strategy_by_name() -> None:
    from agl.plugins import register_plugin, reset_plugins

    reset_plugins()
    try:
        register_plugin(_Plugin(), name="test-credit")
        strategy = credit_assigner("last-call-only")
        assert isinstance(strategy, _LastCallOnly)
        assert LightningRL(credit="last-call-only").credit.assign(EXAMPLE, 2.0) == [0, 0, 2.0]
    finally:
        reset_plugins()
    with pytest.raises(InvalidInputError, match="last-call-only"):
        credit_assigner("last-call-only")
