"""The gateway's view of the store: which attempts exist, and the LLM resource each call is for.

Both are asked once per attempt (and per resources version, host and model) and remembered, so
a call on the hot path reads no store.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from agl._errors import NotFoundError
from agl._ids import check_id
from agl._resources import LLM
from agl.store._base import Store

__all__ = ["Attempts", "served_here"]

logger = logging.getLogger(__name__)


class Attempts:
    """The attempts calls come for, and their LLM resources, as far as the store says.

    Args:
        store: The store the rollouts are in.
        enforce_resources: Whether a rollout with no resources of its own runs with the latest.
    """

    def __init__(self, store: Store, *, enforce_resources: bool = False) -> None:
        self.store = store
        self.enforce_resources = enforce_resources
        self._resources_ids: dict[tuple[str, str], str | None] = {}  # (rollout, attempt) ->
        # (resources id, Host the agent called, model it asked for) -> the LLM resource served
        # through this gateway
        self._llm_by_resources: dict[tuple[str, str, str], LLM | None] = {}

    async def check(self, rollout_id: str, attempt_id: str) -> str | None:
        """Make sure the store knows the rollout and attempt; return its resources id.

        Raises:
            InvalidInputError: an id that is no id (:mod:`agl._ids`), before any store read.
            NotFoundError: the store does not know the rollout or the attempt.
        """
        check_id(rollout_id, "rollout_id", segment=True)
        check_id(attempt_id, "attempt_id", segment=True)
        key = (rollout_id, attempt_id)
        if key in self._resources_ids:
            return self._resources_ids[key]
        rollout = await self.store.get_rollout(rollout_id)
        attempts = await self.store.query_attempts(rollout_id)
        if attempt_id not in {attempt.attempt_id for attempt in attempts}:
            raise NotFoundError(
                f"rollout {rollout_id!r} has no attempt {attempt_id!r}",
                field="attempt_id",
                value=attempt_id,
            )
        resources_id = rollout.resources_id
        if resources_id is None and self.enforce_resources:
            latest = await self.store.get_resources()
            resources_id = None if latest is None else latest.resources_id
        if len(self._resources_ids) > 100_000:
            self._resources_ids.clear()
        self._resources_ids[key] = resources_id
        return resources_id

    async def llm_for(
        self, body: dict[str, Any], resources_id: str | None, host: str
    ) -> LLM | None:
        """The rollout's LLM resource this call came through (see :func:`served_here`)."""
        if resources_id is None:
            return None
        asked = body.get("model")
        key = (resources_id, host, asked if isinstance(asked, str) else "")
        if key not in self._llm_by_resources:
            update = await self.store.get_resources(resources_id)
            llms = [r for r in (update.resources.values() if update else []) if isinstance(r, LLM)]
            self._llm_by_resources[key] = served_here(llms, host, key[2])
        return self._llm_by_resources[key]


def served_here(llms: list[LLM], host: str, asked: str) -> LLM | None:
    """The LLM resource an agent called this gateway through: the one whose endpoint names the
    host and port the call came to (agents call ``llm.endpoint``, so the two agree), and of
    several such, the one whose model the call asked for. A run may publish several LLMs (a
    frozen one called directly, or two models behind two gateways); when none names this host,
    the only LLM there is, else none (nothing is overridden)."""
    here = [llm for llm in llms if urlsplit(llm.endpoint).netloc == host]
    if here:
        return next((llm for llm in here if llm.model == asked), here[0])
    if len(llms) == 1:
        return llms[0]
    if llms:
        logger.warning(
            "enforce_resources: none of the run's LLM resources (%s) points at this gateway "
            "(called as %s); the call's model and sampling parameters are left as sent",
            ", ".join(llm.endpoint for llm in llms),
            host,
        )
    return None
