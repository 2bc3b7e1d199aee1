"""A store that does nothing on the hot calls, served by agl's own server stack: the limit the
HTTP layer puts on a store (``versus.py``'s "bare HTTP layer" side).

``add_spans`` returns sequence ids without storing, ``dequeue_rollouts`` answers ``limit``
copies of one claim made at start-up, ``update_attempt`` answers that claim's attempt. Every
other call is the memory store's. The server still parses and validates each request and
builds each answer, as it does for a real store.

Used by ``versus.py`` (its "bare HTTP layer" side) and ``store_single.py --bare``.
Run: ``python benchmarks/_null_store.py PORT`` (loopback only).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from agl import Attempt, AttemptStatus, Claim, RolloutRequest, Span
from agl.store import MemoryStore
from agl.store._serve import serve


class NullStore(MemoryStore):
    """The memory store, with the single-request calls answered without doing anything."""

    _claim: Claim

    async def prime(self) -> None:
        """Make the one claim every dequeue answers with."""
        await super().enqueue_rollouts([RolloutRequest(input="null")])
        [self._claim] = await super().dequeue_rollouts(worker_id="null")

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        return list(range(1, len(spans) + 1))

    async def dequeue_rollouts(
        self,
        limit: int = 1,
        worker_id: str | None = None,
        wait: float = 0.0,
        *,
        request_id: str | None = None,
    ) -> list[Claim]:
        return [self._claim] * limit

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus | None = None,
        heartbeat: bool = True,
        reason: str | None = None,
    ) -> Attempt:
        return self._claim.attempt


def serve_null(port: int) -> None:
    """Serve a primed :class:`NullStore` on loopback until interrupted."""
    store = NullStore()
    asyncio.run(store.prime())
    serve(store, port=port, log_level="warning", dashboard=False)


def main() -> None:
    serve_null(int(sys.argv[1]))


if __name__ == "__main__":
    main()
