"""A store that does nothing, served as ``agl store serve`` serves a real one: the HTTP layer's
own limit for the single-request rows of ``store_single.py``."""

from __future__ import annotations

from collections.abc import Sequence

from agl import Attempt, AttemptStatus, Claim, Rollout, RolloutStatus, Span
from agl._serving._uvicorn import run
from agl.store._memory import MemoryStore
from agl.store._server import create_app


class NullStore(MemoryStore):
    """Answers a dequeue, a span and an attempt report at once, from canned objects."""

    def __init__(self) -> None:
        super().__init__()
        self._attempt = Attempt(
            rollout_id="ro-null",
            attempt_id="at-null",
            sequence=1,
            start_time=0.0,
            status=AttemptStatus.PREPARING,
        )
        rollout = Rollout(
            rollout_id="ro-null",
            input={"task": 0},
            status=RolloutStatus.PREPARING,
            enqueue_time=0.0,
        )
        self._claim = Claim(rollout=rollout, attempt=self._attempt)

    async def dequeue_rollouts(
        self,
        limit: int = 1,
        worker_id: str | None = None,
        wait: float = 0.0,
        *,
        request_id: str | None = None,
    ) -> list[Claim]:
        return [self._claim]

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        return [1] * len(spans)

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus | None = None,
        heartbeat: bool = True,
        reason: str | None = None,
    ) -> Attempt:
        return self._attempt


def serve_null(port: int) -> None:
    """Serve a :class:`NullStore` on loopback until interrupted."""
    app = create_app(NullStore(), dashboard=False)
    run(app, host="127.0.0.1", port=port, log_level="warning")
