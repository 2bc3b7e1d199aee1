"""APO's settings objects: checked when built, taken whole or as mappings of their fields."""

from __future__ import annotations

import pytest

import agl
from agl_apo import APO, Budgets, OptimizerSettings, SearchSettings


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: OptimizerSettings(timeout=0), "timeout"),
        (lambda: OptimizerSettings(concurrency=0), "concurrency"),
        (lambda: OptimizerSettings(model=""), "model"),
        (lambda: SearchSettings(max_example_chars=10), "max_example_chars"),
        (lambda: SearchSettings(front_size=-1), "front_size"),
        (lambda: Budgets(max_rounds=0), "max_rounds"),
        (lambda: Budgets(patience=0), "patience"),
        (lambda: Budgets(min_improvement=-0.1), "min_improvement"),
    ],
)
def test_a_bad_setting_names_its_field(build: object, field: str) -> None:
    with pytest.raises(agl.InvalidInputError, match=field) as caught:
        build()  # type: ignore[operator]
    assert caught.value.field == field


def test_the_groups_are_taken_whole_or_as_mappings() -> None:
    budgets = Budgets(max_rounds=3, max_rollouts=40)
    apo = APO(budgets=budgets, search={"beam_width": 2}, optimizer={"model": "m"})
    assert apo.budgets is budgets
    assert apo.search == SearchSettings(beam_width=2)
    assert apo.search.front == 2  # front_size follows beam_width unless given
    assert apo.optimizer.model == "m"
    # alone, each loop step is one round: max_rounds steps of 8 tasks
    assert apo.loop == agl.LoopSettings(n_epochs=3, batch_size=8, max_steps=3)
    assert APO(loop={"batch_size": 2}).loop.batch_size == 2
    assert "secret" not in repr(OptimizerSettings(api_key="secret"))
    with pytest.raises(agl.InvalidInputError, match="Budgets has no field 'max_round'"):
        APO(budgets={"max_round": 3})
    with pytest.raises(agl.InvalidInputError, match="search must be a SearchSettings"):
        APO(search=4)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unexpected keyword argument 'beam_width'"):
        APO(beam_width=4)  # type: ignore[call-arg]
