"""Rollouts in flight across steps: launch groups of rollouts, take those that finish first.

A :class:`RolloutStream` is what :meth:`agl.AlgorithmContext.run_rollouts` waits on (launch
one batch, take all of it), and what the asynchronous training loop keeps running between
updates (``LoopSettings(max_staleness=k)``): several steps' rollouts are launched ahead, and
each step takes the groups (the ``n`` samples of one task) that finished first, oldest launched
first, so one long rollout does not hold up the step. A group is taken whole: a group baseline
needs all of its samples.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

from pydantic import JsonValue

from agl._errors import InvalidInputError
from agl._results import RolloutResult, fetch_results
from agl._rollouts import RolloutConfig, RolloutMode, RolloutRequest, RolloutStatus

if TYPE_CHECKING:
    from agl.store._base import Store

__all__ = ["Gateways", "Progress", "ProgressBar", "RolloutStream", "StreamContext"]

_POLL_SECONDS = 0.2
"""How long one wait on the store lasts before the stream looks at its deadline again."""


class ProgressBar(Protocol):
    """One bar of rollouts, advanced as each finishes."""

    def advance(self, result: RolloutResult) -> None:
        """One more rollout finished."""


class Progress(Protocol):
    """Opens a progress bar of ``total`` rollouts labelled ``label``."""

    def __call__(self, label: str, total: int) -> AbstractContextManager[ProgressBar]: ...


class Gateways(Protocol):
    """The run's gateways (the trainer starts one per set of upstreams, on first use)."""

    async def start(self, upstreams: list[str], enforce_resources: bool) -> str:
        """Start (or reuse) a gateway in front of ``upstreams``; return its endpoint template."""
        ...

    async def flush(self) -> None:
        """Return once every call the gateways recorded so far is in the store."""


class StreamContext(Protocol):
    """What a stream needs of the run's context (:class:`agl.AlgorithmContext` has it all)."""

    @property
    def store(self) -> Store: ...
    @property
    def rollout_config(self) -> RolloutConfig: ...
    @property
    def resources_id(self) -> str | None: ...
    @property
    def progress(self) -> Progress: ...
    @property
    def gateways(self) -> Gateways | None: ...
    @property
    def totals(self) -> dict[str, int]: ...


class RolloutStream:
    """Groups of rollouts launched on a context's store, taken back as they finish.

    Args:
        ctx: The run's context (its store, gateways, progress bars and totals).
    """

    def __init__(self, ctx: StreamContext) -> None:
        self._ctx = ctx
        self._groups: list[list[str]] = []  # launched and not taken, in launch order
        self._pending: set[str] = set()  # launched and not finished
        self._finished: dict[str, RolloutResult] = {}

    async def launch(
        self,
        tasks: Sequence[JsonValue],
        *,
        mode: RolloutMode = "train",
        n: int = 1,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        group_prefix: str | None = None,
    ) -> list[str]:
        """Enqueue ``n`` rollouts per task (one group per task); return their ids, in order.

        Each rollout's metadata holds ``task_index`` and ``sample``, and with ``group_prefix``
        a ``group_id`` (``<prefix>-task<i>``) that tells its group apart from the same task's
        groups of other batches.
        """
        if n < 1:
            raise InvalidInputError(f"n must be at least 1, got {n}", field="n", value=n)
        ctx = self._ctx
        requests = []
        for index, task in enumerate(tasks):
            extra: dict[str, JsonValue] = {"task_index": index}
            if group_prefix is not None:
                extra["group_id"] = f"{group_prefix}-task{index}"
            requests += [
                RolloutRequest(
                    input=task,
                    mode=mode,
                    config=config or ctx.rollout_config,
                    resources_id=resources_id or ctx.resources_id,
                    metadata={**(metadata or {}), **extra, "sample": sample},
                )
                for sample in range(n)
            ]
        rollouts = await ctx.store.enqueue_rollouts(requests)
        ids = [rollout.rollout_id for rollout in rollouts]
        self._groups += [ids[start : start + n] for start in range(0, len(ids), n)]
        self._pending.update(ids)
        return ids

    async def take(
        self, groups: int | None = None, *, label: str, timeout: float | None = None
    ) -> list[RolloutResult]:
        """Wait until ``groups`` groups (all waiting ones if None) have finished; return their
        results, oldest launched group first, each group's samples in order.

        ``timeout`` bounds the wait (seconds): then the unfinished rollouts of as many of the
        oldest unfinished groups as are still needed are cancelled (they come back with
        status ``cancelled``), so a step never hangs. Shows a progress bar.
        """
        if timeout is not None and timeout <= 0:
            raise InvalidInputError(
                f"timeout must be positive, got {timeout}", field="timeout", value=timeout
            )
        wanted = len(self._groups) if groups is None else min(groups, len(self._groups))
        deadline = None if timeout is None else time.monotonic() + timeout
        total = sum(len(group) for group in self._groups[:wanted])
        shown = 0
        with self._ctx.progress(label, total) as bar:
            for result in self._finished.values():
                if shown < total:
                    bar.advance(result)
                    shown += 1
            while self._complete() < wanted:
                if deadline is not None and time.monotonic() >= deadline:
                    await self._cancel_oldest(wanted)
                    deadline = None
                left = _POLL_SECONDS if deadline is None else deadline - time.monotonic()
                for result in await self._wait(max(0.0, min(left, _POLL_SECONDS))):
                    if shown < total:
                        bar.advance(result)
                        shown += 1
        taken: list[RolloutResult] = []
        kept: list[list[str]] = []
        count = 0
        for group in self._groups:
            if count < wanted and all(rollout_id in self._finished for rollout_id in group):
                taken += [self._finished.pop(rollout_id) for rollout_id in group]
                count += 1
            else:
                kept.append(group)
        self._groups = kept
        self._count(taken)
        return taken

    # --- helpers ----------------------------------------------------------------------------

    def _complete(self) -> int:
        return sum(all(rollout_id in self._finished for rollout_id in g) for g in self._groups)

    async def _wait(self, seconds: float) -> list[RolloutResult]:
        """Wait up to ``seconds`` for launched rollouts to finish; return those that did."""
        ctx = self._ctx
        done = await ctx.store.wait_for_rollouts(sorted(self._pending), timeout=seconds)
        if not done:
            return []
        if ctx.gateways is not None:
            # The gateway records calls on its own schedule: make sure the finished
            # rollouts' calls are in the store before reading them.
            await ctx.gateways.flush()
        results = await fetch_results(ctx.store, done)
        for result in results:
            self._finished[result.rollout.rollout_id] = result
            self._pending.discard(result.rollout.rollout_id)
        return results

    async def _cancel_oldest(self, wanted: int) -> None:
        """Cancel the unfinished rollouts of the oldest groups until ``wanted`` groups are
        finished or cancelled. Cancelling finishes each rollout at once; a runner still on one
        is told at its next heartbeat, and what it sends later is ignored."""
        ready = self._complete()
        for group in self._groups:
            if ready >= wanted:
                break
            unfinished = [rollout_id for rollout_id in group if rollout_id in self._pending]
            if not unfinished:
                continue
            for rollout_id in unfinished:
                # One that finished meanwhile (not yet collected) keeps its outcome: only the
                # rollouts this cancel stopped are counted as past the timeout.
                stopped = await self._ctx.store.cancel_rollout(rollout_id)
                if stopped.status == RolloutStatus.CANCELLED:
                    self._ctx.totals["timed_out"] += 1
            ready += 1

    def _count(self, results: list[RolloutResult]) -> None:
        totals = self._ctx.totals
        totals["rollouts"] += len(results)
        totals["succeeded"] += sum(result.succeeded for result in results)
        totals["cancelled"] += sum(result.status == "cancelled" for result in results)
        totals["failed"] += sum(result.status == "failed" for result in results)
        totals["retried"] += sum(result.retried for result in results)
