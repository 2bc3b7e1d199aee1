"""A second run on the same SQLite store continues the search where the first one stopped."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

import agl
from agl import read_metrics
from agl_apo import APOState
from agl_apo.state import find_checkpoint, run_key


def saved(url: str, seed: str) -> tuple[int, int, APOState | None]:
    """The latest generation, step and state saved in the store for the seed prompt."""

    async def read() -> tuple[int, int, APOState | None]:
        async with agl.open_store(url) as store:
            key = run_key({"prompt": agl.PromptTemplate(template=seed)})
            generation, checkpoint = await find_checkpoint(store, key, "apo/prompt")
            if checkpoint is None:
                return generation, 0, None
            return generation, checkpoint.step, checkpoint.state("apo/prompt")

    return asyncio.run(read())


def scoring_rounds(url: str) -> list[int]:
    async def read() -> list[int]:
        async with agl.open_store(url) as store:
            page = await store.query_rollouts(limit=10_000)
        return [int(r.metadata["apo_round"]) for r in page.rollouts if "apo_round" in r.metadata]

    return asyncio.run(read())


def test_a_restarted_run_continues_the_search(
    rig: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run_dir = tmp_path / "run"
    train = rig.tasks("alpha", ("alpha", "beta"), "gamma", ("beta", "delta"))
    val = rig.tasks("alpha", "beta", "gamma", "delta")

    first = rig.fit(
        rig.apo(budgets={"max_rounds": 4}, loop={"max_steps": 2}), run_dir, train, val, store=url
    )
    generation, step, state = saved(url, rig.SEED)
    assert (generation, step) == (1, 2)
    assert state is not None
    assert state.rounds == 2
    before = [c.id for c in state.candidates]
    calls_before = rig.server.request_count
    assert first.result.last("apo/round") == 2

    second = rig.fit(rig.apo(budgets={"max_rounds": 4}), run_dir, train, val, store=url)
    generation, step, state = saved(url, rig.SEED)
    assert (generation, step) == (1, 4)
    assert state is not None
    assert state.rounds == 4
    ids = [c.id for c in state.candidates]
    assert ids[: len(before)] == before  # the first run's candidates, then new ones
    assert {c.round for c in state.candidates[len(before) :]} <= {3, 4}
    assert state.optimizer_calls == rig.server.request_count > calls_before
    # the seed was scored once, by the first run; the second ran rounds 3 and 4 only
    rounds = scoring_rounds(url)
    assert rounds.count(0) == len(val)
    assert max(rounds) <= 4
    # one metrics row per step and kind, across both runs (the loop rewinds what it redoes)
    rows = read_metrics(run_dir)
    assert [int(r["step"]) for r in rows if "apo/round" in r] == [1, 2, 3, 4]
    assert second.result.last("apo/round") == 4
    best = state.best_candidate()
    assert best is not None
    assert (run_dir / "apo" / "best_prompt.txt").read_text() == best.templates["prompt"] + "\n"

    # a third run on the same store asked not to resume starts a new search
    rig.fit(
        rig.apo(resume=False, budgets={"max_rounds": 1}), tmp_path / "fresh", train, val, store=url
    )
    generation, step, state = saved(url, rig.SEED)
    assert (generation, step) == (2, 1)
    assert state is not None
    assert state.rounds == 1
    assert state.generation == 2
    assert scoring_rounds(url).count(0) == 2 * len(val)

    # other validation tasks: the saved scores do not compare, so a new search starts
    other = rig.tasks("zeta", "alpha", "beta", "gamma")
    with caplog.at_level(logging.WARNING, logger="agl_apo"):
        rig.fit(rig.apo(budgets={"max_rounds": 1}), tmp_path / "other", train, other, store=url)
    assert "not resuming the saved search (step 1)" in caplog.text
    generation, step, state = saved(url, rig.SEED)
    assert (generation, step) == (3, 1)
