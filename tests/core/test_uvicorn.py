"""Half-sent requests against ``agl store serve`` and ``agl gateway serve``, as processes.

A client that sends nothing, sends its headers a byte at a time or stops part way through its
body used to hold its connection (and, for a body, the handler) for ever; now the headers have
``--header-timeout`` seconds from the first byte and the body ``--body-timeout`` seconds between
reads, and a request that misses either gets a 408 and a closed connection. A slow body that
keeps coming is served as any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

import agl
from agl import RolloutRequest
from agl._serving._uvicorn import deadline_protocol
from agl.testing.ports import free_port
from agl.testing.processes import Child, Processes

pytestmark = pytest.mark.anyio

TIMEOUTS = ("--header-timeout", "1", "--body-timeout", "1")


async def _exchange(port: int, pieces: list[bytes], pause: float) -> bytes:
    """Send ``pieces`` ``pause`` seconds apart (stopping if the server hangs up) while reading
    what the server sends until it closes (at most 20 s)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    received = bytearray()

    async def read() -> None:
        while chunk := await reader.read(65536):
            received.extend(chunk)

    reading = asyncio.create_task(read())
    try:
        for i, piece in enumerate(pieces):
            if i:
                await asyncio.sleep(pause)
            if reading.done():
                break
            try:
                writer.write(piece)
                await writer.drain()
            except ConnectionError:
                break
        with contextlib.suppress(ConnectionError):  # a refused write ended the connection
            await asyncio.wait_for(reading, 20)
        return bytes(received)
    finally:
        writer.close()


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


async def _check_deadlines(
    port: int, post_path: str, post_body: bytes, slow_status: int, child: Child
) -> None:
    head = (
        f"POST {post_path} HTTP/1.1\r\nhost: agl\r\nconnection: close\r\n"
        "content-type: application/json\r\n"
    )
    full = f"{head}content-length: {len(post_body)}\r\n\r\n".encode() + post_body
    cut = len(full) - len(post_body) + 3  # headers, and the body's first 3 bytes
    silent, headers, dribbled, stalled, slow = await asyncio.gather(
        _exchange(port, [], 0),
        _exchange(port, [b"GET /health HTTP/1.1\r\nhost: agl\r\n"], 0),
        # a byte every 0.25 s: each read is on time, the headers are not
        _exchange(port, [bytes([b]) for b in b"GET /health HTTP/1.1\r\nhost: agl\r\n"], 0.25),
        _exchange(port, [full[:cut]], 0),
        # the whole body over 2 s, a part every 0.4 s: slow, never stalled
        _exchange(port, [full[:cut], *(full[i : i + 8] for i in range(cut, len(full), 8))], 0.4),
    )
    assert silent == b""  # it sent nothing: closed without a word
    for reply in (headers, dribbled):
        assert _status(reply) == 408, reply
        assert reply.endswith(b"the request's headers did not all arrive within 1 s\n"), reply
    assert _status(stalled) == 408, stalled
    assert stalled.endswith(b"no part of the request's body arrived for 1 s\n"), stalled
    assert _status(slow) == slow_status, slow
    # the server goes on answering
    ok = await _exchange(
        port, [b"GET /health HTTP/1.1\r\nhost: agl\r\nconnection: close\r\n\r\n"], 0
    )
    assert _status(ok) == 200, ok
    assert "no part of the request's body arrived for 1 s" in child.log()


@pytest.mark.timeout(120)
async def test_the_store_server_answers_half_sent_requests_with_a_408(
    processes: Processes, tmp_path: Path
) -> None:
    port = free_port()
    child = await processes.store_server(
        "store", db=f"sqlite:///{tmp_path / 'agl.db'}", port=port, options=TIMEOUTS
    )
    body = json.dumps({"requests": [{"input": {"task": 1}}]}).encode()
    await _check_deadlines(port, "/v1/rollouts/enqueue", body, 200, child)


@pytest.mark.timeout(120)
async def test_the_gateway_answers_half_sent_requests_with_a_408(
    processes: Processes, tmp_path: Path
) -> None:
    store_port, port = free_port(), free_port()
    await processes.store_server("store", db=f"sqlite:///{tmp_path / 'agl.db'}", port=store_port)
    child = await processes.gateway_server(
        "gateway",
        upstreams=[f"http://127.0.0.1:{free_port()}/v1"],  # nothing there: the slow call fails
        store=f"http://127.0.0.1:{store_port}",
        port=port,
        options=TIMEOUTS,
    )
    async with agl.open_store(f"http://127.0.0.1:{store_port}") as store:
        await store.enqueue_rollouts([RolloutRequest(input={"task": 1})])
        [claim] = await store.dequeue_rollouts(1, worker_id="test")
    ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    path = "/rollout/{}/attempt/{}/v1/chat/completions".format(*ids)
    await _check_deadlines(port, path, body, 502, child)  # read, sent on: no upstream there


@pytest.mark.parametrize(("header", "body"), [(0.0, 1.0), (1.0, -1.0), (float("nan"), 1.0)])
def test_deadlines_must_be_positive(header: float, body: float) -> None:
    with pytest.raises(ValueError, match="must be > 0 seconds"):
        deadline_protocol(header, body)
