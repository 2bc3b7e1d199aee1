"""The PostgreSQL store's reads and writes: the :class:`~agl.store._tx.Transaction` the store
engine runs its rules over (the schema and its migrations are :mod:`agl.store._postgres_schema`).

Statements are parameterized (psycopg binds every value; nothing is formatted into SQL).
Arrays are bound in binary (``%b``): psycopg's text format quotes each element with a regex,
which costs more than the statement for a batch of 512 span ids.

Concurrency, with several store servers over one database, at READ COMMITTED:

- a rollout's row is the lock for everything about that rollout: operations that change a
  rollout or its attempts read it ``FOR UPDATE`` first, so they run one at a time per rollout,
  each seeing what the one before committed;
- a dequeue takes waiting rollouts ``FOR UPDATE SKIP LOCKED``: concurrent dequeues (from any
  server) never claim the same rollout and never wait for each other;
- sequence ids come from an ``UPDATE … RETURNING`` on the rollout's counter, so two servers
  adding spans to one rollout take turns, and a transaction that fails gives its ids back
  (gap-free); a span added twice at once trips the unique index and the operation is retried,
  finding the span already stored;
- inserting what another transaction inserted first (a rollout with a given id, a worker's first
  row, a resources version) trips a unique constraint; the store retries the whole operation,
  which then sees the committed row;
- one server at a time looks for attempts past their deadline (a transaction-scoped advisory
  lock); the engine re-reads each attempt under its rollout's lock before ending it, so an
  attempt is timed out once, and not after a heartbeat that just arrived;
- a request sent with a request id (a dequeue, metrics rows) takes an advisory lock on the id
  first: the same request sent to two servers at once is carried out by one, and the other,
  once that one commits, reads its answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from agl._metric_rows import MetricsRow
from agl._resources import ResourcesUpdate
from agl._rollouts import Attempt, Rollout, Worker
from agl._spans import Span
from agl.store._postgres_schema import read_counts
from agl.store._tx import RolloutFilter, SpanKey, like_contains, span_row, spans_of_rows

__all__ = ["PostgresTransaction"]

_SWEEP_LOCK = 0x61676C5F7377  # "agl_sw": one server at a time ends overdue attempts
_REQUEST_LOCK = 0x61676C72  # "aglr" (with the request id's hash): a repeated request waits

_ATTEMPT_INSERT = (
    "INSERT INTO agl_attempts (rollout_id, attempt_id, sequence, deadline, data, worker_id) "
)
_ATTEMPT_CONFLICT = (
    "ON CONFLICT (rollout_id, attempt_id) DO UPDATE SET "
    "deadline = excluded.deadline, data = excluded.data"
)


def _attempt_row(attempt: Attempt, deadline: float | None) -> tuple[Any, ...]:
    return (
        attempt.rollout_id,
        attempt.attempt_id,
        attempt.sequence,
        deadline,
        attempt.model_dump_json(),
        attempt.worker_id,
    )


class PostgresTransaction:
    """The store's reads and writes as SQL over one connection inside one transaction."""

    def __init__(self, db: psycopg.Connection[Any]) -> None:
        self.db = db

    # rollouts
    def rollout_get(self, rollout_id: str) -> Rollout | None:
        row = self.db.execute(
            "SELECT data FROM agl_rollouts WHERE rollout_id = %s FOR UPDATE", (rollout_id,)
        ).fetchone()
        return None if row is None else Rollout.model_validate_json(row[0])

    def rollouts_get_many(self, rollout_ids: Iterable[str]) -> dict[str, Rollout]:
        rows = self.db.execute(
            "SELECT data FROM agl_rollouts WHERE rollout_id = ANY(%b) ORDER BY rollout_id "
            "FOR UPDATE",
            (sorted(set(rollout_ids)),),
        )
        found = (Rollout.model_validate_json(data) for (data,) in rows)
        return {rollout.rollout_id: rollout for rollout in found}

    def rollout_insert(self, rollout: Rollout) -> None:
        self.db.execute(
            "INSERT INTO agl_rollouts (rollout_id, status, mode, queue_pos, data, enqueue_time) "
            "VALUES (%s, %s, %s, CASE WHEN %s THEN nextval('agl_queue_pos') END, %s, %s)",
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
            "UPDATE agl_rollouts SET status = %s, data = %s, queue_pos = CASE "
            "WHEN NOT %s THEN NULL "
            "WHEN queue_pos IS NOT NULL THEN queue_pos "
            "ELSE nextval('agl_queue_pos') END "
            "WHERE rollout_id = %s",
            (
                rollout.status.value,
                rollout.model_dump_json(),
                rollout.status.is_claimable,
                rollout.rollout_id,
            ),
        )

    def rollouts_claimable(self, limit: int) -> list[Rollout]:
        rows = self.db.execute(
            "SELECT data FROM agl_rollouts WHERE queue_pos IS NOT NULL ORDER BY queue_pos "
            "LIMIT %s FOR UPDATE SKIP LOCKED",
            (limit,),
        ).fetchall()
        return [Rollout.model_validate_json(row[0]) for row in rows]

    def rollouts_query(
        self, where: RolloutFilter, limit: int, offset: int
    ) -> tuple[list[Rollout], int]:
        # Only the conditions asked for go into the statement (each from a fixed text; every
        # value is bound): a plan for the filters at hand, not one for every combination.
        conditions: list[str] = []
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if where.statuses is not None and len(where.statuses) == 1:
            # As an equality, the (status, seq) index gives the rows in order: no sort.
            conditions.append("status = %(status)s::text")
            params["status"] = where.statuses[0].value
        elif where.statuses is not None:
            conditions.append("status = ANY(%(statuses)s::text[])")
            params["statuses"] = [status.value for status in where.statuses]
        if where.mode is not None:
            conditions.append("mode = %(mode)s::text")
            params["mode"] = where.mode
        if where.search is not None:
            conditions.append("rollout_id LIKE %(search)s ESCAPE '\\'")
            params["search"] = like_contains(where.search)
        if where.worker_id is not None:
            conditions.append(
                "rollout_id IN (SELECT rollout_id FROM agl_attempts WHERE worker_id = %(worker)s)"
            )
            params["worker"] = where.worker_id
        if where.since is not None:
            conditions.append("enqueue_time >= %(since)s")
            params["since"] = where.since
        if where.until is not None:
            conditions.append("enqueue_time < %(until)s")
            params["until"] = where.until
        clause = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        # A worker's rollouts may all lie far from the end the page starts at, where the
        # planner, assuming them spread evenly, would walk the primary key probing each row:
        # ``seq + 0`` takes that order away, so it starts from the worker's attempts (as the
        # count does) and sorts them.
        key = "seq + 0" if where.worker_id is not None else "seq"
        order = "DESC" if where.newest_first else ""
        counted = self.db.execute(f"SELECT COUNT(*) FROM agl_rollouts {clause}", params).fetchone()
        rows = self.db.execute(
            f"SELECT data FROM agl_rollouts {clause} ORDER BY {key} {order} "
            "LIMIT %(limit)s OFFSET %(offset)s",
            params,
        ).fetchall()
        total = 0 if counted is None else int(counted[0])
        return [Rollout.model_validate_json(row[0]) for row in rows], total

    # attempts
    def attempt_get(self, rollout_id: str, attempt_id: str) -> Attempt | None:
        row = self.db.execute(
            "SELECT data FROM agl_attempts WHERE rollout_id = %s AND attempt_id = %s",
            (rollout_id, attempt_id),
        ).fetchone()
        return None if row is None else Attempt.model_validate_json(row[0])

    def attempts_get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Attempt]:
        wanted = set(keys)
        rows = self.db.execute(
            "SELECT rollout_id, attempt_id, data FROM agl_attempts WHERE rollout_id = ANY(%b)",
            (sorted({rollout_id for rollout_id, _ in wanted}),),
        )
        return {
            (rollout_id, attempt_id): Attempt.model_validate_json(data)
            for rollout_id, attempt_id, data in rows
            if (rollout_id, attempt_id) in wanted
        }

    def attempt_upsert(self, attempt: Attempt, deadline: float | None) -> None:
        self.db.execute(
            _ATTEMPT_INSERT + "VALUES (%s, %s, %s, %s, %s, %s) " + _ATTEMPT_CONFLICT,
            _attempt_row(attempt, deadline),
        )

    def attempts_upsert_many(self, items: Sequence[tuple[Attempt, float | None]]) -> None:
        # One statement for the batch (a span batch refreshes the heartbeats of every attempt
        # it names), the rows passed as one array per column.
        if len(items) == 1:
            self.attempt_upsert(*items[0])
            return
        rows = [_attempt_row(*item) for item in items]
        columns = [list(column) for column in zip(*rows, strict=True)]
        self.db.execute(
            _ATTEMPT_INSERT
            + "SELECT * FROM unnest(%b::text[], %b::text[], %b::int[], %b::float8[], %b::text[], "
            "%b::text[]) " + _ATTEMPT_CONFLICT,
            columns,
        )

    def attempts_of(self, rollout_id: str) -> list[Attempt]:
        rows = self.db.execute(
            "SELECT data FROM agl_attempts WHERE rollout_id = %s ORDER BY sequence",
            (rollout_id,),
        ).fetchall()
        return [Attempt.model_validate_json(row[0]) for row in rows]

    def attempts_due(self, now: float) -> list[Attempt]:
        # Every operation asks, and almost always nothing is due: one indexed read answers
        # that; only when something is due does this server try to become the one sweeping.
        statement = "SELECT data FROM agl_attempts WHERE deadline IS NOT NULL AND deadline <= %s"
        if self.db.execute(statement + " LIMIT 1", (now,)).fetchone() is None:
            return []
        taken = self.db.execute("SELECT pg_try_advisory_xact_lock(%s)", (_SWEEP_LOCK,)).fetchone()
        if not taken or not taken[0]:
            return []  # another server is ending overdue attempts right now
        rows = self.db.execute(statement, (now,)).fetchall()
        return [Attempt.model_validate_json(row[0]) for row in rows]

    # spans
    def spans_existing(self, keys: Iterable[SpanKey]) -> dict[SpanKey, int]:
        # One statement for the whole batch, written so that its plan is always the index
        # (a join against unnest() may be planned as a scan of every span); the exact keys are
        # matched here.
        wanted = set(keys)
        rows = self.db.execute(
            "SELECT rollout_id, attempt_id, trace_id, span_id, sequence_id FROM agl_spans "
            "WHERE rollout_id = ANY(%b) AND span_id = ANY(%b)",
            (sorted({key[0] for key in wanted}), sorted({key[3] for key in wanted})),
        )
        found = {(r, a, t, s): int(sequence_id) for r, a, t, s, sequence_id in rows}
        return {key: sequence_id for key, sequence_id in found.items() if key in wanted}

    def spans_reserve(self, counts: dict[str, int]) -> dict[str, int]:
        # One statement: lock the rollouts in id order (concurrent batches then never
        # deadlock; a locking CTE is run on its own, not folded into the UPDATE), then move
        # every counter of the batch through the primary key.
        ids, numbers = list(counts), list(counts.values())
        rows = self.db.execute(
            "WITH locked AS MATERIALIZED (SELECT rollout_id FROM agl_rollouts "
            "WHERE rollout_id = ANY(%(ids)b::text[]) ORDER BY rollout_id FOR UPDATE) "
            "UPDATE agl_rollouts AS r SET next_span_seq = r.next_span_seq + "
            "(%(numbers)b::bigint[])[array_position(%(ids)b::text[], r.rollout_id)] "
            "FROM locked WHERE r.rollout_id = locked.rollout_id "
            "RETURNING r.rollout_id, r.next_span_seq",
            {"ids": ids, "numbers": numbers},
        ).fetchall()
        first = {rollout_id: int(after) - counts[rollout_id] for rollout_id, after in rows}
        if len(first) != len(counts):  # pragma: no cover - the engine checked they exist
            raise LookupError(f"rollouts {sorted(set(counts) - set(first))} are gone")
        return first

    def spans_insert(self, spans: Sequence[tuple[Span, int]]) -> None:
        # As in SQLite: the stored JSON leaves out defaults and starts with the sequence id.
        # A span another server stored meanwhile trips the unique index and the operation is
        # retried. A batch is one statement, its rows bound as one binary array per column
        # (COPY would stream them as fast, but cannot run in the pipeline the store's
        # transactions run in).
        if len(spans) == 1:
            self.db.execute(
                "INSERT INTO agl_spans (rollout_id, sequence_id, attempt_id, trace_id, span_id, "
                "data) VALUES (%s, %s, %s, %s, %s, %s)",
                span_row(*spans[0]),
            )
            return
        rows = [span_row(span, sequence_id) for span, sequence_id in spans]
        self.db.execute(
            "INSERT INTO agl_spans (rollout_id, sequence_id, attempt_id, trace_id, span_id, "
            "data) SELECT * FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::text[], "
            "%b::text[], %b::text[])",
            [list(column) for column in zip(*rows, strict=True)],
        )

    def spans_query(
        self, rollout_id: str, attempt_id: str | None, after: int = 0, limit: int | None = None
    ) -> list[Span]:
        rows = self.db.execute(
            "SELECT data FROM agl_spans WHERE rollout_id = %s "
            "AND (%s::text IS NULL OR attempt_id = %s::text) AND sequence_id > %s "
            "ORDER BY sequence_id LIMIT %s",  # LIMIT NULL: no limit
            (rollout_id, attempt_id, attempt_id, after, limit),
        ).fetchall()
        return spans_of_rows(row[0] for row in rows)

    # resources
    def resources_get(self, resources_id: str) -> ResourcesUpdate | None:
        row = self.db.execute(
            "SELECT data FROM agl_resources WHERE resources_id = %s", (resources_id,)
        ).fetchone()
        return None if row is None else ResourcesUpdate.model_validate_json(row[0])

    def resources_latest(self) -> ResourcesUpdate | None:
        row = self.db.execute(
            "SELECT data FROM agl_resources ORDER BY version DESC LIMIT 1"
        ).fetchone()
        return None if row is None else ResourcesUpdate.model_validate_json(row[0])

    def resources_insert(self, update: ResourcesUpdate) -> None:
        self.db.execute(
            "INSERT INTO agl_resources (version, resources_id, data) VALUES (%s, %s, %s)",
            (update.version, update.resources_id, update.model_dump_json()),
        )

    def resources_page(self, limit: int, offset: int) -> tuple[list[ResourcesUpdate], int]:
        counted = self.db.execute("SELECT COUNT(*) FROM agl_resources").fetchone()
        rows = self.db.execute(
            "SELECT data FROM agl_resources ORDER BY version DESC LIMIT %s OFFSET %s",
            (limit, offset),
        ).fetchall()
        total = 0 if counted is None else int(counted[0])
        return [ResourcesUpdate.model_validate_json(row[0]) for row in rows], total

    # metrics
    def metrics_insert(self, rows: Sequence[MetricsRow]) -> None:
        with self.db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO agl_metrics (run, data) VALUES (%s, %s)",
                [(row.run, row.model_dump_json()) for row in rows],
            )

    def metrics_query(
        self, run: str | None, limit: int, offset: int
    ) -> tuple[list[MetricsRow], int]:
        clause = "" if run is None else "WHERE run = %(run)s"
        params = {"run": run, "limit": limit, "offset": offset}
        counted = self.db.execute(f"SELECT COUNT(*) FROM agl_metrics {clause}", params).fetchone()
        rows = self.db.execute(
            f"SELECT data FROM agl_metrics {clause} ORDER BY seq LIMIT %(limit)s OFFSET %(offset)s",
            params,
        ).fetchall()
        total = 0 if counted is None else int(counted[0])
        return [MetricsRow.model_validate_json(row[0]) for row in rows], total

    def metrics_runs(self) -> list[str]:
        rows = self.db.execute("SELECT run FROM agl_metrics GROUP BY run ORDER BY MIN(seq)")
        return [run for (run,) in rows]

    # answers to requests a client may repeat
    def request_get(self, request_id: str) -> str | None:
        # Held to the end of the transaction: the same request on another server waits, then
        # reads this one's answer (READ COMMITTED: each statement sees what committed before).
        self.db.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_REQUEST_LOCK, request_id)
        )
        row = self.db.execute(
            "SELECT answer FROM agl_requests WHERE request_id = %s", (request_id,)
        ).fetchone()
        return None if row is None else str(row[0])

    def request_put(self, request_id: str, answer: str, now: float, forget_before: float) -> None:
        self.db.execute("DELETE FROM agl_requests WHERE time < %s", (forget_before,))
        self.db.execute(
            "INSERT INTO agl_requests (request_id, time, answer) VALUES (%s, %s, %s)",
            (request_id, now, answer),
        )

    # workers
    def worker_seen(self, worker_id: str, now: float, claimed: int | None) -> None:
        # One statement, whichever server saw the worker first: no read, no race to insert.
        self.db.execute(
            "INSERT INTO agl_workers AS w (worker_id, first_seen_time, last_seen_time, "
            "last_dequeue_time, num_claimed) VALUES (%(id)s, %(now)s, %(now)s, "
            "CASE WHEN %(dequeued)s THEN %(now)s END, %(claimed)s) "
            "ON CONFLICT (worker_id) DO UPDATE SET "
            "last_seen_time = GREATEST(w.last_seen_time, excluded.last_seen_time), "
            "last_dequeue_time = CASE WHEN %(dequeued)s "
            "THEN GREATEST(w.last_dequeue_time, excluded.last_dequeue_time) "
            "ELSE w.last_dequeue_time END, "
            "num_claimed = w.num_claimed + excluded.num_claimed",
            {"id": worker_id, "now": now, "dequeued": claimed is not None, "claimed": claimed or 0},
        )

    def workers_all(self) -> list[Worker]:
        rows = self.db.execute(
            "SELECT worker_id, first_seen_time, last_seen_time, last_dequeue_time, num_claimed "
            "FROM agl_workers ORDER BY worker_id"
        ).fetchall()
        fields = ("worker_id", "first_seen_time", "last_seen_time", "last_dequeue_time")
        return [
            Worker(**dict(zip(fields, row[:4], strict=True)), num_claimed=row[4]) for row in rows
        ]

    def counts(self) -> dict[str, int]:
        return read_counts(self.db)
