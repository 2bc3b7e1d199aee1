"""The store conformance suite's part on resources: versions, types (a plugin's too), history, ids.

Mixed into :class:`agl.testing.store.StoreConformance`; a backend runs these with the rest.
"""

from __future__ import annotations

from typing import Literal

import pytest

import agl
from agl import (
    LLM,
    InvalidInputError,
    NotFoundError,
    PromptTemplate,
    Resource,
    RolloutRequest,
    Store,
)
from agl.plugins import PluginManager

__all__ = ["StoreResourceRules"]


class _SuiteResource(Resource):
    """A resource type a plugin provides, for the round-trip test."""

    type: Literal["agl-testing-suite"] = "agl-testing-suite"
    weights_path: str
    step: int


class _SuitePlugin:
    """The plugin that provides :class:`_SuiteResource`."""

    @agl.hookimpl
    def agl_resource_types(self) -> list[type[Resource]]:
        return [_SuiteResource]


class StoreResourceRules:
    """What publishing and fetching resources must do."""

    async def test_resources_are_versioned(self, store: Store) -> None:
        assert await store.get_resources() is None
        v1 = await store.add_resources({"llm": LLM(endpoint="http://a/v1", model="m1")})
        v2 = await store.add_resources({"llm": LLM(endpoint="http://a/v1", model="m2")})
        assert (v1.version, v2.version) == (1, 2)
        assert v1.resources_id != v2.resources_id
        latest = await store.get_resources()
        assert latest == v2
        assert await store.get_resources(v1.resources_id) == v1
        with pytest.raises(NotFoundError):
            await store.get_resources("rs-unknown")

    async def test_resources_round_trip_their_types(self, store: Store) -> None:
        resources: dict[str, Resource] = {
            "llm": LLM(endpoint="http://a/v1", model="m", sampling_parameters={"temperature": 0.7}),
            "prompt": PromptTemplate(template="Q: {{ q }}", engine="jinja2"),
            "plugin": _SuiteResource(weights_path="/ckpt/7", step=7),
        }
        update = await store.add_resources(resources, resources_id="rs-fixed")
        back = await store.get_resources("rs-fixed")
        assert back is not None
        assert (back.resources_id, back.version) == (update.resources_id, update.version)
        assert isinstance(back.resources["prompt"], PromptTemplate)
        assert back.resources["prompt"].format(q="why?") == "Q: why?"
        # The plugin's type may come back generic, every field kept; the plugin's manager
        # turns it into the plugin's class, as the runner does before the agent sees it.
        plugins = PluginManager([_SuitePlugin()], entry_points=False)
        upgraded = plugins.upgrade_resources(back.resources)
        assert upgraded == resources
        assert plugins.upgrade_resources(update.resources) == resources
        assert isinstance(upgraded["plugin"], _SuiteResource)
        assert upgraded["plugin"].step == 7
        # A set published twice under one id is stored once.
        again = await store.add_resources({"llm": LLM(endpoint="x", model="y")}, "rs-fixed")
        assert (again.resources_id, again.version) == (update.resources_id, update.version)
        assert plugins.upgrade_resources(again.resources) == resources
        assert (await store.statistics()).resources == 1

    async def test_rollouts_can_name_their_resources(self, store: Store) -> None:
        update = await store.add_resources({"llm": LLM(endpoint="http://a/v1", model="m")})
        [rollout] = await store.enqueue_rollouts(
            [RolloutRequest(input=1, resources_id=update.resources_id)]
        )
        assert (await store.get_rollout(rollout.rollout_id)).resources_id == update.resources_id

    async def test_resource_history_pages_newest_first(self, store: Store) -> None:
        empty = await store.query_resources()
        assert (empty.resources, empty.total, empty.next_offset) == ([], 0, None)
        published = [
            await store.add_resources({"llm": LLM(endpoint="http://a/v1", model=f"m{i}")})
            for i in range(5)
        ]
        first = await store.query_resources(limit=2)
        assert [update.version for update in first.resources] == [5, 4]
        assert (first.total, first.offset, first.next_offset) == (5, 0, 2)
        assert first.resources[0] == published[-1]
        last = await store.query_resources(limit=2, offset=4)
        assert (last.resources, last.next_offset) == ([published[0]], None)
        everything = await store.query_resources()
        assert everything.resources == published[::-1]
        with pytest.raises(InvalidInputError) as caught:
            await store.query_resources(limit=0)
        assert caught.value.field == "limit"
        with pytest.raises(InvalidInputError) as caught:
            await store.query_resources(offset=-1)
        assert caught.value.field == "offset"

    async def test_a_resources_id_must_be_addressable_by_url(self, store: Store) -> None:
        llm = {"llm": LLM(endpoint="http://a/v1", model="m")}
        kept = await store.add_resources(llm, resources_id="prompts-v1.2_x")
        for bad in ("a/b", "..", "with space", "x" * 257, ""):
            with pytest.raises(InvalidInputError) as caught:
                await store.add_resources(llm, resources_id=bad)
            assert caught.value.field == "resources_id"
        # nothing was published by the refusals, and the good id reads back
        assert (await store.query_resources()).total == 1
        assert await store.get_resources("prompts-v1.2_x") == kept
