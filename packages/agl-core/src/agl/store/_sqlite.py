"""``sqlite:///path/to.db``: the embedded default store, persistent and durable.

The database runs in WAL mode with ``synchronous=FULL``: when a call returns, what it wrote is
on disk and survives a crash of the process (``kill -9``) or of the machine. One thread owns the
connection and runs operations in order; operations that queue up while a commit is under way
are committed together (group commit), and one failing operation rolls back alone
(:mod:`agl.store._sqlite_writer`). Many concurrent writers therefore share fsyncs instead of
waiting in line for one each.

A file an older agl wrote opens as it is: tables, columns, indexes and kept counts added since
are created when it is opened (the columns and counts filled in from the stored rows).

Several processes may open the same file: writes take SQLite's write lock
(``BEGIN IMMEDIATE``), and long polls re-check the file every ``poll_interval`` seconds.

URL options (query string): ``synchronous`` (``full``, the default, or ``normal``: survives
a process crash but not a power cut), ``poll_interval`` (seconds, default 0.1) and
``busy_timeout`` (seconds, default 30).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

from agl._errors import InvalidInputError, StoreError
from agl._metric_rows import MetricsRow
from agl._resources import ResourcesUpdate
from agl._rollouts import Attempt, Rollout, Worker
from agl._spans import Span
from agl.store._base import StoreStatistics
from agl.store._full import full_disk_error, sqlite_detail, sqlite_disk_full
from agl.store._sqlite_schema import prepare, read_counts
from agl.store._sqlite_writer import Writer
from agl.store._stateful import StatefulStore, statistics_from_counts
from agl.store._tx import (
    RolloutFilter,
    SpanKey,
    Transaction,
    span_ids_by_attempt,
    span_row,
    spans_of_rows,
    worker_seen,
)

__all__ = ["SQLiteStore"]

T = TypeVar("T")

_NEXT_QUEUE_POS = (
    "(SELECT COALESCE(MAX(queue_pos), 0) + 1 FROM rollouts WHERE queue_pos IS NOT NULL)"
)
"""The back of the queue. The ``WHERE`` lets SQLite read it off the partial index
``rollouts_queue`` instead of scanning every rollout (7 ms an insert at 100,000 rollouts)."""


_FORGET_EVERY = 60.0
"""Seconds between two sweeps of the remembered answers (:mod:`agl.store._repeats`)."""


class _SQLiteTransaction:
    """The store's reads and writes as SQL over one connection."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.db = connection
        self._forget_at = 0.0  # when request_put next drops the answers it no longer keeps

    # rollouts
    def rollout_get(self, rollout_id: str) -> Rollout | None:
        row = self.db.execute(
            "SELECT data FROM rollouts WHERE rollout_id = ?", (rollout_id,)
        ).fetchone()
        return None if row is None else Rollout.model_validate_json(row[0])

    def rollouts_get_many(self, rollout_ids: Iterable[str]) -> dict[str, Rollout]:
        found: dict[str, Rollout] = {}
        for chunk in _chunks(list(rollout_ids), 500):
            rows = self.db.execute(
                f"SELECT data FROM rollouts WHERE rollout_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for (data,) in rows:
                rollout = Rollout.model_validate_json(data)
                found[rollout.rollout_id] = rollout
        return found

    def rollout_insert(self, rollout: Rollout) -> None:
        self.db.execute(
            "INSERT INTO rollouts (rollout_id, status, mode, queue_pos, data, enqueue_time) "
            f"VALUES (?, ?, ?, CASE WHEN ? THEN {_NEXT_QUEUE_POS} END, ?, ?)",
            (
                rollout.rollout_id,
                rollout.status.value,
                rollout.mode,
                rollout.status.is_claimable,
                rollout.model_dump_json(),
                rollout.enqueue_time,
            ),
        )

    def rollout_update(self, rollout: Rollout) -> None:
        # A rollout that becomes claimable again joins the back of the queue.
        self.db.execute(
            "UPDATE rollouts SET status = ?, data = ?, queue_pos = CASE "
            "WHEN NOT ? THEN NULL "
            "WHEN queue_pos IS NOT NULL THEN queue_pos "
            f"ELSE {_NEXT_QUEUE_POS} END "
            "WHERE rollout_id = ?",
            (
                rollout.status.value,
                rollout.model_dump_json(),
                rollout.status.is_claimable,
                rollout.rollout_id,
            ),
        )

    def rollouts_claimable(self, limit: int) -> list[Rollout]:
        rows = self.db.execute(
            "SELECT data FROM rollouts WHERE queue_pos IS NOT NULL ORDER BY queue_pos LIMIT ?",
            (limit,),
        ).fetchall()
        return [Rollout.model_validate_json(row[0]) for row in rows]

    def rollouts_query(
        self, where: RolloutFilter, limit: int, offset: int
    ) -> tuple[list[Rollout], int]:
        conditions: list[str] = []
        params: list[str | int | float] = []
        if where.statuses is not None:
            conditions.append(f"status IN ({','.join('?' * len(where.statuses))})")
            params.extend(status.value for status in where.statuses)
            if not where.statuses:
                conditions[-1] = "0"
        if where.mode is not None:
            conditions.append("mode = ?")
            params.append(where.mode)
        if where.search is not None:
            # instr, not LIKE: SQLite's LIKE ignores the case of ASCII letters.
            conditions.append("instr(rollout_id, ?) > 0")
            params.append(where.search)
        if where.worker_id is not None:
            conditions.append("rollout_id IN (SELECT rollout_id FROM attempts WHERE worker_id = ?)")
            params.append(where.worker_id)
        if where.since is not None:
            conditions.append("enqueue_time >= ?")
            params.append(where.since)
        if where.until is not None:
            conditions.append("enqueue_time < ?")
            params.append(where.until)
        clause = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        order = "DESC" if where.newest_first else ""
        (total,) = self.db.execute(f"SELECT COUNT(*) FROM rollouts {clause}", params).fetchone()
        rows = self.db.execute(
            f"SELECT data FROM rollouts {clause} ORDER BY seq {order} LIMIT ? OFFSET ?",
            [*params, limit, offset],
        ).fetchall()
        return [Rollout.model_validate_json(row[0]) for row in rows], int(total)

    # attempts
    def attempt_get(self, rollout_id: str, attempt_id: str) -> Attempt | None:
        row = self.db.execute(
            "SELECT data FROM attempts WHERE rollout_id = ? AND attempt_id = ?",
            (rollout_id, attempt_id),
        ).fetchone()
        return None if row is None else Attempt.model_validate_json(row[0])

    def attempts_get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Attempt]:
        wanted = set(keys)
        found: dict[tuple[str, str], Attempt] = {}
        for chunk in _chunks(sorted({rollout_id for rollout_id, _ in wanted}), 500):
            rows = self.db.execute(
                "SELECT rollout_id, attempt_id, data FROM attempts "
                f"WHERE rollout_id IN ({','.join('?' * len(chunk))})",
                chunk,
            )
            for rollout_id, attempt_id, data in rows:
                if (rollout_id, attempt_id) in wanted:
                    found[(rollout_id, attempt_id)] = Attempt.model_validate_json(data)
        return found

    def attempt_upsert(self, attempt: Attempt, deadline: float | None) -> None:
        self.attempts_upsert_many([(attempt, deadline)])

    def attempts_upsert_many(self, items: Sequence[tuple[Attempt, float | None]]) -> None:
        self.db.executemany(
            "INSERT INTO attempts (rollout_id, attempt_id, sequence, deadline, data, worker_id) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (rollout_id, attempt_id) DO UPDATE SET "
            "deadline = excluded.deadline, data = excluded.data",
            [
                (a.rollout_id, a.attempt_id, a.sequence, deadline, a.model_dump_json(), a.worker_id)
                for a, deadline in items
            ],
        )

    def attempts_of(self, rollout_id: str) -> list[Attempt]:
        rows = self.db.execute(
            "SELECT data FROM attempts WHERE rollout_id = ? ORDER BY sequence", (rollout_id,)
        ).fetchall()
        return [Attempt.model_validate_json(row[0]) for row in rows]

    def attempts_due(self, now: float) -> list[Attempt]:
        rows = self.db.execute(
            "SELECT data FROM attempts WHERE deadline IS NOT NULL AND deadline <= ?", (now,)
        ).fetchall()
        return [Attempt.model_validate_json(row[0]) for row in rows]

    # spans
    def spans_existing(self, keys: Iterable[SpanKey]) -> dict[SpanKey, int]:
        # One indexed query per attempt in the batch (row-value IN lists are not index lookups).
        wanted = span_ids_by_attempt(keys)
        found: dict[SpanKey, int] = {}
        for (rollout_id, attempt_id), span_ids in wanted.items():
            for chunk in _chunks(list(span_ids), 500):
                rows = self.db.execute(
                    "SELECT trace_id, span_id, sequence_id FROM spans WHERE rollout_id = ? "
                    f"AND attempt_id = ? AND span_id IN ({','.join('?' * len(chunk))})",
                    (rollout_id, attempt_id, *chunk),
                )
                for trace_id, span_id, sequence_id in rows:
                    found[(rollout_id, attempt_id, trace_id, span_id)] = int(sequence_id)
        return found

    def spans_reserve(self, counts: dict[str, int]) -> dict[str, int]:
        first = {}
        for rollout_id, count in counts.items():
            (next_id,) = self.db.execute(
                "UPDATE rollouts SET next_span_seq = next_span_seq + ? WHERE rollout_id = ? "
                "RETURNING next_span_seq - ?",
                (count, rollout_id, count),
            ).fetchone()
            first[rollout_id] = int(next_id)
        return first

    def spans_insert(self, spans: Sequence[tuple[Span, int]]) -> None:
        self.db.executemany(
            "INSERT INTO spans (rollout_id, sequence_id, attempt_id, trace_id, span_id, data) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [span_row(span, sequence_id) for span, sequence_id in spans],
        )

    def spans_query(
        self, rollout_id: str, attempt_id: str | None, after: int = 0, limit: int | None = None
    ) -> list[Span]:
        count = -1 if limit is None else limit  # SQLite: a negative LIMIT is none
        if attempt_id is None:
            rows = self.db.execute(
                "SELECT data FROM spans WHERE rollout_id = ? AND sequence_id > ? "
                "ORDER BY sequence_id LIMIT ?",
                (rollout_id, after, count),
            ).fetchall()
        else:
            rows = self.db.execute(
                "SELECT data FROM spans WHERE rollout_id = ? AND attempt_id = ? "
                "AND sequence_id > ? ORDER BY sequence_id LIMIT ?",
                (rollout_id, attempt_id, after, count),
            ).fetchall()
        return spans_of_rows(row[0] for row in rows)

    # resources
    def resources_get(self, resources_id: str) -> ResourcesUpdate | None:
        row = self.db.execute(
            "SELECT data FROM resources WHERE resources_id = ?", (resources_id,)
        ).fetchone()
        return None if row is None else ResourcesUpdate.model_validate_json(row[0])

    def resources_latest(self) -> ResourcesUpdate | None:
        row = self.db.execute("SELECT data FROM resources ORDER BY version DESC LIMIT 1").fetchone()
        return None if row is None else ResourcesUpdate.model_validate_json(row[0])

    def resources_insert(self, update: ResourcesUpdate) -> None:
        self.db.execute(
            "INSERT INTO resources (version, resources_id, data) VALUES (?, ?, ?)",
            (update.version, update.resources_id, update.model_dump_json()),
        )

    def resources_page(self, limit: int, offset: int) -> tuple[list[ResourcesUpdate], int]:
        (total,) = self.db.execute("SELECT COUNT(*) FROM resources").fetchone()
        rows = self.db.execute(
            "SELECT data FROM resources ORDER BY version DESC LIMIT ? OFFSET ?", (limit, offset)
        ).fetchall()
        return [ResourcesUpdate.model_validate_json(row[0]) for row in rows], int(total)

    # metrics
    def metrics_insert(self, rows: Sequence[MetricsRow]) -> None:
        self.db.executemany(
            "INSERT INTO metrics (run, data) VALUES (?, ?)",
            [(row.run, row.model_dump_json()) for row in rows],
        )

    def metrics_query(
        self, run: str | None, limit: int, offset: int
    ) -> tuple[list[MetricsRow], int]:
        clause, params = ("", []) if run is None else ("WHERE run = ?", [run])
        (total,) = self.db.execute(f"SELECT COUNT(*) FROM metrics {clause}", params).fetchone()
        rows = self.db.execute(
            f"SELECT data FROM metrics {clause} ORDER BY seq LIMIT ? OFFSET ?",
            [*params, limit, offset],
        ).fetchall()
        return [MetricsRow.model_validate_json(row[0]) for row in rows], int(total)

    def metrics_runs(self) -> list[str]:
        rows = self.db.execute("SELECT run FROM metrics GROUP BY run ORDER BY MIN(seq)")
        return [run for (run,) in rows]

    # answers to requests a client may repeat
    def request_get(self, request_id: str) -> str | None:
        row = self.db.execute(
            "SELECT answer FROM requests WHERE request_id = ?", (request_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def request_put(self, request_id: str, answer: str, now: float, forget_before: float) -> None:
        # Forgetting at most once a minute keeps every answer as long as asked, and longer by
        # at most that minute: one statement fewer for nearly every dequeue.
        if now >= self._forget_at:
            self.db.execute("DELETE FROM requests WHERE time < ?", (forget_before,))
            self._forget_at = now + _FORGET_EVERY
        self.db.execute(
            "INSERT INTO requests (request_id, time, answer) VALUES (?, ?, ?)",
            (request_id, now, answer),
        )

    # workers
    def worker_seen(self, worker_id: str, now: float, claimed: int | None) -> None:
        row = self.db.execute(
            "SELECT data FROM workers WHERE worker_id = ?", (worker_id,)
        ).fetchone()
        known = None if row is None else Worker.model_validate_json(row[0])
        worker = worker_seen(known, worker_id, now, claimed)
        self.db.execute(
            "INSERT INTO workers (worker_id, data) VALUES (?, ?) "
            "ON CONFLICT (worker_id) DO UPDATE SET data = excluded.data",
            (worker.worker_id, worker.model_dump_json()),
        )

    def workers_all(self) -> list[Worker]:
        rows = self.db.execute("SELECT data FROM workers ORDER BY worker_id").fetchall()
        return [Worker.model_validate_json(row[0]) for row in rows]

    def counts(self) -> dict[str, int]:
        return read_counts(self.db)


def _counts(path: Path) -> dict[str, int]:
    connection = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return read_counts(connection)
    finally:
        connection.close()


def _chunks(items: list[T], size: int) -> list[list[T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


class SQLiteStore(StatefulStore):
    """A store in one SQLite file. See the module docstring for durability and options."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        poll_interval: float = 0.1,
        busy_timeout: float = 30.0,
        url: str | None = None,
    ) -> None:
        path = Path(path)
        super().__init__(url or f"sqlite:///{path}", poll_interval=poll_interval)
        if synchronous.lower() not in ("full", "normal", "extra"):
            raise InvalidInputError(
                f"synchronous must be 'full', 'normal' or 'extra', got {synchronous!r}",
                field="synchronous",
                value=synchronous,
            )
        if not path.parent.exists():
            raise InvalidInputError(
                f"cannot create the SQLite store {str(path)!r}: folder "
                f"{str(path.parent)!r} does not exist",
                field="path",
                value=str(path),
            )
        connection = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
        )
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            connection.execute("PRAGMA foreign_keys = ON")
            prepare(connection, path)
        except sqlite3.DatabaseError as exc:
            connection.close()
            if sqlite_disk_full(exc, path):
                raise full_disk_error(self.url, str(path), sqlite_detail(exc)) from exc
            raise InvalidInputError(
                f"{str(path)!r} is not a usable SQLite database: {exc}",
                field="path",
                value=str(path),
            ) from exc
        except BaseException:
            connection.close()
            raise
        self.path = path
        self._writer = Writer(connection, _SQLiteTransaction(connection), path)
        self._writer.start()

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """Open ``sqlite:///relative/or/absolute/path.db?synchronous=full``."""
        parts = urlsplit(url)
        raw_path = parts.path
        if parts.netloc not in ("", "localhost"):
            raise InvalidInputError(
                f"SQLite store URL {url!r} names a host; write sqlite:///path/to.db",
                field="url",
                value=url,
            )
        # As in SQLAlchemy: sqlite:///runs/agl.db is relative, sqlite:////data/agl.db absolute.
        raw_path = raw_path[1:]
        if not raw_path or raw_path.endswith("/"):
            raise InvalidInputError(
                f"SQLite store URL {url!r} has no file path; write sqlite:///path/to.db",
                field="url",
                value=url,
            )
        options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        unknown = set(options) - {"synchronous", "poll_interval", "busy_timeout"}
        if unknown:
            raise InvalidInputError(
                f"unknown SQLite store option(s) {sorted(unknown)}; expected synchronous, "
                "poll_interval or busy_timeout",
                field="url",
                value=url,
            )
        try:
            poll = float(options.get("poll_interval", 0.1))
            busy = float(options.get("busy_timeout", 30.0))
        except ValueError as exc:
            raise InvalidInputError(
                f"SQLite store URL {url!r}: {exc}", field="url", value=url
            ) from None
        return cls(
            raw_path,
            synchronous=options.get("synchronous", "full"),
            poll_interval=poll,
            busy_timeout=busy,
            url=url,
        )

    async def _run(self, operation: Callable[[Transaction], T]) -> T:
        if self._closed:
            raise StoreError(f"the store {self.url!r} is closed")
        return await self._writer.submit(operation)

    async def statistics(self) -> StoreStatistics:
        """The kept counts (:mod:`agl.store._sqlite_schema`), read on a read-only connection of
        its own: never queued behind the writer's work."""
        if self._closed:
            raise StoreError(f"the store {self.url!r} is closed")
        try:
            counts = await asyncio.to_thread(_counts, self.path)
        except sqlite3.Error as exc:
            if sqlite_disk_full(exc, self.path):
                raise full_disk_error(self.url, str(self.path), sqlite_detail(exc)) from None
            raise StoreError(f"SQLite store {self.url!r} could not read counts: {exc}") from None
        return statistics_from_counts(counts)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._writer.stop()
            await asyncio.to_thread(self._writer.join)
