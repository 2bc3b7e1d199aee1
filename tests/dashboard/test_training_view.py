"""The training view names re-rendered histories: LightningRL's ``prefix_mismatch`` calls, per
rollout and with where their ids part, read from a real store (no run, no browser)."""

from __future__ import annotations

import asyncio
from typing import Any

import agl
from agl.dashboard._views import training_view
from agl.lightning import TransitionBuilder

from .conftest import add_rerendered_group


async def _views(trajectory: bool) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    async with agl.open_store("memory://") as store:
        rerendered, extended = await add_rerendered_group(store)
        builder = TransitionBuilder(trajectory=trajectory)
        return (
            rerendered,
            extended,
            await training_view(store, rerendered, builder),
            await training_view(store, extended, builder),
        )


def test_the_training_view_names_each_re_rendered_call() -> None:
    for trajectory in (False, True):
        rerendered, extended, view, other = asyncio.run(_views(trajectory))
        [mismatch] = view["prefix_mismatch"]
        assert mismatch["rollout_id"] == rerendered
        assert mismatch["call_index"] == 1
        assert mismatch["position"] > 0
        assert other["prefix_mismatch"] == view["prefix_mismatch"]  # the group's, either page
        counts = {row["rollout_id"]: row["prefix_mismatch"] for row in view["rollouts"]}
        assert counts == {rerendered: 1, extended: 0}
        assert "1 re-rendered histories (prefix_mismatch)" in view["summary"]
        # trained on its own: two samples for the re-rendered rollout; merged in the other
        samples = [t["rollout_id"] for t in view["transitions"]]
        assert samples.count(rerendered) == 2
        assert samples.count(extended) == (1 if trajectory else 2)
