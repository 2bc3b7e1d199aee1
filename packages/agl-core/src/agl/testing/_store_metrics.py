"""The store conformance suite's part on training metrics.

Round trip, pages, finite values only, bad input named.

Mixed into :class:`agl.testing.store.StoreConformance`; a backend runs these with the rest.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agl import InvalidInputError, MetricsRow, Store

__all__ = ["StoreMetricRules"]


class StoreMetricRules:
    """What adding and reading training metrics must do."""

    async def test_metrics_round_trip_in_order(self, store: Store) -> None:
        assert await store.metric_runs() == []
        assert (await store.query_metrics()).total == 0
        rows = [
            MetricsRow(run="run-b", step=0, time=1.5, values={"val/reward/mean": 0.25}),
            *(
                MetricsRow(run="run-a", step=step, time=2.0 + step, values={"loss": 1 / (step + 1)})
                for step in range(3)
            ),
        ]
        await store.add_metrics(rows[:2])
        await store.add_metrics(rows[2:])
        await store.add_metrics([])
        await store.add_metrics([rows[0].model_copy(update={"step": 1})])
        everything = await store.query_metrics()
        assert everything.rows == [*rows, rows[0].model_copy(update={"step": 1})]
        assert (everything.total, everything.next_offset) == (5, None)
        run_a = await store.query_metrics(run="run-a")
        assert run_a.rows == rows[1:]
        assert await store.metric_runs() == ["run-b", "run-a"]  # first seen first
        assert (await store.query_metrics(run="run-c")).total == 0

    async def test_metrics_page(self, store: Store) -> None:
        await store.add_metrics(
            [MetricsRow(run="r", step=step, time=float(step), values={}) for step in range(7)]
        )
        await store.add_metrics([MetricsRow(run="other", step=0, time=0.0)])
        page = await store.query_metrics(run="r", limit=3, offset=3)
        assert [row.step for row in page.rows] == [3, 4, 5]
        assert (page.total, page.offset, page.next_offset) == (7, 3, 6)
        tail = await store.query_metrics(run="r", limit=3, offset=6)
        assert ([row.step for row in tail.rows], tail.next_offset) == ([6], None)
        assert (await store.query_metrics(limit=2)).next_offset == 2

    async def test_metrics_keep_only_finite_values(self, store: Store) -> None:
        nan, inf = float("nan"), float("inf")
        row = MetricsRow(
            run="r", step=3, time=10.0, values={"reward": 0.5, "loss": nan, "grad": inf, "n": -inf}
        )
        assert row.values == {"reward": 0.5}
        # JSON has no NaN: a sender writes null for one, which is dropped as well.
        from_json = MetricsRow.model_validate_json(
            '{"run": "r", "step": 4, "time": 11.0, "values": {"reward": null, "kl": 0.1}}'
        )
        assert from_json.values == {"kl": 0.1}
        await store.add_metrics([row, from_json])
        assert [r.values for r in (await store.query_metrics()).rows] == [
            {"reward": 0.5},
            {"kl": 0.1},
        ]

    async def test_metrics_refuse_bad_input_naming_the_field(self, store: Store) -> None:
        with pytest.raises(ValidationError, match="run"):  # rows check themselves
            MetricsRow(run="", step=0, time=0.0)
        with pytest.raises(ValidationError, match="step"):
            MetricsRow(run="r", step=-1, time=0.0)
        with pytest.raises(InvalidInputError) as caught:
            await store.add_metrics("not a list")  # type: ignore[arg-type]
        assert caught.value.field == "rows"
        good = MetricsRow(run="r", step=0, time=0.0)
        with pytest.raises(InvalidInputError) as caught:
            await store.add_metrics([good, {"run": "r"}])  # type: ignore[list-item]
        assert caught.value.field == "rows[1]"
        assert (await store.query_metrics()).total == 0
        bad: list[tuple[str, Any]] = [("run", ""), ("limit", 0), ("limit", 10_001), ("offset", -1)]
        for field, value in bad:
            with pytest.raises(InvalidInputError) as caught:
                await store.query_metrics(**{field: value})
            assert caught.value.field == field
