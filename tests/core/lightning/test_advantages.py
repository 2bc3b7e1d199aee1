"""Advantage estimators: rollout-level group baselines, leave-one-out, REINFORCE."""

from __future__ import annotations

import pytest

from agl import InvalidInputError
from agl.lightning import GRPO, RLOO, Group, Reinforce
from agl.lightning._advantages import advantage_estimator


def test_grpo_worked_example_is_rollout_level() -> None:
    # Rollout 0 made five calls, the others one each: the mean and scale are over rollouts.
    group = Group("t0", [1.0, 0.0, 0.0], [[1.0] * 5, [0.0], [0.0]])
    [advantages] = GRPO().estimate([group])
    assert advantages is not None
    assert advantages[0] == pytest.approx([1.1547] * 5, abs=1e-4)
    assert advantages[1] == pytest.approx([-0.5774], abs=1e-4)
    [centred] = GRPO(scale=False).estimate([group])
    assert centred is not None
    assert centred[0][0] == pytest.approx(2 / 3)


def test_grpo_over_calls_lets_the_long_rollout_set_the_baseline() -> None:
    # The same group over its seven call returns: mean 5/7, so the long rollout's calls
    # get less credit and the short ones more blame than over rollouts.
    group = Group("t0", [1.0, 0.0, 0.0], [[1.0] * 5, [0.0], [0.0]])
    [advantages] = GRPO(over="calls").estimate([group])
    assert advantages is not None
    mean, std = 5 / 7, (5 * (2 / 7) ** 2 + 2 * (5 / 7) ** 2) ** 0.5 / 6**0.5
    assert advantages[0] == pytest.approx([(1 - mean) / std] * 5, abs=1e-5)
    assert advantages[1] == pytest.approx([-mean / std], abs=1e-5)
    assert GRPO(over="calls").estimate([Group("one", [1.0], [[1.0, 0.0]])]) == [None]
    with pytest.raises(InvalidInputError, match="over must be"):
        GRPO(over="tokens")  # type: ignore[arg-type]


def test_groups_that_teach_nothing_are_none() -> None:
    same = Group("same", [0.5, 0.5], [[0.5], [0.5]])
    alone = Group("alone", [1.0], [[1.0]])
    for estimator in (GRPO(), RLOO()):
        assert estimator.estimate([same, alone]) == [None, None]


def test_rloo_uses_the_other_rollouts() -> None:
    group = Group("t", [1.0, 0.0, 0.5], [[1.0, 1.0], [0.0], []])
    [advantages] = RLOO().estimate([group])
    assert advantages == [[0.75, 0.75], [-0.75], []]


def test_reinforce_batch_mean_or_fixed_baseline() -> None:
    groups = [Group("a", [1.0], [[1.0]]), Group("b", [0.0, 0.0], [[0.0], [0.0]])]
    assert Reinforce().estimate(groups) == [[[pytest.approx(2 / 3)]], [[-1 / 3], [-1 / 3]]]
    assert Reinforce(baseline=0.0).estimate(groups) == [[[1.0]], [[0.0], [0.0]]]
    with pytest.raises(InvalidInputError, match="baseline"):
        Reinforce(baseline="median")


def test_estimators_by_name() -> None:
    assert isinstance(advantage_estimator("rloo"), RLOO)
    with pytest.raises(InvalidInputError, match="known: \\['grpo', 'reinforce', 'rloo'\\]"):
        advantage_estimator("ppo")
