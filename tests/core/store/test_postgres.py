"""The PostgreSQL store with several stores (as several servers would) over one real database,
its schema versions, and what it says when the database is wrong or gone."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import agl
from agl import Attempt, Rollout, RolloutConfig, RolloutRequest, RolloutStatus, Worker
from agl._spans import new_span_id, new_trace_id
from agl.store import _postgres_schema as postgres_schema
from agl.store._checks import redact
from agl.store._postgres import PostgresStore
from agl.store._postgres_schema import SCHEMA_VERSION, fold_counts, migrate
from agl.testing.ports import free_port
from agl.testing.postgres import PostgresServer
from agl.testing.processes import Processes

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer() as running:
        yield running


@pytest.fixture
def url(server: PostgresServer) -> str:
    return server.create_database(f"t_{uuid.uuid4().hex}")


def _span(rollout_id: str, attempt_id: str, index: int, **fields: Any) -> agl.Span:
    return agl.Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        trace_id=new_trace_id(),
        span_id=new_span_id(),
        name=f"step-{index}",
        start_time_unix_nano=1_000_000_000,
        end_time_unix_nano=2_000_000_000,
        **fields,
    )


async def test_concurrent_dequeues_from_three_stores_claim_each_rollout_once(url: str) -> None:
    stores = [agl.open_store(url) for _ in range(3)]
    try:
        await stores[0].enqueue_rollouts([RolloutRequest(input=i) for i in range(120)])

        async def drain(store: agl.Store, worker: str) -> list[str]:
            claimed = []
            while claims := await store.dequeue_rollouts(limit=4, worker_id=worker):
                claimed += [claim.rollout.rollout_id for claim in claims]
            return claimed

        results = await asyncio.gather(
            *(drain(store, f"w{i}-{j}") for i, store in enumerate(stores) for j in range(3))
        )
        claimed = [rollout_id for result in results for rollout_id in result]
        assert len(claimed) == 120
        assert len(set(claimed)) == 120
        workers = await stores[1].query_workers()
        assert sum(worker.num_claimed for worker in workers) == 120
    finally:
        for store in stores:
            await store.close()


async def test_one_request_sent_to_three_stores_at_once_claims_once(url: str) -> None:
    """A dequeue repeated on other servers while the first is still at work (a client that
    gave up waiting): one carries it out, the others answer with its claims."""
    stores = [agl.open_store(url) for _ in range(3)]
    try:
        await stores[0].enqueue_rollouts([RolloutRequest(input=i) for i in range(6)])
        for round_ in range(5):
            answers = await asyncio.gather(
                *(
                    store.dequeue_rollouts(limit=1, worker_id="w", request_id=f"rq-{round_}")
                    for store in stores
                )
            )
            ids = {tuple(claim.attempt.attempt_id for claim in answer) for answer in answers}
            assert len(ids) == 1, answers
            assert len(next(iter(ids))) == 1, answers
        page = await stores[1].query_rollouts(status=RolloutStatus.PREPARING)
        assert page.total == 5  # five requests, five claims
        [worker] = await stores[2].query_workers()
        assert worker.num_claimed == 5
    finally:
        for store in stores:
            await store.close()


async def test_spans_added_to_one_rollout_from_two_stores_get_gap_free_ids(url: str) -> None:
    a, b = agl.open_store(url), agl.open_store(url)
    try:
        await a.enqueue_rollouts([RolloutRequest(input=0, rollout_id="r")])
        (claim,) = await a.dequeue_rollouts()
        spans = [_span("r", claim.attempt.attempt_id, i) for i in range(200)]
        batches = [spans[i : i + 10] for i in range(0, 200, 10)]
        # Every batch sent through both stores at once: each span is stored once.
        results = await asyncio.gather(
            *(store.add_spans(batch) for batch in batches for store in (a, b))
        )
        for first, second in zip(results[::2], results[1::2], strict=True):
            assert first == second
        stored = await b.query_spans("r")
        assert [span.sequence_id for span in stored] == list(range(1, 201))
        assert {span.span_id for span in stored} == {span.span_id for span in spans}
        assert await a.add_spans(spans[:5]) == results[0][:5]  # re-adding is a no-op
        assert len(await a.query_spans("r")) == 200
    finally:
        await a.close()
        await b.close()


async def test_overdue_attempts_end_once_with_three_stores_sweeping(url: str) -> None:
    stores = [agl.open_store(url) for _ in range(3)]
    try:
        config = RolloutConfig(unresponsive_seconds=0.2, max_attempts=2)
        requests = [RolloutRequest(input=i, config=config) for i in range(30)]
        await stores[0].enqueue_rollouts(requests)
        claims = await stores[0].dequeue_rollouts(limit=30, worker_id="lost")
        assert len(claims) == 30
        await asyncio.sleep(0.4)
        # All three read at once: each sweeps (one at a time, by the advisory lock).
        reads = [store.query_rollouts(limit=100) for store in stores for _ in range(3)]
        await asyncio.gather(*reads)
        page = await stores[1].query_rollouts(limit=100)
        assert {rollout.status for rollout in page.rollouts} == {RolloutStatus.REQUEUING}
        assert {rollout.num_attempts for rollout in page.rollouts} == {1}
        for rollout in page.rollouts:
            attempts = await stores[2].query_attempts(rollout.rollout_id)
            # Never started (no word from "lost" after the claim): released, not counted.
            assert [attempt.status for attempt in attempts] == [agl.AttemptStatus.RELEASED]
        # The retries are claimable exactly once each.
        retried = await asyncio.gather(
            *(store.dequeue_rollouts(limit=30, worker_id=f"w{i}") for i, store in enumerate(stores))
        )
        assert sorted(c.rollout.rollout_id for r in retried for c in r) == sorted(
            claim.rollout.rollout_id for claim in claims
        )
    finally:
        for store in stores:
            await store.close()


async def test_a_late_report_after_another_server_timed_the_attempt_out_is_refused(
    url: str,
) -> None:
    a, b = agl.open_store(url), agl.open_store(url)
    try:
        config = RolloutConfig(unresponsive_seconds=0.2, max_attempts=1)
        await a.enqueue_rollouts([RolloutRequest(input=0, rollout_id="r", config=config)])
        (claim,) = await a.dequeue_rollouts(worker_id="w")
        await a.update_attempt("r", claim.attempt.attempt_id, status="running")
        await asyncio.sleep(0.4)
        assert (await b.get_rollout("r")).status == RolloutStatus.FAILED
        with pytest.raises(agl.ConflictError, match="unresponsive"):
            await a.update_attempt("r", claim.attempt.attempt_id, status="succeeded")
    finally:
        await a.close()
        await b.close()


async def test_a_waiting_dequeue_wakes_on_another_stores_enqueue(url: str) -> None:
    # poll_interval=60: only the notification can wake the waiter before its 20 s are up.
    waiter = agl.open_store(url + "?poll_interval=60")
    writer = agl.open_store(url)
    try:
        started = time.monotonic()
        waiting = asyncio.ensure_future(waiter.dequeue_rollouts(wait=20))
        await asyncio.sleep(0.3)
        await writer.enqueue_rollouts([RolloutRequest(input=1)])
        claims = await waiting
        assert len(claims) == 1
        assert time.monotonic() - started < 10
        rollout_id = claims[0].rollout.rollout_id
        finished = asyncio.ensure_future(waiter.wait_for_rollouts([rollout_id], timeout=20))
        await asyncio.sleep(0.3)
        await writer.update_attempt(rollout_id, claims[0].attempt.attempt_id, status="succeeded")
        assert [rollout.rollout_id for rollout in await finished] == [rollout_id]
        assert time.monotonic() - started < 10
    finally:
        await waiter.close()
        await writer.close()


async def test_an_older_schema_is_migrated_in_place(url: str) -> None:
    with psycopg.connect(url) as db:  # a database an agl of schema version 1 wrote
        assert migrate(db, target=1) == (0, 1)
        db.execute(
            "INSERT INTO agl_rollouts (rollout_id, status, queue_pos, data) VALUES "
            "('kept', 'queuing', nextval('agl_queue_pos'), %s)",
            (Rollout(rollout_id="kept", input=1, enqueue_time=1.0).model_dump_json(),),
        )
        attempt = Attempt(
            rollout_id="ran", attempt_id="at-1", sequence=1, worker_id="old-w", start_time=5.0
        )
        db.execute(
            "INSERT INTO agl_rollouts (rollout_id, status, data) VALUES ('ran', 'running', %s)",
            (Rollout(rollout_id="ran", input=2, enqueue_time=5.0).model_dump_json(),),
        )
        db.execute(
            "INSERT INTO agl_attempts (rollout_id, attempt_id, sequence, data) "
            "VALUES ('ran', 'at-1', 1, %s)",
            (attempt.model_dump_json(),),
        )
        worker = Worker(worker_id="w", first_seen_time=1.0, last_seen_time=2.0, num_claimed=3)
        db.execute("INSERT INTO agl_workers VALUES ('w', %s)", (worker.model_dump_json(),))
        db.commit()
    store = PostgresStore(url)
    try:
        assert store.migrated_from == 1
        assert (await store.get_rollout("kept")).input == 1
        # Kept counts, filled in from the rows already stored.
        assert _as_counts(await store.statistics()) == {
            "rollouts.queuing": 1,
            "rollouts.running": 1,
            **{"attempts": 1, "spans": 0, "resources": 0, "workers": 1},
        }
        # Columns added since are filled in from the rows already stored.
        by_time = await store.query_rollouts(since=1.0, until=5.0)
        assert [rollout.rollout_id for rollout in by_time.rollouts] == ["kept"]
        by_worker = await store.query_rollouts(worker_id="old-w")
        assert [rollout.rollout_id for rollout in by_worker.rollouts] == ["ran"]
        assert await store.query_workers() == [worker]
        claims = await store.dequeue_rollouts(worker_id="w", request_id="rq-after-migration")
        assert [claim.rollout.rollout_id for claim in claims] == ["kept"]
        assert await store.dequeue_rollouts(worker_id="w", request_id="rq-after-migration") == (
            claims
        )
        assert (await store.query_rollouts(worker_id="w")).rollouts[0].rollout_id == "kept"
        (seen,) = await store.query_workers()
        assert (seen.first_seen_time, seen.num_claimed) == (1.0, 4)
        assert seen.last_seen_time > 2.0
        stats = await store.statistics()
        assert _as_counts(stats) == _counted_rows(url)
        assert (stats.rollouts_by_status[RolloutStatus.PREPARING], stats.attempts) == (1, 2)
    finally:
        await store.close()
    with psycopg.connect(url) as db:
        assert db.execute("SELECT to_regclass('agl_rollouts_status')").fetchone() != (None,)
        kept = db.execute("SELECT key, SUM(n)::int FROM agl_counts GROUP BY key").fetchall()
        counted = _counted_rows(url)
        assert {key: n for key, n in kept if n} == {key: n for key, n in counted.items() if n}
        version = db.execute("SELECT value FROM agl_meta WHERE key = 'schema_version'")
        assert version.fetchone() == (str(SCHEMA_VERSION),)


async def test_a_newer_schema_is_refused_naming_both_versions(url: str) -> None:
    async with agl.open_store(url) as store:
        await store.enqueue_rollouts([RolloutRequest(input=1, rollout_id="kept")])
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("UPDATE agl_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(agl.StoreError, match=rf"version 99.*up to version {SCHEMA_VERSION}"):
        agl.open_store(url)
    with psycopg.connect(url) as db:
        assert db.execute("SELECT COUNT(*) FROM agl_rollouts").fetchone() == (1,)


def test_a_malformed_url_is_named_without_its_password() -> None:
    with pytest.raises(agl.InvalidInputError, match="malformed PostgreSQL URL") as caught:
        agl.open_store("postgresql://agl:s3cret@127.0.0.1:notaport/db")
    assert "s3cret" not in str(caught.value)
    with pytest.raises(agl.InvalidInputError, match="pool_size"):
        agl.open_store("postgresql://agl:pw@127.0.0.1/db?pool_size=0")


def test_a_database_that_is_down_is_named() -> None:
    port = free_port()
    with pytest.raises(agl.StoreUnavailableError, match=f"cannot reach PostgreSQL.*{port}"):
        PostgresStore(f"postgresql://agl:pw@127.0.0.1:{port}/db", connect_timeout=3)


def test_wrong_credentials_and_a_missing_database_are_named(server: PostgresServer) -> None:
    wrong = server.url_of("postgres", password="wrong-password")
    with pytest.raises(agl.StoreUnavailableError, match="refused the credentials") as caught:
        agl.open_store(wrong)
    assert "wrong-password" not in str(caught.value)
    with pytest.raises(agl.StoreUnavailableError, match="create it first"):
        agl.open_store(server.url_of("no_such_database"))


def test_redact_hides_only_the_password() -> None:
    assert redact("postgresql://u:p@h:5/d") == "postgresql://u:***@h:5/d"
    assert redact("postgresql://h/d") == "postgresql://h/d"


async def test_a_restarted_database_loses_nothing_and_the_store_carries_on() -> None:
    with PostgresServer() as server:
        url = server.create_database("restart")
        async with agl.open_store(url) as store:
            await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(5)])
            server.kill()
            with pytest.raises(agl.StoreUnavailableError, match="PostgreSQL"):
                await store.enqueue_rollouts([RolloutRequest(input=5)])
            server.start()
            # The pool replaces its broken connections: wait for the first answer (60 s: room
            # for a loaded machine), the store's errors until then being "unavailable" only.
            deadline = time.monotonic() + 60
            while True:
                try:
                    page = await store.query_rollouts()
                    break
                except agl.StoreUnavailableError:
                    assert time.monotonic() < deadline, "the store did not come back in 60 s"
                    await asyncio.sleep(0.1)
            assert [rollout.input for rollout in page.rollouts] == [0, 1, 2, 3, 4]
            assert len(await store.dequeue_rollouts(limit=10)) == 5


async def test_two_store_servers_over_one_database_survive_one_being_killed(
    server: PostgresServer, url: str, tmp_path: Path
) -> None:
    with Processes(tmp_path) as processes:
        ports = free_port(), free_port()
        first = await processes.store_server("store-a", db=url, port=ports[0])
        await processes.store_server("store-b", db=url, port=ports[1])
        a = agl.open_store(f"http://127.0.0.1:{ports[0]}")
        b = agl.open_store(f"http://127.0.0.1:{ports[1]}")
        try:
            await a.enqueue_rollouts(
                [RolloutRequest(input=i, rollout_id=f"r{i}") for i in range(20)]
            )
            claims = await b.dequeue_rollouts(limit=10, worker_id="w")
            for claim in claims:
                ids = claim.rollout.rollout_id, claim.attempt.attempt_id
                await a.add_spans([_span(*ids, 0), _span(*ids, 1)])
                await b.update_attempt(*ids, status="succeeded")
            first.process.kill()  # SIGKILL: whatever it acknowledged is in the database
            first.process.wait(timeout=30)
            assert "serving postgresql://agl:***@" in first.log()
            assert server.password not in first.log()
            page = await b.query_rollouts(limit=100)
            assert page.total == 20
            done = [r for r in page.rollouts if r.status == RolloutStatus.SUCCEEDED]
            assert sorted(r.rollout_id for r in done) == sorted(
                c.rollout.rollout_id for c in claims
            )
            for rollout in done:
                spans = await b.query_spans(rollout.rollout_id)
                assert [span.sequence_id for span in spans] == [1, 2]
            rest = await b.dequeue_rollouts(limit=20, worker_id="w")
            assert len(rest) == 10
            assert not {c.rollout.rollout_id for c in rest} & {r.rollout_id for r in done}
        finally:
            await a.close()
            await b.close()


async def test_a_client_of_three_servers_fails_over_without_duplicating_a_write(
    url: str, tmp_path: Path
) -> None:
    with Processes(tmp_path) as processes:
        ports = [free_port() for _ in range(3)]
        servers = [
            await processes.store_server(f"store-{i}", db=url, port=port)
            for i, port in enumerate(ports)
        ]
        client = agl.open_store(",".join(f"http://127.0.0.1:{port}" for port in ports))
        acknowledged: list[str] = []
        try:
            for round_ in range(12):
                if round_ == 6:  # the server the client talks to dies mid-run
                    servers[0].process.kill()
                    servers[0].process.wait(timeout=30)
                requests = [RolloutRequest(input=round_ * 5 + i) for i in range(5)]
                acknowledged += [r.rollout_id for r in await client.enqueue_rollouts(requests)]
                for claim in await client.dequeue_rollouts(limit=5, worker_id="w"):
                    ids = claim.rollout.rollout_id, claim.attempt.attempt_id
                    await client.add_spans([_span(*ids, 0), _span(*ids, 1)])
                    await client.update_attempt(*ids, status="succeeded")
        finally:
            await client.close()
        async with agl.open_store(f"http://127.0.0.1:{ports[2]}") as other:
            page = await other.query_rollouts(limit=100)
            assert sorted(r.rollout_id for r in page.rollouts) == sorted(acknowledged)
            assert {r.status for r in page.rollouts} == {RolloutStatus.SUCCEEDED}
            assert {r.num_attempts for r in page.rollouts} == {1}
            for rollout_id in acknowledged:
                spans = await other.query_spans(rollout_id)
                assert [span.sequence_id for span in spans] == [1, 2]


@pytest.mark.skipif(os.geteuid() != 0, reason="a full disk is a tmpfs mount here: needs root")
async def test_a_full_disk_is_named_and_what_was_stored_stays() -> None:
    with PostgresServer(small_disk_mb=24) as server:
        server.sql(f"CREATE TABLESPACE small LOCATION '{server.small_disk}'")
        server.sql('CREATE DATABASE "full" TABLESPACE small')
        async with agl.open_store(server.url_of("full")) as store:
            await store.enqueue_rollouts([RolloutRequest(input=0, rollout_id="r")])
            (claim,) = await store.dequeue_rollouts()
            acknowledged, error = 0, None
            for index in range(1_000):  # 1,000 x ~70 KB: far more than 24 MB
                blob = base64.b64encode(os.urandom(50_000)).decode()
                span = _span("r", claim.attempt.attempt_id, index, attributes={"blob": blob})
                try:
                    await store.add_spans([span])
                except agl.StoreFullError as exc:  # retryable: nothing of it was written
                    error = exc
                    break
                acknowledged += 1
            assert error is not None, "the disk never filled up"
            assert "disk full" in str(error), error
            assert "No space left on device" in str(error)
            assert acknowledged > 10
            spans = await store.query_spans("r")
            assert [span.sequence_id for span in spans] == list(range(1, acknowledged + 1))
            assert (await store.get_rollout("r")).status == RolloutStatus.PREPARING


def _counted_rows(url: str) -> dict[str, int]:
    """What statistics must report, counted from the rows themselves."""
    with psycopg.connect(url) as db:
        counts = {
            f"rollouts.{status}": int(n)
            for status, n in db.execute("SELECT status, COUNT(*) FROM agl_rollouts GROUP BY status")
        }
        for table in ("attempts", "spans", "resources", "workers"):
            row = db.execute(f"SELECT COUNT(*) FROM agl_{table}").fetchone()
            assert row is not None
            counts[table] = int(row[0])
    return counts


def _as_counts(stats: agl.StoreStatistics) -> dict[str, int]:
    counts = {f"rollouts.{status}": n for status, n in stats.rollouts_by_status.items() if n}
    counts.update(
        attempts=stats.attempts, spans=stats.spans, resources=stats.resources, workers=stats.workers
    )
    return counts


async def test_kept_counts_stay_exact_with_three_stores_writing_at_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = [agl.open_store(url) for _ in range(3)]
    try:
        await stores[0].add_resources({"llm": agl.LLM(endpoint="e", model="m")})
        config = RolloutConfig(max_attempts=2)

        async def work(index: int, store: agl.Store) -> None:
            ids = [f"r{index}-{i}" for i in range(20)]
            requests = [
                RolloutRequest(input=i, rollout_id=r, config=config) for i, r in enumerate(ids)
            ]
            await store.enqueue_rollouts(requests)
            for round_ in range(3):
                claims = await store.dequeue_rollouts(limit=8, worker_id=f"w{index}")
                for number, claim in enumerate(claims):
                    rollout_id, attempt_id = claim.rollout.rollout_id, claim.attempt.attempt_id
                    await store.add_spans([_span(rollout_id, attempt_id, i) for i in range(5)])
                    status = ["succeeded", "failed", "running", "released"][(number + round_) % 4]
                    # another client may have cancelled that rollout meanwhile
                    with contextlib.suppress(agl.ConflictError):
                        await store.update_attempt(rollout_id, attempt_id, status=status)
            await store.cancel_rollout(ids[-1])

        # Two clients on each store, each with rollouts of its own.
        await asyncio.gather(*(work(i, stores[i % 3]) for i in range(6)))
        expected = _counted_rows(url)
        assert expected["spans"] > 0
        assert expected["rollouts.succeeded"] > 0
        for store in stores:
            assert _as_counts(await store.statistics()) == expected
        with psycopg.connect(url) as db:
            slots = db.execute("SELECT COUNT(DISTINCT slot) FROM agl_counts").fetchone()
        assert slots is not None
        assert slots[0] > 1
    finally:
        for store in stores:
            await store.close()
    # The sessions ended: a read past FOLD_SLOTS slots gathers theirs into one, sums unchanged.
    monkeypatch.setattr(postgres_schema, "FOLD_SLOTS", 1)
    async with agl.open_store(url) as store:
        assert _as_counts(await store.statistics()) == expected
    with psycopg.connect(url) as db:
        ended = db.execute(
            "SELECT COUNT(*) FROM agl_counts WHERE slot <> 0 AND slot NOT IN "
            "(SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)"
        ).fetchone()
        assert ended == (0,)
        assert fold_counts(db)  # nothing left to fold: nothing changes
        db.commit()
    async with agl.open_store(url) as store:
        assert _as_counts(await store.statistics()) == expected
