"""What a runner gives its agent: each set read once, the latest one re-read each second."""

from __future__ import annotations

from typing import Any

import pytest

import agl
from agl._resources import ResourcesUpdate
from agl._run._agent import AgentError
from agl._run._runner_resources import RunnerResources
from agl.plugins import PluginManager
from agl.store._memory import MemoryStore

pytestmark = pytest.mark.anyio

GATEWAY = "http://gateway:9000/rollout/{rollout_id}/attempt/{attempt_id}/v1"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Counted:
    """The store's ``get_resources``, counting the reads."""

    def __init__(self, store: agl.Store) -> None:
        self.store = store
        self.reads: list[str | None] = []

    async def __call__(self, resources_id: str | None) -> ResourcesUpdate | None:
        self.reads.append(resources_id)
        return await self.store.get_resources(resources_id)


async def test_a_named_set_is_read_once_and_its_llms_filled_in_per_attempt() -> None:
    store = MemoryStore()
    update = await store.add_resources(
        {
            "policy": agl.LLM(endpoint=GATEWAY, model="policy"),
            "judge": agl.LLM(endpoint="http://judge:8000/v1", model="judge"),
            "prompt": agl.PromptTemplate(template="Q: {q}"),
        }
    )
    fetch = Counted(store)
    cache = RunnerResources(fetch, PluginManager(), token="secret")
    seen: list[dict[str, Any]] = []
    for attempt in ("at-1", "at-2", "at-3"):
        resources, flushes = await cache.for_attempt(update.resources_id, "ro-1", attempt)
        seen.append(resources)
        # only the gateway among the LLMs is flushed, at this attempt's route
        assert flushes == [f"http://gateway:9000/rollout/ro-1/attempt/{attempt}/flush"]
    assert fetch.reads == [update.resources_id]
    policy = seen[1]["policy"]
    assert isinstance(policy, agl.LLM)
    assert policy.endpoint == "http://gateway:9000/rollout/ro-1/attempt/at-2/v1"
    assert policy.api_key == "secret"
    assert seen[1]["prompt"] == agl.PromptTemplate(template="Q: {q}")


async def test_the_latest_set_is_read_again_only_after_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("agl._run._runner_resources.time.monotonic", lambda: now[0])
    store = MemoryStore()
    await store.add_resources({"prompt": agl.PromptTemplate(template="first")})
    fetch = Counted(store)
    cache = RunnerResources(fetch, PluginManager(), token=None)

    resources, flushes = await cache.for_attempt(None, "ro-1", "at-1")
    assert resources["prompt"] == agl.PromptTemplate(template="first")
    assert flushes == []
    await store.add_resources({"prompt": agl.PromptTemplate(template="second")})
    now[0] += 0.5
    resources, _ = await cache.for_attempt(None, "ro-2", "at-1")
    assert resources["prompt"] == agl.PromptTemplate(template="first")
    now[0] += 0.6
    resources, _ = await cache.for_attempt(None, "ro-3", "at-1")
    assert resources["prompt"] == agl.PromptTemplate(template="second")
    assert fetch.reads == [None, None]


async def test_no_set_at_all_gives_no_resources() -> None:
    cache = RunnerResources(Counted(MemoryStore()), PluginManager(), token=None)
    assert await cache.for_attempt(None, "ro-1", "at-1") == ({}, [])


async def test_a_set_the_store_no_longer_has_is_named_in_the_error() -> None:
    cache = RunnerResources(Counted(MemoryStore()), PluginManager(), token=None)
    with pytest.raises(AgentError, match="'rs-gone' are gone"):
        await cache.for_attempt("rs-gone", "ro-1", "at-1")
