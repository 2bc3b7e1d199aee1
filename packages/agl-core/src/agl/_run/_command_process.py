"""Run one command in a process group of its own: bounded output, a deadline, nothing left over.

An agent program starts helpers of its own (shells, language servers, sub-agents). Killing the
program alone would leave them running and holding its output pipes open, so the command
starts a new session (its own process group), and whatever way the run ends (the program
exits, the deadline passes, or the caller is cancelled: the runner's rollout timeout, a
runner stopping) the whole group is signalled: SIGTERM first on a deadline, with ``kill_grace``
seconds to exit, then SIGKILL for what is left. Output is read as it comes, and only the last
``output_limit`` bytes of each stream are kept, with the count of all bytes written.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Finished", "run_process"]

_READ_SIZE = 64 * 1024
_DRAIN_WAIT = 2.0
"""Seconds to wait for the pipes to close once the group is gone (a helper that left the
group may hold them open)."""


@dataclass(frozen=True)
class Finished:
    """How a process ended and the tail of what it wrote."""

    exit_code: int | None
    timed_out: bool
    stdout: bytes
    stderr: bytes
    stdout_bytes: int
    stderr_bytes: int
    duration: float


class _Tail:
    """The last ``limit`` bytes of a stream, and how many bytes it carried in all."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buffer = bytearray()
        self.total = 0

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_READ_SIZE):
            self.total += len(chunk)
            self.buffer += chunk
            if len(self.buffer) > self.limit:
                del self.buffer[: len(self.buffer) - self.limit]


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float | None,
    output_limit: int,
    kill_grace: float,
) -> Finished:
    """Run ``argv`` to its end or its deadline; its process group is gone when this returns.

    Raises:
        OSError: the program could not be started.
        asyncio.CancelledError: the caller was cancelled (the group is killed first).
    """
    start = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    out, err = _Tail(output_limit), _Tail(output_limit)
    readers = [
        asyncio.create_task(out.drain(process.stdout)),
        asyncio.create_task(err.drain(process.stderr)),
    ]
    timed_out = False
    try:
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except TimeoutError:
            timed_out = True
            _signal_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), kill_grace)
    except BaseException:  # cancelled: no grace, but leave nothing behind
        _signal_group(process.pid, signal.SIGKILL)
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(process.wait(), _DRAIN_WAIT)
        for reader in readers:
            reader.cancel()
        raise
    _signal_group(process.pid, signal.SIGKILL)  # the helpers that outlived the program
    await process.wait()
    _, pending = await asyncio.wait(readers, timeout=_DRAIN_WAIT)
    for reader in pending:
        reader.cancel()
    return Finished(
        exit_code=process.returncode,
        timed_out=timed_out,
        stdout=bytes(out.buffer),
        stderr=bytes(err.buffer),
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        duration=time.monotonic() - start,
    )


def _signal_group(pid: int, signum: int) -> None:
    """Signal the process group ``pid`` leads; fine if it is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)
