"""Credit assignment strategies, on the worked example of agl.lightning.credit's docstring."""

from __future__ import annotations

import pytest

from agl import InvalidInputError
from agl.lightning import DiscountedReturn, FinalReward, LLMCall, StepRewards
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
    with pytest.raises(InvalidInputError, match="no credit assignment strategy named 'finale'"):
        credit_assigner("finale")
    with pytest.raises(InvalidInputError, match="assign"):
        credit_assigner(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="gamma"):
        DiscountedReturn(1.5)
