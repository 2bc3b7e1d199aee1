"""The blocked-loop watch: one warning a stretch held past the threshold, saying who and where."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from agl._run._loop_watch import STILL_HELD_AFTER, LoopWatch

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "event loop" in r.message]


async def watched(caplog: pytest.LogCaptureFixture, threshold: float, *holds: float) -> list[str]:
    """Hold the loop for each of ``holds`` seconds in turn, letting it run between them."""
    watch = LoopWatch("solver", {}.get, threshold)
    with caplog.at_level(logging.WARNING, logger="agl"):
        watch.start()
        try:
            for seconds in holds:
                time.sleep(seconds)  # noqa: ASYNC251 - the hold under watch
                await asyncio.sleep(threshold)  # a few turns of the loop: the stretch ends
        finally:
            watch.close()
    assert not [t for t in threading.enumerate() if t.name == "agl-loop-watch"]
    return warnings(caplog)


async def test_short_holds_pass_unremarked(caplog: pytest.LogCaptureFixture) -> None:
    assert await watched(caplog, 1.0, 0.1, 0.1, 0.1) == []


async def test_each_stretch_held_past_the_threshold_is_reported_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    found = await watched(caplog, 0.4, 1.5, 0.05, 1.2)
    assert len(found) == 2, found
    for line, seconds in zip(found, (1.5, 1.2), strict=True):
        # no rollout was running: the test's own task held it
        assert line.startswith("code outside the agent (Task-"), line
        assert "test_loop_watch.py" in line, line
        assert "in watched" in line, line
        held = float(line.split("for about ")[1].split(" s")[0])
        assert seconds - 0.2 <= held <= seconds + 1.0, line  # a busy machine adds some


async def test_a_stretch_that_goes_on_is_reported_while_it_lasts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    threshold = 0.1
    watch = LoopWatch("solver", {}.get, threshold)
    with caplog.at_level(logging.WARNING, logger="agl"):
        watch.start()
        try:
            deadline = time.monotonic() + 30
            while not warnings(caplog):  # the loop never gets a turn meanwhile
                assert time.monotonic() < deadline, "no report while the loop was held"
                time.sleep(0.05)  # noqa: ASYNC251 - still holding the loop
            held_for = time.monotonic() - deadline + 30
            time.sleep(0.5)  # noqa: ASYNC251 - and a little more
            await asyncio.sleep(0.5)
        finally:
            watch.close()
    [line] = warnings(caplog)  # the stretch's end adds nothing
    assert "has held the runner's event loop for about" in line
    assert "and still does" in line
    assert held_for >= STILL_HELD_AFTER * threshold
