"""The Pareto front keeps a candidate that is best on some validation items though not on
average, and complementary front members are merged by the optimizer."""

from __future__ import annotations

from typing import Any


def test_a_front_member_is_kept_and_merged(rig: Any) -> None:
    train = rig.tasks("alpha", "alpha", "alpha", "beta")
    val = rig.tasks("alpha", "alpha", "alpha", "beta")
    run = rig.fit(
        rig.apo(search={"beam_width": 1}, budgets={"max_rounds": 2}),
        rig.tmp_path / "run",
        train,
        val,
    )

    round_one = next(s for s in run.states() if s.rounds == 1)
    alpha, beta = round_one.candidate("c1"), round_one.candidate("c2")
    assert alpha.templates["prompt"].endswith("Remember: alpha.")
    assert (alpha.scores, beta.scores) == ([1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0])
    # beam width 1 keeps c1 by mean; c2 stays as the only one solving the last item
    assert round_one.beam == ["c1", "c2"]
    assert round_one.front == ["c1", "c2"]
    assert round_one.best == "c1"

    state = run.states()[-1]
    [merged] = [c for c in state.candidates if c.origin == "merge"]
    assert merged.parents == ["c1", "c2"]
    assert merged.round == 2
    assert merged.score == 1.0
    assert merged.templates["prompt"] == (
        "Answer the question: {question} Remember: alpha. Also remember: beta."
    )
    assert state.merged == [["c1", "c2"]]
    [request] = rig.script.texts("merge")
    assert rig.block(request, "prompt_a").endswith("Remember: alpha.")
    assert rig.block(request, "prompt_b").endswith("Remember: beta.")
    assert "task {'q': 'question 3', 'need': ['beta']}: reward 1 instead of 0" in request
    assert state.best_scores == [0.0, 0.75, 1.0]


def test_without_the_front_only_the_best_survive(rig: Any) -> None:
    train = rig.tasks("alpha", "alpha", "alpha", "beta")
    val = rig.tasks("alpha", "alpha", "alpha", "beta")
    apo = rig.apo(search={"beam_width": 1, "pareto": False}, budgets={"max_rounds": 2})
    run = rig.fit(apo, rig.tmp_path / "run", train, val)

    round_one = next(s for s in run.states() if s.rounds == 1)
    assert round_one.beam == ["c1"]
    assert round_one.front == []
    assert "merge" not in rig.script.counts
    assert all(c.origin != "merge" for c in run.states()[-1].candidates)
