"""The context an algorithm gets: frozen, typed, buildable without a trainer."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import agl
from agl._train._context import AlgorithmContext, RunState
from agl.store._memory import MemoryStore


class _Rows:
    """A metrics sink that keeps rows in a list (what MetricsLogger does, without files)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.rows.append({"step": step, **metrics})

    def rewind(self, step: int) -> list[dict[str, Any]]:
        self.rows = [row for row in self.rows if row["step"] <= step]
        return self.rows


def test_a_view_with_its_own_run_dir_shares_the_runs_state(tmp_path: Path) -> None:
    ctx = AlgorithmContext(
        store=MemoryStore(),
        run_dir=tmp_path,
        metrics=_Rows(),
        state=RunState({"p": agl.PromptTemplate(template="x")}),
    )
    view = ctx.with_run_dir(tmp_path / "writer")
    assert (view.run_dir, ctx.run_dir) == (tmp_path / "writer", tmp_path)
    assert (tmp_path / "writer").is_dir()
    assert view.state is ctx.state
    view.log(1, {"loss": 0.5})
    assert ctx.history == [{"step": 1.0, "loss": 0.5}]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.run_dir = tmp_path / "elsewhere"  # type: ignore[misc]


def _reward_is_task(task: int) -> float:
    return float(task)


def test_a_context_runs_rollouts_without_a_trainer(tmp_path: Path) -> None:
    async def run() -> None:
        async with MemoryStore() as store:
            ctx = AlgorithmContext(store=store, run_dir=tmp_path, metrics=_Rows())
            update = await ctx.publish({"p": agl.PromptTemplate(template="x")})
            assert ctx.resources_id == update.resources_id
            runner = agl.Runner(_reward_is_task, store, handle_signals=False, poll_wait=0.1)
            running = asyncio.create_task(runner.run())
            results = await ctx.run_rollouts([1, 2], n=2, timeout=30)
            runner.stop()
            await running
            assert [r.reward for r in results] == [1.0, 1.0, 2.0, 2.0]
            assert ctx.totals["succeeded"] == 4
            with pytest.raises(agl.AglError, match="serves no LLM"):
                await ctx.serve_llm(["http://127.0.0.1:1/v1"], "m")

    asyncio.run(run())


def test_steps_logged_from_any_thread_reach_the_store_in_order() -> None:
    from agl._train._store_metrics import StoreMetrics

    async def run() -> None:
        async with MemoryStore() as store:
            rows = _Rows()
            sink = StoreMetrics(rows, store, run="r")
            sink.log(0, {"reward/mean": 0.5, "loss": float("nan")})
            await asyncio.to_thread(sink.log, 1, {"reward/mean": 0.75})  # an algorithm's thread
            await sink.aclose()
            stored = (await store.query_metrics(run="r")).rows
            assert [(row.step, row.values) for row in stored] == [
                (0, {"reward/mean": 0.5}),  # NaN is not stored
                (1, {"reward/mean": 0.75}),
            ]
            assert [row["step"] for row in rows.rows] == [0, 1]  # the files got both

    asyncio.run(run())
