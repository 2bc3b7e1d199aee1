"""A run's metrics in its store: each logged step also goes there, as one :class:`MetricsRow`.

So a dashboard reading only the store (over its HTTP API) can draw a run's reward and loss
curves. The trainer wraps its :class:`~agl._train._metrics.MetricsLogger` in a
:class:`StoreMetrics`;
``ctx.log`` then writes the files as before and queues the step for the store.

``ctx.log`` is synchronous and runs inside the training loop (on the event loop, or in a
worker thread of an algorithm), so it never waits for the store: rows go to a background task
on the trainer's event loop, which sends whatever has queued up in one ``add_metrics`` call.
Training never fails for the store's sake: a store that refuses rows or cannot be reached gets
one warning a run, and training goes on (``metrics.jsonl`` has every step either way).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
import time
from collections.abc import Mapping
from typing import Any

from agl._metric_rows import MetricsRow
from agl._train._context import MetricsSink
from agl.store._base import Store

__all__ = ["StoreMetrics"]

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 10.0
"""How long :meth:`StoreMetrics.aclose` waits for the last rows to reach the store."""


class StoreMetrics:
    """A :class:`~agl._train._context.MetricsSink` that logs to ``inner`` and sends each step to
    ``store`` as a :class:`~agl.MetricsRow` of ``run``, in the background.

    Build it on the event loop that is to send the rows (it starts its sender there); call
    :meth:`aclose` on that loop when the run ends.

    Args:
        inner: Where steps are logged first (files, console); its errors are the caller's.
        store: The run's store.
        run: The run's name in the store (the trainer's: its run directory's name).
    """

    def __init__(self, inner: MetricsSink, store: Store, run: str) -> None:
        self._inner = inner
        self._store = store
        self.run = run
        self._loop = asyncio.get_running_loop()
        self._pending: list[MetricsRow] = []
        self._wake = asyncio.Event()
        self._closing = False
        self._warned = False
        self._sender = self._loop.create_task(self._send(), name="agl-metrics-to-store")

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Log the step with ``inner``, then queue it for the store (never waits for it)."""
        self._inner.log(step, metrics)
        try:
            values = {name: float(value) for name, value in metrics.items()}
            row = MetricsRow(
                run=self.run, step=operator.index(step), time=time.time(), values=values
            )
        except (TypeError, ValueError) as exc:  # a negative step, say: the files have it
            self._warn(f"step {step} cannot be stored: {exc}")
            return
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._push(row)
        else:  # logged from another thread: hand the row to the loop's thread
            with contextlib.suppress(RuntimeError):  # that loop has ended: the run is over
                self._loop.call_soon_threadsafe(self._push, row)

    def rewind(self, step: int) -> list[dict[str, Any]]:
        """Rewind ``inner``. The store keeps its rows: the steps logged again are added again,
        and the last row of a step is the one that counts."""
        return self._inner.rewind(step)

    async def aclose(self, timeout: float = FLUSH_SECONDS) -> None:
        """Send what is still queued (waiting at most ``timeout`` seconds), then stop."""
        self._closing = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._sender), timeout)
        except asyncio.CancelledError:
            self._sender.cancel()  # the run is being torn down: leave no task behind
            raise
        except TimeoutError:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender
            self._warn(f"the store did not take the last steps within {timeout:g} s")

    def _push(self, row: MetricsRow) -> None:
        self._pending.append(row)
        self._wake.set()

    async def _send(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    await self._store.add_metrics(batch)
                except Exception as exc:  # training never fails for the store's sake
                    self._warn(f"{type(exc).__name__}: {exc}")
            if self._closing:
                return

    def _warn(self, reason: str) -> None:
        if self._warned:
            return
        self._warned = True
        logger.warning(
            "run %r: metrics are not all reaching the store %s (%s); training goes on, and "
            "metrics.jsonl in the run directory has every step (said once a run)",
            self.run,
            self._store.url,
            reason,
        )
