"""The HTTP store client when the connection fails: what it sends again, and what it never does.

A real store server on loopback, reached through a TCP relay that can drop a connection after
passing the request on (the server acts on the request, the client never hears the answer) or
answer 503 in its place (a commit in doubt). Every request is then sent again and carried out
once: spans are idempotent, and a dequeue or a batch of metrics rows carries a request id the
store answers a repeat by. A request that never reached the server is always sent again. A
503's ``Retry-After`` is read as seconds or an HTTP date, within the client's limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator

import pytest

import agl
from agl import RolloutRequest, Span
from agl.store._http_transport import MAX_RETRY_AFTER, retry_after
from agl.store._serve import StoreServer

pytestmark = pytest.mark.anyio


class Relay:
    """Relay TCP connections to a server; drop the next ``drop_answers`` answers instead."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.drop_answers = 0
        self.unavailable_answers = 0
        self.connections = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        try:
            yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        requests = asyncio.create_task(_pipe(reader, up_writer))
        try:
            while answer := await up_reader.read(65536):
                if self.drop_answers:
                    self.drop_answers -= 1
                    break  # the server has acted on the request; the client hears nothing
                if self.unavailable_answers:
                    self.unavailable_answers -= 1  # acted on, and answered as a commit in doubt
                    writer.write(_UNAVAILABLE)
                    await writer.drain()
                    break
                writer.write(answer)
                await writer.drain()
        finally:
            requests.cancel()
            await asyncio.gather(requests, return_exceptions=True)
            for each in (writer, up_writer):
                each.close()
                with contextlib.suppress(OSError):
                    await each.wait_closed()
            self._tasks.discard(task)


_UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"content-length: 2\r\nconnection: close\r\n\r\n{}"
)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()


@pytest.fixture
def server() -> Iterator[StoreServer]:
    with StoreServer("memory://") as running:
        yield running


async def claim(store: agl.Store) -> tuple[str, str]:
    await store.enqueue_rollouts([RolloutRequest(input="task")])
    [claimed] = await store.dequeue_rollouts()
    return claimed.rollout.rollout_id, claimed.attempt.attempt_id


async def test_a_lost_answer_to_add_spans_is_sent_again_and_stored_once(
    server: StoreServer,
) -> None:
    relay = Relay(int(server.url.rsplit(":", 1)[1]))
    async with (
        relay.serving() as url,
        agl.open_store(url) as store,
        agl.open_store(server.url) as direct,
    ):
        rollout_id, attempt_id = await claim(direct)
        first = Span.create(rollout_id=rollout_id, attempt_id=attempt_id, name="first")
        second = Span.create(rollout_id=rollout_id, attempt_id=attempt_id, name="second")
        assert await store.add_spans([first]) == [1]
        relay.drop_answers = 1
        assert await store.add_spans([first, second]) == [1, 2]
        assert relay.drop_answers == 0
        stored = await direct.query_spans(rollout_id)
        assert [(span.name, span.sequence_id) for span in stored] == [("first", 1), ("second", 2)]


async def test_a_lost_answer_to_dequeue_is_sent_again_and_claims_once(
    server: StoreServer,
) -> None:
    relay = Relay(int(server.url.rsplit(":", 1)[1]))
    async with (
        relay.serving() as url,
        agl.open_store(url, retries=3) as store,
        agl.open_store(server.url) as direct,
    ):
        [rollout] = await direct.enqueue_rollouts([RolloutRequest(input="task")])
        relay.drop_answers = 1
        [claim] = await store.dequeue_rollouts(worker_id="runner-1")
        assert relay.drop_answers == 0  # the first answer was lost
        # The repeat got the claim the server made for the lost answer: one attempt in all.
        [attempt] = await direct.query_attempts(rollout.rollout_id)
        assert claim.attempt.attempt_id == attempt.attempt_id
        assert claim.rollout.rollout_id == rollout.rollout_id
        assert await store.dequeue_rollouts() == []


async def test_a_dequeue_answered_503_fails_over_and_claims_once(server: StoreServer) -> None:
    """A server that committed a claim but answered 503 (PostgreSQL's commit in doubt): the
    client sends the dequeue to the next server over the same data, which answers the same."""
    relay = Relay(int(server.url.rsplit(":", 1)[1]))
    async with (
        relay.serving() as url,
        agl.open_store(f"{url},{server.url}", retries=3) as store,
        agl.open_store(server.url) as direct,
    ):
        [rollout] = await direct.enqueue_rollouts([RolloutRequest(input="task")])
        relay.unavailable_answers = 1
        [claim] = await store.dequeue_rollouts(worker_id="runner-1")
        assert relay.unavailable_answers == 0
        [attempt] = await direct.query_attempts(rollout.rollout_id)
        assert claim.attempt.attempt_id == attempt.attempt_id


async def test_a_lost_answer_to_add_metrics_is_sent_again_and_stored_once(
    server: StoreServer,
) -> None:
    relay = Relay(int(server.url.rsplit(":", 1)[1]))
    async with (
        relay.serving() as url,
        agl.open_store(url, retries=3) as store,
        agl.open_store(server.url) as direct,
    ):
        row = agl.MetricsRow(run="r", step=0, time=1.0, values={"loss": 0.5})
        relay.drop_answers = 1
        await store.add_metrics([row])
        assert relay.drop_answers == 0
        assert (await direct.query_metrics(run="r")).rows == [row]  # stored once


async def test_a_refused_connection_is_retried_even_for_dequeue() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the client connects: refused
    async with agl.open_store(f"http://127.0.0.1:{port}", retries=2, timeout=2) as store:
        with pytest.raises(agl.StoreUnavailableError, match="after 3 tries"):
            await store.dequeue_rollouts()


async def test_the_server_errors_come_back_as_agl_errors(server: StoreServer) -> None:
    async with agl.open_store(server.url) as store:
        rollout_id, attempt_id = await claim(store)
        stray = Span.create(rollout_id=rollout_id, attempt_id="at-unknown", name="stray")
        with pytest.raises(agl.NotFoundError, match="at-unknown") as info:
            await store.add_spans([stray])
        assert info.value.field == "spans[0].attempt_id"
        good = Span.create(rollout_id=rollout_id, attempt_id=attempt_id, name="good")
        assert await store.add_spans([good, good]) == [1, 1]


async def test_every_accepted_rollout_id_is_addressable_over_http(server: StoreServer) -> None:
    """Ids with the punctuation ids may hold travel percent-encoded and come back whole."""
    rollout_id = "task-1.run:2@host~x+y=z,(a);!$&'*"
    async with agl.open_store(server.url) as store:
        await store.enqueue_rollouts([RolloutRequest(input="task", rollout_id=rollout_id)])
        assert (await store.get_rollout(rollout_id)).rollout_id == rollout_id
        [claimed] = await store.dequeue_rollouts()
        attempts = await store.query_attempts(rollout_id)
        assert [a.attempt_id for a in attempts] == [claimed.attempt.attempt_id]
        assert (await store.cancel_rollout(rollout_id)).rollout_id == rollout_id


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("2", 2.0),
        (" 0.5 ", 0.5),
        ("-3", 0.0),  # in the past: at once
        ("86400", 30.0),  # a day: the client's own limit
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # an HTTP date gone by
        ("soon", None),
        ("nan", None),
        (None, None),
    ],
)
def test_retry_after_is_read_as_seconds_or_a_date_and_capped(
    header: str | None, seconds: float | None
) -> None:
    assert retry_after(header) == seconds


def test_retry_after_reads_an_http_date_to_come() -> None:
    from email.utils import formatdate

    waited = retry_after(formatdate(time.time() + 3600, usegmt=True))  # an hour: capped
    assert waited == MAX_RETRY_AFTER
