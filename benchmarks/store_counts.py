"""What kept counts buy and cost: ``statistics()`` at ~300,000 spans, and ``add_spans`` with them.

For SQLite and PostgreSQL (a real server the benchmark starts, ``agl.testing.postgres``), two
stores side by side: one as agl makes it, one whose span-counting trigger is dropped (spans
stored as before counts were kept). The same spans go into both, in alternating rounds
of ``--batch``-span ``add_spans`` calls (so a machine busy with other work slows both alike).
Then, on the store holding counts:

- ``statistics()``: the median of ``--reads`` calls (kept counts, summed);
- the count it replaced: the same figures counted from the rows (``COUNT(*)`` of every table,
  rollouts grouped by status), timed directly on a connection, the median of ``--reads``;

and prints the ``add_spans`` rate (spans/s) with and without the counting trigger, and checks
that ``statistics()`` equals the row count. Then, for PostgreSQL, contention: ``--servers``
stores over one database with ``--clients`` clients each, all adding small batches at once,
with each session's own count rows (as agl keeps them), with one hot row every session moves,
and without counting spans.

Run: ``uv run --no-sync python benchmarks/store_counts.py`` (a few minutes on 2 cores);
``--spans 20000`` for a quick look.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agl
from agl import RolloutRequest, Span
from agl._spans import new_span_id, new_trace_id

_SQLITE_COUNT = [
    "SELECT status, COUNT(*) FROM rollouts GROUP BY status",
    *(f"SELECT COUNT(*) FROM {table}" for table in ("attempts", "spans", "resources", "workers")),
]
_POSTGRES_COUNT = [statement.replace("FROM ", "FROM agl_") for statement in _SQLITE_COUNT]


def spans_for(claims: list[agl.Claim], total: int) -> list[Span]:
    """``total`` spans over the claimed attempts, each attempt's in a row (as a runner sends
    them), each span with a few attributes."""
    trace = new_trace_id()
    per_attempt = -(-total // len(claims))
    return [
        Span(
            rollout_id=claims[i // per_attempt].rollout.rollout_id,
            attempt_id=claims[i // per_attempt].attempt.attempt_id,
            trace_id=trace,
            span_id=new_span_id(),
            name=f"step {i}",
            start_time_unix_nano=1_700_000_000_000_000_000 + i,
            end_time_unix_nano=1_700_000_000_000_001_000 + i,
            attributes={"i": i, "agl.agent.name": "writer", "gen_ai.request.model": "m"},
        )
        for i in range(total)
    ]


async def prepared(store: agl.Store, rollouts: int) -> list[agl.Claim]:
    await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(rollouts)])
    return await store.dequeue_rollouts(limit=rollouts, worker_id="bench")


async def fill(
    stores: dict[str, agl.Store], spans: dict[str, list[Span]], batch: int, rounds: int
) -> dict[str, float]:
    """Add each store's spans in ``rounds`` alternating rounds; return each one's spans/s."""
    spent = dict.fromkeys(stores, 0.0)
    total = len(next(iter(spans.values())))
    per_round = -(-total // rounds)
    for start in range(0, total, per_round):
        for name, store in stores.items():
            chunk = spans[name][start : start + per_round]
            began = time.perf_counter()
            for first in range(0, len(chunk), batch):
                await store.add_spans(chunk[first : first + batch])
            spent[name] += time.perf_counter() - began
    return {name: total / seconds for name, seconds in spent.items()}


def median_ms(call: Callable[[], Any], reads: int) -> float:
    times = []
    for _ in range(reads):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


async def statistics_ms(store: agl.Store, reads: int) -> tuple[float, agl.StoreStatistics]:
    times = []
    stats = await store.statistics()
    for _ in range(reads):
        began = time.perf_counter()
        stats = await store.statistics()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times), stats


def report(name: str, rates: dict[str, float], kept_ms: float, counted_ms: float) -> None:
    cost = 1 - rates["kept"] / rates["uncounted"]
    print(
        f"{name}: add_spans {rates['kept']:,.0f} spans/s with kept counts, "
        f"{rates['uncounted']:,.0f} without ({cost:+.1%} cost); statistics() {kept_ms:.2f} ms "
        f"(kept counts) vs {counted_ms:.1f} ms (counting the rows, as before)"
    )


async def sqlite(args: argparse.Namespace, folder: Path) -> None:
    paths = {"kept": folder / "kept.db", "uncounted": folder / "uncounted.db"}
    stores = {name: agl.open_store(f"sqlite:///{path}") for name, path in paths.items()}
    try:
        with sqlite3.connect(paths["uncounted"]) as db:
            db.execute("DROP TRIGGER counts_spans_reserved")
        claims = {name: await prepared(store, args.rollouts) for name, store in stores.items()}
        spans = {name: spans_for(claims[name], args.spans) for name in stores}
        rates = await fill(stores, spans, args.batch, args.rounds)
        kept_ms, stats = await statistics_ms(stores["kept"], args.reads)
        with sqlite3.connect(paths["kept"]) as db:
            counted_ms = median_ms(lambda: [db.execute(s).fetchall() for s in _SQLITE_COUNT], 9)
            (rows,) = db.execute("SELECT COUNT(*) FROM spans").fetchone()
        if stats.spans != rows or rows != args.spans:
            raise SystemExit(f"sqlite: statistics() says {stats.spans} spans, the table {rows}")
        report(f"sqlite ({args.spans:,} spans)", rates, kept_ms, counted_ms)
    finally:
        for store in stores.values():
            await store.close()


async def postgresql(args: argparse.Namespace) -> None:
    import psycopg

    from agl.testing.postgres import PostgresServer

    with PostgresServer() as server:
        urls = {name: server.create_database(f"bench_{name}") for name in ("kept", "uncounted")}
        stores = {name: agl.open_store(url) for name, url in urls.items()}
        try:
            with psycopg.connect(urls["uncounted"], autocommit=True) as db:
                db.execute("DROP TRIGGER agl_count_spans_reserved ON agl_rollouts")
            claims = {name: await prepared(store, args.rollouts) for name, store in stores.items()}
            spans = {name: spans_for(claims[name], args.spans) for name in stores}
            rates = await fill(stores, spans, args.batch, args.rounds)
            kept_ms, stats = await statistics_ms(stores["kept"], args.reads)
            with psycopg.connect(urls["kept"], autocommit=True) as db:
                db.execute("VACUUM ANALYZE")  # as autovacuum leaves it: index-only counts

                def count() -> None:
                    for statement in _POSTGRES_COUNT:
                        db.execute(statement).fetchall()

                counted_ms = median_ms(count, 9)
                row = db.execute("SELECT COUNT(*) FROM agl_spans").fetchone()
            rows = row[0] if row else -1
            if stats.spans != rows or rows != args.spans:
                raise SystemExit(f"postgresql: statistics() says {stats.spans} spans, table {rows}")
            report(f"postgresql ({args.spans:,} spans)", rates, kept_ms, counted_ms)
        finally:
            for store in stores.values():
                await store.close()
        await contention(args, server)


_ONE_HOT_ROW = (
    "CREATE OR REPLACE FUNCTION agl_count(counted TEXT, delta BIGINT) RETURNS void "
    "LANGUAGE sql AS $$ INSERT INTO agl_counts (key, slot, n) SELECT counted, 0, delta "
    "WHERE delta <> 0 ON CONFLICT (key, slot) DO UPDATE SET n = agl_counts.n + excluded.n $$"
)
"""The counts as one row per key that every session moves (the design not taken)."""


async def send(store: agl.Store, spans: list[Span], batch: int) -> None:
    for first in range(0, len(spans), batch):
        await store.add_spans(spans[first : first + batch])


async def contention(args: argparse.Namespace, server: Any) -> None:
    """``--servers`` stores over one database (as that many servers), ``--clients`` clients on
    each, every client adding ``--small-batch``-span batches to a rollout of its own, all at
    once: spans/s with each session's own count rows (as agl does), with one hot row per count
    that every session moves, and without counting spans. Alternating rounds."""
    import psycopg

    variants = {"own rows": None, "one hot row": _ONE_HOT_ROW, "uncounted": "DROP TRIGGER "
                "agl_count_spans_reserved ON agl_rollouts"}  # fmt: skip
    clients = args.servers * args.clients
    per_client = args.contended_spans // clients
    opened: dict[str, list[agl.Store]] = {}
    work: dict[str, list[list[Span]]] = {}
    for number, (name, change) in enumerate(variants.items()):
        url = server.create_database(f"bench_contention_{number}")
        opened[name] = [agl.open_store(url) for _ in range(args.servers)]
        if change is not None:
            with psycopg.connect(url, autocommit=True) as db:
                db.execute(change)
        claims = await prepared(opened[name][0], clients)
        work[name] = [spans_for([claim], per_client) for claim in claims]
    spent = dict.fromkeys(variants, 0.0)
    try:
        step = -(-per_client // args.rounds)
        for start in range(0, per_client, step):
            for name, stores in opened.items():
                began = time.perf_counter()
                await asyncio.gather(
                    *(
                        send(stores[i % len(stores)], spans[start : start + step], args.small_batch)
                        for i, spans in enumerate(work[name])
                    )
                )
                spent[name] += time.perf_counter() - began
        for name, stores in opened.items():
            stats = await stores[-1].statistics()
            if name != "uncounted" and stats.spans != per_client * clients:
                raise SystemExit(f"{name}: statistics() says {stats.spans} spans")
    finally:
        for stores in opened.values():
            for store in stores:
                await store.close()
    total = per_client * clients
    rates = ", ".join(f"{total / spent[name]:,.0f} spans/s {name}" for name in variants)
    print(
        f"postgresql, {args.servers} stores x {args.clients} clients, {args.small_batch} spans a "
        f"call, {total:,} spans: {rates}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--spans", type=int, default=300_000)
    parser.add_argument("--rollouts", type=int, default=300, help="the spans spread over these")
    parser.add_argument("--batch", type=int, default=512, help="spans per add_spans call")
    parser.add_argument("--rounds", type=int, default=10, help="alternations between stores")
    parser.add_argument("--reads", type=int, default=51, help="statistics() calls timed")
    parser.add_argument("--servers", type=int, default=3, help="stores writing at once (pg)")
    parser.add_argument("--clients", type=int, default=4, help="clients on each of them")
    parser.add_argument("--small-batch", type=int, default=8, help="spans a concurrent call")
    parser.add_argument("--contended-spans", type=int, default=24_000)
    parser.add_argument(
        "--backends", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql"
    )
    args = parser.parse_args()
    backends = args.backends.split(",")
    with tempfile.TemporaryDirectory() as folder:
        if "sqlite" in backends:
            asyncio.run(sqlite(args, Path(folder)))
    if "postgresql" in backends:
        asyncio.run(postgresql(args))


if __name__ == "__main__":
    main()
