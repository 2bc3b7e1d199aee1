"""Budgets and stopping: rounds, rollouts, optimizer tokens, patience. Counts are asserted
against what the store and the optimizer server saw."""

from __future__ import annotations

from typing import Any


def _by_step(run: Any, key: str) -> dict[int, float]:
    return {int(row["step"]): row[key] for row in run.result.history if key in row}


def test_max_rounds_bounds_the_optimizer_calls(rig: Any) -> None:
    train = rig.tasks("alpha", "alpha", "beta", "alpha")
    val = rig.tasks("alpha", "beta", "alpha", "beta")
    apo = rig.apo(budgets={"max_rounds": 2}, loop={"n_epochs": 4, "max_steps": 4})
    run = rig.fit(apo, rig.tmp_path / "run", train, val)

    state = run.states()[-1]
    assert state.rounds == 2
    assert state.stopped == "max_rounds: 2 rounds done"
    # round 1: the seed's critique and 2 rewrites; round 2: 2 beam members (2 critiques,
    # 4 rewrites) and one merge of the two complementary round-1 candidates
    assert rig.script.counts == {"critique": 3, "rewrite": 6, "merge": 1}
    assert rig.server.request_count == 10 == state.optimizer_calls
    assert _by_step(run, "apo/optimizer_calls") == {1: 3, 2: 10, 3: 10, 4: 10}
    assert _by_step(run, "apo/stopped") == {1: 0, 2: 1, 3: 1, 4: 1}
    # steps 3 and 4 ran the best prompt without scoring anything new
    assert {r.metadata["apo_round"] for r in run.scoring_rollouts()} == {0, 1, 2}


def test_max_rollouts_bounds_the_scoring_rollouts(rig: Any) -> None:
    train = rig.tasks("alpha", "beta", "alpha", "beta")
    val = rig.tasks("alpha", "beta", "alpha", "beta")
    run = rig.fit(rig.apo(budgets={"max_rollouts": 10}), rig.tmp_path / "run", train, val)

    state = run.states()[-1]
    # the seed (4 rollouts) and one rewrite (4) fit in 10; the second rewrite does not
    assert len(run.scoring_rollouts()) == state.rollouts == 8
    assert [c.id for c in state.candidates] == ["c0", "c1"]
    assert state.stopped == "max_rollouts: 8 rollouts run"
    [skip] = state.skips
    assert skip.stage == "score"
    assert "rollout budget (10) has 2 rollouts left and scoring needs 4" in skip.reason
    assert run.result.last("apo/rollouts") == 8.0
    assert rig.script.counts == {"critique": 1, "rewrite": 2}


def test_max_optimizer_tokens_is_never_exceeded(rig: Any) -> None:
    train = rig.tasks("alpha", "beta", "gamma", "delta")
    val = rig.tasks("alpha", "beta", "gamma", "delta")
    budget = 9_000
    apo = rig.apo(
        budgets={"max_optimizer_tokens": budget, "max_rounds": 5},
        optimizer={"max_completion_tokens": 100},
    )
    run = rig.fit(apo, rig.tmp_path / "run", train, val)

    state = run.states()[-1]
    # what APO counted is what the server reported, and it stayed within the budget
    assert state.optimizer_tokens == rig.script.tokens_used()
    assert 0 < state.optimizer_tokens <= budget
    assert state.stopped is not None
    assert state.stopped.startswith("max_optimizer_tokens")
    assert state.rounds < 5
    refused = [s for s in state.skips if "token budget" in s.reason]
    assert refused, state.skips
    assert state.optimizer_calls == rig.server.request_count == len(rig.script.calls)
    assert run.result.last("apo/optimizer_tokens") == float(state.optimizer_tokens)


def test_the_search_stops_when_the_score_stops_improving(rig: Any) -> None:
    train = rig.tasks("alpha", "alpha", "alpha", "alpha")
    val = rig.tasks("alpha", "alpha")
    run = rig.fit(
        rig.apo(budgets={"patience": 1, "max_rounds": 5}), rig.tmp_path / "run", train, val
    )

    state = run.states()[-1]
    # round 1 finds "alpha" (score 1); round 2 proposes nothing new: one stale round, stop
    assert state.best_scores == [0.0, 1.0, 1.0]
    assert state.rounds == 2
    assert state.stopped == "patience: no improvement in 1 rounds"
    calls = _by_step(run, "apo/optimizer_calls")
    assert len(calls) == 5  # the loop ran its 5 steps...
    assert calls[2] == calls[5] == rig.server.request_count  # ...without asking more
    assert state.duplicates > 0
