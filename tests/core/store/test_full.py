"""A store on a full disk: a retryable answer naming the cause, nothing lost once there is room.

The disk is real: a small tmpfs mounted for the test (root only; skipped where mounting is not
permitted), the store's file (or PostgreSQL's tablespace) on it, the rest filled with a file
that the test deletes to make room again.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests

import agl
from agl import RolloutRequest, Span
from agl.semconv import AGL_ATTEMPT_ID, AGL_ROLLOUT_ID
from agl.store._full import RETRY_AFTER_SECONDS
from agl.store._sqlite import SQLiteStore
from agl.testing import disks
from agl.testing.disks import fill
from agl.testing.openai_server import OpenAIServer
from agl.testing.ports import free_port
from agl.testing.postgres import PostgresServer, postgres_bin_dir
from agl.testing.processes import Processes

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with disks.small_disk(tmp_path / "disk") as disk:
        yield disk


def span(rollout_id: str, attempt_id: str, name: str, blob: int = 0) -> Span:
    attributes = {"blob": base64.b64encode(os.urandom(blob)).decode()} if blob else {}
    return Span.create(
        rollout_id=rollout_id, attempt_id=attempt_id, name=name, attributes=attributes
    )


async def claim(store: agl.Store) -> tuple[str, str]:
    await store.enqueue_rollouts([RolloutRequest(input=0)])
    [claimed] = await store.dequeue_rollouts()
    return claimed.rollout.rollout_id, claimed.attempt.attempt_id


# --- SQLite, in process ---------------------------------------------------------------------


async def test_a_sqlite_store_on_a_full_disk_refuses_retryably_and_keeps_what_it_held(
    small_disk: Path,
) -> None:
    async with SQLiteStore(small_disk / "agl.db") as store:
        ids = await claim(store)
        before = await store.add_spans([span(*ids, f"before-{i}", blob=2000) for i in range(5)])
        filler = fill(small_disk)
        with pytest.raises(agl.StoreFullError) as refused:
            await store.add_spans([span(*ids, f"during-{i}", blob=20_000) for i in range(10)])
        # retryable: what waits out an unreachable store waits this out too
        assert isinstance(refused.value, agl.StoreUnavailableError)
        message = str(refused.value)
        for words in ("disk full", "no space left", str(small_disk / "agl.db"), "Free space"):
            assert words in message, message
        assert "SQLITE_FULL" in message, message
        assert [s.sequence_id for s in await store.query_spans(ids[0])] == before
        filler.unlink()
        after = await store.add_spans([span(*ids, f"after-{i}", blob=20_000) for i in range(10)])
        assert after == list(range(6, 16))


async def test_a_sqlite_store_opened_on_a_full_disk_says_the_disk_is_full(
    small_disk: Path,
) -> None:
    """Opening maps SQLite's WAL index; on a full disk that is an I/O error
    (SQLITE_IOERR_SHMSIZE), not a database that is not usable."""
    path = small_disk / "agl.db"
    async with SQLiteStore(path) as store:
        ids = await claim(store)
        await store.add_spans([span(*ids, "kept")])
    filler = fill(small_disk)
    with pytest.raises(agl.StoreFullError, match="disk full") as refused:
        SQLiteStore(path)
    assert "SQLITE_IOERR" in str(refused.value)
    filler.unlink()
    async with SQLiteStore(path) as store:
        assert [s.name for s in await store.query_spans(ids[0])] == ["kept"]


# --- the HTTP client -------------------------------------------------------------------------


async def test_the_client_waits_retry_after_then_raises_store_full(small_disk: Path) -> None:
    from agl.store._serve import StoreServer

    with StoreServer(f"sqlite:///{small_disk / 'agl.db'}") as server:
        async with agl.open_store(server.url, retries=2) as store:
            ids = await claim(store)
            filler = fill(small_disk)
            started = time.monotonic()
            with pytest.raises(agl.StoreFullError, match="disk full"):
                await store.add_spans([span(*ids, "during", blob=20_000)])
            # Two retries, each after the server's Retry-After: a lower bound that no machine's
            # speed can break (before, the client waited 0.05 s, then 0.1 s).
            assert time.monotonic() - started >= 2 * RETRY_AFTER_SECONDS
            filler.unlink()
            assert await store.add_spans([span(*ids, "after")]) == [1]


# --- every sender, through `agl store serve` ------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def full_disk_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(the store's database URL, a folder on the small disk it writes to)."""
    if request.param == "sqlite":
        disk = request.getfixturevalue("small_disk")
        yield f"sqlite:///{disk / 'agl.db'}", disk
        return
    if os.geteuid() != 0:
        pytest.skip("PostgreSQL's small disk is a tmpfs mount: needs root")
    if postgres_bin_dir() is None:
        pytest.skip("no PostgreSQL binaries")
    # The whole data directory on a full disk would stop the server (a WAL it cannot write
    # is a PANIC); the store's tables and indexes go on the small disk, as a tablespace.
    with PostgresServer(small_disk_mb=24) as server:
        server.sql(f"CREATE TABLESPACE small LOCATION '{server.small_disk}'")
        server.sql('CREATE DATABASE "full" TABLESPACE small')
        yield server.url_of("full"), server.small_disk_here


@pytest.mark.slow
@pytest.mark.timeout(900)
async def test_no_sender_loses_a_span_to_a_full_disk(
    full_disk_store: tuple[str, Path], processes: Processes
) -> None:
    """The tracer's sender, the gateway's and an OpenTelemetry SDK's OTLP exporter each send 10
    spans while the store's disk is full: the store answers 503 with Retry-After, naming the
    cause; each sender keeps its spans; once the disk has room, all 30 are stored, and the
    spans stored before the disk filled are as they were."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    db, disk = full_disk_store
    store_port, gateway_port = free_port(), free_port()
    store_url, gateway_url = f"http://127.0.0.1:{store_port}", f"http://127.0.0.1:{gateway_port}"
    await processes.store_server("store", db=db, port=store_port)
    with OpenAIServer() as model:
        gateway = await processes.gateway_server(
            "gateway", upstreams=[model.url], store=store_url, port=gateway_port
        )
        async with agl.open_store(store_url) as store, tracer_of(store_url) as tracer:
            held = await claim(store)
            await store.add_spans([span(*held, f"held-{i}", blob=2000) for i in range(5)])
            stored_before = await store.query_spans(held[0])
            by_tracer, by_gateway, by_otlp = [await claim(store) for _ in range(3)]

            filler = fill(disk)

            async with tracer.rollout(*by_tracer):  # 10 spans and the rollout's own
                for index in range(10):
                    with tracer.otel_tracer.start_as_current_span(f"t{index}"):
                        pass
            async with httpx.AsyncClient(timeout=60) as client:
                for index in range(10):  # each call answered: its span is the gateway's now
                    reply = await client.post(
                        f"{gateway_url}/rollout/{by_gateway[0]}/attempt/{by_gateway[1]}"
                        "/v1/chat/completions",
                        json={"model": "m", "messages": [{"role": "user", "content": f"{index}"}]},
                    )
                    assert reply.status_code == 200, reply.text

            # Both senders have heard from the store (before the fix: refused, spans dropped).
            await processes.until(
                lambda: tracer.stats.retries + tracer.stats.rejected > 0,
                "the store to answer the tracer's sender",
                300,
            )
            await processes.until(
                lambda: "cannot take spans" in gateway.log() or "refused" in gateway.log(),
                "the store to answer the gateway's sender",
                300,
                gateway,
            )
            assert tracer.stats.rejected == 0, tracer.stats.last_error
            assert "refused" not in gateway.log()
            assert "disk full" in str(tracer.stats.last_error), tracer.stats.last_error

            # An OpenTelemetry SDK's exporter: it retries a 503 up to 6 times within its timeout,
            # waiting Retry-After between tries; the disk gets room after the first refusal.
            answers: list[requests.Response] = []
            refused = threading.Event()
            session = requests.Session()

            def heard(response: requests.Response, *args: Any, **kwargs: Any) -> None:
                answers.append(response)
                if response.status_code == 503:
                    refused.set()

            session.hooks["response"].append(heard)
            # A timeout well past its 6 tries 2 s apart: a slow answer does not cut them short.
            exporter = OTLPSpanExporter(
                endpoint=f"{store_url}/v1/traces", session=session, timeout=120
            )
            exported = asyncio.ensure_future(
                asyncio.to_thread(exporter.export, sdk_spans(*by_otlp, 10))
            )
            assert await asyncio.to_thread(refused.wait, 300), [a.status_code for a in answers]
            filler.unlink()
            assert await exported is SpanExportResult.SUCCESS, [a.status_code for a in answers]
            exporter.shutdown()

            first = answers[0]
            assert first.status_code == 503
            assert first.headers["retry-after"] == str(RETRY_AFTER_SECONDS)
            error = first.json()["error"]
            assert error["type"] == "StoreFullError"
            assert "disk full" in error["message"]
            assert "Free space" in error["message"]

            async def all_stored() -> bool:
                counts = [len(await store.query_spans(ids[0])) for ids in (by_gateway, by_otlp)]
                return counts == [10, 10] and len(await store.query_spans(by_tracer[0])) == 11

            await processes.until(all_stored, "every sender's 10 spans in the store", 300)
            names = {s.name for s in await store.query_spans(by_tracer[0])}
            assert names == {f"t{i}" for i in range(10)} | {"agl.rollout"}
            assert {s.name for s in await store.query_spans(by_otlp[0])} == {
                f"o{i}" for i in range(10)
            }
            assert await store.query_spans(held[0]) == stored_before
            assert tracer.stats.dropped == 0


@contextlib.asynccontextmanager
async def tracer_of(store_url: str) -> AsyncIterator[agl.Tracer]:
    """agl's tracer sending to ``store_url``; a rollout's end waits for nothing."""
    client = agl.open_store(store_url)
    tracer = agl.Tracer(client, flush_timeout=0.1)
    try:
        yield tracer
    finally:
        tracer.flush_timeout = 60
        await asyncio.to_thread(tracer.close)
        await client.close()


def sdk_spans(rollout_id: str, attempt_id: str, count: int) -> list[Any]:
    """``count`` spans recorded with the OpenTelemetry SDK, for an agent's rollout attempt."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    recorded = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({AGL_ROLLOUT_ID: rollout_id, AGL_ATTEMPT_ID: attempt_id})
    )
    provider.add_span_processor(SimpleSpanProcessor(recorded))
    for index in range(count):
        with provider.get_tracer("agent").start_as_current_span(f"o{index}"):
            pass
    provider.shutdown()
    return list(recorded.get_finished_spans())
