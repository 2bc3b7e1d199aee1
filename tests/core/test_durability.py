"""Durability: what a store acknowledged survives a ``kill -9`` of the process that wrote it.

Both tests stream span batches as fast as they can, record which batches the store
acknowledged (the call returned), SIGKILL the writing process mid-stream, reopen the same
SQLite file and check that every acknowledged span is there, exactly once, with the sequence id
it was acknowledged with. The batch that was in flight at the kill is either wholly stored or
not at all; sending it again stores it exactly once. The assertions only rely on acknowledged
data, never on where exactly the kill landed.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

import agl
from agl import Span
from agl.store._sqlite import SQLiteStore
from agl.testing.ports import free_port
from agl.testing.processes import child_env

BATCH_SIZE = 20
MIN_ACKED_BATCHES = 5
STREAM_SECONDS = 1.0


def make_batch(rollout_id: str, attempt_id: str, index: int) -> list[Span]:
    """Batch ``index`` of the stream: the same spans (ids included) every time it is made."""
    return [
        Span(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            trace_id=f"{index + 1:032x}",
            span_id=f"{index + 1:08x}{position + 1:08x}",
            name=f"batch {index} span {position}",
            start_time_unix_nano=1_700_000_000_000_000_000 + index * 1000 + position,
            end_time_unix_nano=1_700_000_000_000_000_500 + index * 1000 + position,
            attributes={"batch": index, "position": position, "payload": "x" * 200},
        )
        for position in range(BATCH_SIZE)
    ]


def end_process(process: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Kill a child process we started, if it still runs, and reap it."""
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)


def check_after_crash(
    spans: list[Span],
    acked: dict[int, list[int]],
    in_flight: int,
    rollout_id: str,
    attempt_id: str,
) -> bool:
    """Check what a reopened store holds; return whether the in-flight batch was stored."""
    assert acked, "no batch was acknowledged before the kill"
    assert sorted(acked) == list(range(len(acked)))  # sent one after another
    assert in_flight == len(acked)

    sequence_ids = [span.sequence_id for span in spans]
    assert sequence_ids == list(range(1, len(spans) + 1)), "sequence ids must be 1, 2, 3, ..."
    keys = [(span.trace_id, span.span_id) for span in spans]
    assert len(set(keys)) == len(keys), "a span is stored twice"
    assert {span.rollout_id for span in spans} == {rollout_id}
    assert {span.attempt_id for span in spans} == {attempt_id}

    # Every acknowledged span is there, unchanged, with the sequence id it was acknowledged with.
    acked_ids = [sequence_id for index in sorted(acked) for sequence_id in acked[index]]
    assert acked_ids == list(range(1, len(acked_ids) + 1))
    stored = {(span.trace_id, span.span_id): span for span in spans}
    for index, sequence_ids_of_batch in acked.items():
        sent = make_batch(rollout_id, attempt_id, index)
        for span, sequence_id in zip(sent, sequence_ids_of_batch, strict=True):
            found = stored.get((span.trace_id, span.span_id))
            assert found is not None, f"acknowledged span {span.name!r} is lost"
            assert found == span.model_copy(update={"sequence_id": sequence_id})

    # The batch in flight at the kill is all or nothing; nothing after it was ever sent.
    assert len(spans) in (len(acked_ids), len(acked_ids) + BATCH_SIZE)
    in_flight_stored = len(spans) > len(acked_ids)
    if in_flight_stored:
        names = [span.name for span in spans[len(acked_ids) :]]
        assert names == [span.name for span in make_batch(rollout_id, attempt_id, in_flight)]
    return in_flight_stored


async def resend_and_check(
    store: agl.Store, acked: dict[int, list[int]], in_flight: int, rollout_id: str, attempt_id: str
) -> None:
    """Send the in-flight batch and an acknowledged one again: nothing is stored twice."""
    before = await store.query_spans(rollout_id)
    expected_total = (len(acked) + 1) * BATCH_SIZE
    again = await store.add_spans(make_batch(rollout_id, attempt_id, in_flight))
    assert again == list(range(expected_total - BATCH_SIZE + 1, expected_total + 1))
    if len(before) == expected_total:  # it had been stored: the same ids come back
        assert again == [span.sequence_id for span in before[-BATCH_SIZE:]]
    last = max(acked)
    repeated = await store.add_spans(make_batch(rollout_id, attempt_id, last))
    assert repeated == acked[last]
    # Twice more, for good measure.
    await store.add_spans(make_batch(rollout_id, attempt_id, in_flight))
    await store.add_spans(make_batch(rollout_id, attempt_id, 0))

    after = await store.query_spans(rollout_id)
    assert len(after) == expected_total
    assert [span.sequence_id for span in after] == list(range(1, expected_total + 1))
    assert len({(span.trace_id, span.span_id) for span in after}) == expected_total
    assert after[: len(before)] == before


# --- the HTTP server, killed mid-stream ------------------------------------------------------


@contextmanager
def serve(db: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``python -m agl store serve`` on ``db``; kill it on the way out if it still runs."""
    with log.open("ab") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agl",
                "store",
                "serve",
                "--db",
                f"sqlite:///{db}",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=child_env(),
        )
    try:
        wait_until_serving(process, f"http://127.0.0.1:{port}", log)
        yield process
    finally:
        end_process(process)


def wait_until_serving(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    pytest.fail(f"the server did not start within 60 s:\n{log.read_text()}")


async def stream_until_killed(
    url: str, process: subprocess.Popen[bytes]
) -> tuple[str, str, dict[int, list[int]], int]:
    """Claim a rollout, then stream batches until the server dies under them.

    Returns the rollout and attempt ids, the acknowledged batches (index -> sequence ids) and
    the index of the batch that failed: the one in flight when the server was killed.
    """
    enough = threading.Event()

    def killer() -> None:
        started = time.monotonic()
        enough.wait(timeout=60)
        time.sleep(max(0.0, STREAM_SECONDS - (time.monotonic() - started)))
        process.send_signal(signal.SIGKILL)

    async with agl.open_store(url, retries=2, timeout=10) as store:
        [rollout] = await store.enqueue_rollouts([agl.RolloutRequest(input={"task": "stream"})])
        [claimed] = await store.dequeue_rollouts(worker_id="streamer")
        rollout_id, attempt_id = rollout.rollout_id, claimed.attempt.attempt_id
        assert claimed.rollout.rollout_id == rollout_id

        thread = threading.Thread(target=killer, name="server-killer", daemon=True)
        thread.start()
        acked: dict[int, list[int]] = {}
        index = 0
        try:
            while True:
                try:
                    stored = await store.add_spans(make_batch(rollout_id, attempt_id, index))
                except agl.StoreUnavailableError:
                    return rollout_id, attempt_id, acked, index
                acked[index] = stored
                index += 1
                if index >= MIN_ACKED_BATCHES:
                    enough.set()
        finally:
            enough.set()
            await asyncio.to_thread(thread.join, 60)


def test_server_killed_mid_stream_loses_no_acknowledged_span(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    log = tmp_path / "server.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    with serve(db, port, log) as process:
        rollout_id, attempt_id, acked, in_flight = asyncio.run(stream_until_killed(url, process))
        assert process.wait(timeout=30) == -signal.SIGKILL
    assert len(acked) >= MIN_ACKED_BATCHES

    # Restarted on the same file (and port), the server has everything it acknowledged.
    with serve(db, port, log) as process:

        async def verify() -> bool:
            async with agl.open_store(url, timeout=10) as store:
                rollout = await store.get_rollout(rollout_id)
                assert rollout.status == agl.RolloutStatus.PREPARING
                assert rollout.latest_attempt_id == attempt_id
                [attempt] = await store.query_attempts(rollout_id)
                assert attempt.attempt_id == attempt_id
                assert attempt.worker_id == "streamer"
                spans = await store.query_spans(rollout_id)
                stored = check_after_crash(spans, acked, in_flight, rollout_id, attempt_id)
                await resend_and_check(store, acked, in_flight, rollout_id, attempt_id)
                assert (await store.statistics()).spans == (len(acked) + 1) * BATCH_SIZE
                return stored

        asyncio.run(verify())
        # SIGTERM stops it cleanly (uvicorn re-raises the signal once it has shut down): the
        # store is closed, so SQLite has checkpointed and removed its write-ahead log.
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) in (0, -signal.SIGTERM), log.read_text()
        assert not db.with_name(db.name + "-wal").exists()

    # And what the second server wrote is durable too, read straight from the file.
    async def reread() -> None:
        async with agl.open_store(f"sqlite:///{db}") as store:
            spans = await store.query_spans(rollout_id)
            assert [span.sequence_id for span in spans] == list(
                range(1, (len(acked) + 1) * BATCH_SIZE + 1)
            )

    asyncio.run(reread())
    assert "Traceback" not in log.read_text()


# --- SQLiteStore in a child process, killed mid-stream ---------------------------------------

CHILD = (
    "from __future__ import annotations\n"
    "import asyncio, sys\n"
    "from agl import RolloutRequest, Span\n"
    "from agl.store._sqlite import SQLiteStore\n"
    f"BATCH_SIZE = {BATCH_SIZE}\n"
    + inspect.getsource(make_batch)
    + """
async def main() -> None:
    store = SQLiteStore(sys.argv[1])
    [rollout] = await store.enqueue_rollouts([RolloutRequest(input={"task": "stream"})])
    [claimed] = await store.dequeue_rollouts(worker_id="child")
    print("CLAIMED", rollout.rollout_id, claimed.attempt.attempt_id, flush=True)
    rollout_id, attempt_id = rollout.rollout_id, claimed.attempt.attempt_id
    index = 0
    while True:
        stored = await store.add_spans(make_batch(rollout_id, attempt_id, index))
        print("ACK", index, *stored, flush=True)
        index += 1

asyncio.run(main())
"""
)


def test_sqlite_store_killed_mid_stream_loses_no_acknowledged_span(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    stderr_path = tmp_path / "child.err"
    with stderr_path.open("wb") as stderr:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(db)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=child_env(),
            text=True,
        )
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        assert first.startswith("CLAIMED "), f"{first!r}\n{stderr_path.read_text()}"
        _, rollout_id, attempt_id = first.split()
        lines: list[str] = []
        started = time.monotonic()
        while len(lines) < MIN_ACKED_BATCHES or time.monotonic() - started < STREAM_SECONDS:
            line = child.stdout.readline()
            assert line, f"the child stopped early:\n{stderr_path.read_text()}"
            lines.append(line)
        child.send_signal(signal.SIGKILL)  # mid-stream: the child writes without pause
        lines.extend(child.stdout.read().splitlines(keepends=True))
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        end_process(child)
        if child.stdout is not None:
            child.stdout.close()

    acked: dict[int, list[int]] = {}
    for line in lines:
        if not line.endswith("\n"):  # cut off by the kill: not an acknowledgement
            continue
        tag, index, *sequence_ids = line.split()
        assert tag == "ACK"
        acked[int(index)] = [int(sequence_id) for sequence_id in sequence_ids]
    in_flight = max(acked) + 1

    async def verify() -> None:
        async with SQLiteStore(db) as store:
            rollout = await store.get_rollout(rollout_id)
            assert rollout.status == agl.RolloutStatus.PREPARING
            assert rollout.latest_attempt_id == attempt_id
            spans = await store.query_spans(rollout_id)
            check_after_crash(spans, acked, in_flight, rollout_id, attempt_id)
            await resend_and_check(store, acked, in_flight, rollout_id, attempt_id)

    asyncio.run(verify())
