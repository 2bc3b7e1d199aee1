"""The resources a runner gives its agent, fetched from the store once per set.

A rollout names a resources set (or none: the latest one). A runner fetches each named set
once and keeps it (a set never changes), and re-reads the latest set at most once a second.
LLM endpoints are then filled in for the attempt (:meth:`agl.LLM.for_attempt`), and the
gateways among them are the ones the runner flushes before it reports the attempt.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from agl._errors import NotFoundError
from agl._resources import LLM, Resource, ResourcesUpdate
from agl._run._agent import AgentError

if TYPE_CHECKING:
    from agl.plugins import PluginManager

__all__ = ["RunnerResources"]

Fetch = Callable[[str | None], Awaitable[ResourcesUpdate | None]]


class RunnerResources:
    """A runner's cache of resources sets.

    Args:
        fetch: Reads a set from the store by id (None: the latest), waiting out outages.
        plugins: Turn the members of a plugin's resource type back into that type.
        token: The gateway token, given to agents as every LLM's ``api_key``.
    """

    def __init__(self, fetch: Fetch, plugins: PluginManager, token: str | None) -> None:
        self._fetch = fetch
        self._plugins = plugins
        self.token = token
        self._sets: dict[str, dict[str, Resource]] = {}
        self._latest: tuple[float, dict[str, Resource]] | None = None

    async def for_attempt(
        self, resources_id: str | None, rollout_id: str, attempt_id: str
    ) -> tuple[dict[str, Resource], list[str]]:
        """The attempt's resources, and the flush URLs of the gateways among its LLMs.

        Raises:
            AgentError: The rollout names a set the store no longer has.
        """
        if resources_id is not None:
            cached = self._sets.get(resources_id)
            if cached is None:
                try:
                    update = await self._fetch(resources_id)
                except NotFoundError as exc:
                    raise AgentError(f"the rollout's resources {resources_id!r} are gone") from exc
                cached = self._upgraded(update)
                self._sets[resources_id] = cached
        else:  # the latest set: re-read at most once a second
            now = time.monotonic()
            if self._latest is None or now - self._latest[0] > 1.0:
                self._latest = (now, self._upgraded(await self._fetch(None)))
            cached = self._latest[1]
        resources = {
            name: value.for_attempt(rollout_id, attempt_id, api_key=self.token)
            if isinstance(value, LLM)
            else value
            for name, value in cached.items()
        }
        return resources, _flush_urls(cached, rollout_id, attempt_id)

    def _upgraded(self, update: ResourcesUpdate | None) -> dict[str, Resource]:
        """The set's members, those of a plugin's type the store kept generic in its class."""
        return {} if update is None else self._plugins.upgrade_resources(update.resources)


def _flush_urls(resources: dict[str, Resource], rollout_id: str, attempt_id: str) -> list[str]:
    """The flush URLs of the gateways among the resources' LLM endpoints."""
    from agl.gateway._paths import flush_url

    urls = {
        flush_url(value.endpoint, rollout_id, attempt_id)
        for value in resources.values()
        if isinstance(value, LLM)
    }
    return sorted(url for url in urls if url is not None)
