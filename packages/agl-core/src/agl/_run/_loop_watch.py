"""Notice when an agent holds a runner's event loop, and say once which one, where, how long.

A runner's async agents share its event loop: one that blocks it (``time.sleep``, a
synchronous HTTP call, building a client that loads a CA bundle, CPU-bound work inside
``async def``) stalls the runner's other rollouts, its claims and its reports. Its heartbeats
go on (they have a thread of their own, :mod:`agl._run._heartbeats`), so without this nothing
would tell.

The loop ticks every quarter of the threshold, and a watcher thread checks the ticks as often.
When the loop has not ticked for longer than the threshold (:data:`BLOCKED_LOOP_SECONDS` by
default) it is *held*: until it ticks again the watcher samples which rollout's task is running
on the loop and the line the loop's thread is at. When the loop comes back, one warning covers
the whole stretch: the agent, the rollouts, where, and for how long. A stretch that lasts
:data:`STILL_HELD_AFTER` thresholds is reported then instead, so a loop that never comes back
is reported too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import sysconfig
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agl._rollouts import Claim

__all__ = ["BLOCKED_LOOP_SECONDS", "LoopWatch"]

logger = logging.getLogger("agl._run._runner")

BLOCKED_LOOP_SECONDS = 1.0
"""How long a runner's event loop may go without a turn before the runner says who held it."""

STILL_HELD_AFTER = 10
"""A stretch still going on after this many thresholds is reported without waiting its end."""

_MAX_NAMED = 5
"""Rollouts a warning names at most."""

_LIBRARY_DIRS = tuple(
    {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {os.path.dirname(os.path.abspath(__file__))}
)


@dataclass
class _Stretch:
    """One stretch of the loop held: what the watcher saw while it lasted."""

    since_tick: float  # the loop's last tick before it
    rollouts: dict[str, None] = field(default_factory=dict)  # ordered set
    others: dict[str, None] = field(default_factory=dict)  # tasks not running an attempt
    places: dict[str, None] = field(default_factory=dict)
    reported: bool = False


class LoopWatch:
    """Watch the running event loop for stretches held longer than ``threshold`` seconds.

    Args:
        agent: The agent's name, for the warning.
        claim_of: The claim a task of the loop runs, None for other tasks (called from the
            watcher thread, so it must be safe there: ``dict.get`` is).
        threshold: Seconds without a turn of the loop that count as held.
    """

    def __init__(
        self,
        agent: str,
        claim_of: Callable[[asyncio.Task[Any]], Claim | None],
        threshold: float = BLOCKED_LOOP_SECONDS,
    ) -> None:
        self._agent = agent
        self._claim_of = claim_of
        self._threshold = threshold
        self._period = threshold / 4
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._timer: asyncio.TimerHandle | None = None
        self._ticked = time.monotonic()
        self._gap = 0.0  # seconds between the last two ticks the loop made late
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching the running loop (call it on that loop)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._tick()
        self._thread = threading.Thread(target=self._watch, name="agl-loop-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop watching (call it on the watched loop); reports a stretch still unreported."""
        if self._timer is not None:
            self._timer.cancel()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _tick(self) -> None:
        # A stretch began between the last tick and the one due a period later: the gap
        # minus half a period is within half a period of its length.
        now = time.monotonic()
        if now - self._ticked > self._threshold:
            self._gap = now - self._ticked
        self._ticked = now
        assert self._loop is not None
        self._timer = self._loop.call_later(self._period, self._tick)

    # --- the watcher thread -----------------------------------------------------------------

    def _watch(self) -> None:
        held: _Stretch | None = None
        while not self._stop.wait(self._period):
            ticked = self._ticked
            if held is not None and ticked != held.since_tick:  # the loop came back
                if not held.reported:
                    self._report(held, self._gap - self._period / 2, still=False)
                held = None
            behind = time.monotonic() - ticked
            if held is None and behind > self._threshold:
                held = _Stretch(since_tick=ticked)
            if held is None:
                continue
            self._sample(held)
            if not held.reported and behind >= STILL_HELD_AFTER * self._threshold:
                self._report(held, behind - self._period / 2, still=True)
        if held is not None and not held.reported and self._ticked != held.since_tick:
            self._report(held, self._gap - self._period / 2, still=False)

    def _sample(self, held: _Stretch) -> None:
        task = None
        with contextlib.suppress(Exception):  # the loop may be between tasks or closing
            task = asyncio.current_task(self._loop)
        claim = self._claim_of(task) if task is not None else None
        if claim is not None:
            held.rollouts[claim.rollout.rollout_id] = None
        else:
            held.others[task.get_name() if task is not None else "a callback"] = None
        frame = sys._current_frames().get(self._loop_thread)
        if frame is not None:
            held.places[_where(frame)] = None

    def _report(self, held: _Stretch, seconds: float, *, still: bool) -> None:
        held.reported = True
        if held.rollouts:
            rollouts = list(held.rollouts)
            named = ", ".join(rollouts[:_MAX_NAMED])
            if len(rollouts) > _MAX_NAMED:
                named += f" and {len(rollouts) - _MAX_NAMED} more"
            who = f"agent {self._agent!r} (rollouts: {named})"
            advice = (
                "Await slow work instead of blocking (asyncio.to_thread for a blocking call), "
                "or make the agent a plain function: the runner runs those on threads"
            )
        else:  # the loop is shared with other code (a trainer's, say)
            who = f"code outside the agent ({', '.join(list(held.others)[:_MAX_NAMED])})"
            advice = "Rollouts waited for it"
        logger.warning(
            "%s %s the runner's event loop for about %.1f s%s, at %s. The runner's other work "
            "waited meanwhile; its heartbeats did not (they have a thread of their own). %s",
            who,
            "has held" if still else "held",
            max(seconds, self._threshold),
            " and still does" if still else "",
            "; ".join(list(held.places)[:3]) or "an unknown place",
            advice,
        )


def _where(frame: types.FrameType) -> str:
    """The innermost line of the caller's own code in ``frame``'s stack, and the innermost
    line of all when that is in a library."""
    inner = _line(frame)
    outer: types.FrameType | None = frame
    while outer is not None and outer.f_code.co_filename.startswith(_LIBRARY_DIRS):
        outer = outer.f_back
    if outer is None or outer is frame:
        return inner
    return f"{_line(outer)}, inside {inner}"


def _line(frame: types.FrameType) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
