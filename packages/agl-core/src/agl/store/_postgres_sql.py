"""Every SQL statement of the PostgreSQL store: the schema, its migrations and the
:class:`~agl.store._tx.Transaction` the store engine runs its rules over.

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
  attempt is timed out once, and not after a heartbeat that just arrived.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from agl._resources import ResourcesUpdate
from agl._rollouts import Attempt, Rollout, RolloutMode, RolloutStatus, Worker
from agl._spans import Span
from agl.store._tx import SpanKey, span_row, spans_of_rows

__all__ = [
    "CHANNEL",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgresTransaction",
    "migrate",
    "stored_version",
]

CHANNEL = "agl_store"
"""The LISTEN/NOTIFY channel a transaction that changed a rollout notifies on commit (a
statement trigger on the rollouts table sends it; PostgreSQL delivers one per transaction)."""

_SWEEP_LOCK = 0x61676C5F7377  # "agl_sw": one server at a time ends overdue attempts
_MIGRATION_LOCK = 0x61676C5F6D67  # "agl_mg": one server at a time creates or migrates

MIGRATIONS: list[list[str]] = [
    [  # 1: the tables
        "CREATE TABLE IF NOT EXISTS agl_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE SEQUENCE IF NOT EXISTS agl_queue_pos",
        """CREATE TABLE IF NOT EXISTS agl_rollouts (
            seq BIGSERIAL PRIMARY KEY,
            rollout_id TEXT NOT NULL UNIQUE,
            status TEXT NOT NULL,
            mode TEXT,
            queue_pos BIGINT,
            next_span_seq BIGINT NOT NULL DEFAULT 1,
            data TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS agl_rollouts_queue ON agl_rollouts (queue_pos) "
        "WHERE queue_pos IS NOT NULL",
        """CREATE TABLE IF NOT EXISTS agl_attempts (
            rollout_id TEXT NOT NULL,
            attempt_id TEXT NOT NULL,
            sequence INTEGER NOT NULL,
            deadline DOUBLE PRECISION,
            data TEXT NOT NULL,
            PRIMARY KEY (rollout_id, attempt_id)
        )""",
        "CREATE INDEX IF NOT EXISTS agl_attempts_deadline ON agl_attempts (deadline) "
        "WHERE deadline IS NOT NULL",
        """CREATE TABLE IF NOT EXISTS agl_spans (
            rollout_id TEXT NOT NULL,
            sequence_id BIGINT NOT NULL,
            attempt_id TEXT NOT NULL,
            trace_id TEXT NOT NULL,
            span_id TEXT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (rollout_id, sequence_id)
        )""",
        "CREATE UNIQUE INDEX IF NOT EXISTS agl_spans_identity "
        "ON agl_spans (rollout_id, attempt_id, span_id, trace_id)",
        """CREATE TABLE IF NOT EXISTS agl_resources (
            version BIGINT PRIMARY KEY,
            resources_id TEXT NOT NULL UNIQUE,
            data TEXT NOT NULL
        )""",
        "CREATE TABLE IF NOT EXISTS agl_workers (worker_id TEXT PRIMARY KEY, data TEXT NOT NULL)",
    ],
    [  # 2: listing rollouts by status reads an index, not the table
        "CREATE INDEX IF NOT EXISTS agl_rollouts_status ON agl_rollouts (status, seq)",
    ],
    [  # 3: a worker is seen in one statement (columns, not JSON); rollouts notify by trigger
        "ALTER TABLE agl_workers ADD COLUMN first_seen_time DOUBLE PRECISION, "
        "ADD COLUMN last_seen_time DOUBLE PRECISION, "
        "ADD COLUMN last_dequeue_time DOUBLE PRECISION, "
        "ADD COLUMN num_claimed BIGINT NOT NULL DEFAULT 0",
        "UPDATE agl_workers SET "
        "first_seen_time = (data::jsonb ->> 'first_seen_time')::float8, "
        "last_seen_time = (data::jsonb ->> 'last_seen_time')::float8, "
        "last_dequeue_time = (data::jsonb ->> 'last_dequeue_time')::float8, "
        "num_claimed = COALESCE((data::jsonb ->> 'num_claimed')::bigint, 0)",
        "ALTER TABLE agl_workers DROP COLUMN data, "
        "ALTER COLUMN first_seen_time SET NOT NULL, ALTER COLUMN last_seen_time SET NOT NULL",
        "CREATE OR REPLACE FUNCTION agl_rollouts_changed() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN PERFORM pg_notify('{CHANNEL}', ''); RETURN NULL; END $$",
        "CREATE TRIGGER agl_rollouts_changed AFTER INSERT OR UPDATE OF data ON agl_rollouts "
        "FOR EACH STATEMENT EXECUTE FUNCTION agl_rollouts_changed()",
    ],
]
"""Each entry takes a database from the version before it (0: empty) to its own number."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The schema this agl writes; a database at a higher version was written by a newer agl."""


def stored_version(db: psycopg.Connection[Any]) -> int:
    """The schema version a database holds: 0 for one agl never wrote."""
    exists = db.execute("SELECT to_regclass('agl_meta') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return 0
    row = db.execute("SELECT value FROM agl_meta WHERE key = 'schema_version'").fetchone()
    return 0 if row is None else int(row[0])


def migrate(db: psycopg.Connection[Any], target: int = SCHEMA_VERSION) -> tuple[int, int]:
    """Bring the database to ``target`` in one transaction; return (found, now) versions.

    Several servers starting at once take turns (an advisory lock); a database at a version
    above ``target`` is left alone: the caller refuses it.
    """
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        found = stored_version(db)
        if found >= target:
            return found, found
        for statements in MIGRATIONS[found:target]:
            for statement in statements:
                db.execute(statement)
        db.execute(
            "INSERT INTO agl_meta (key, value) VALUES ('schema_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (str(target),),
        )
    return found, target


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
            "INSERT INTO agl_rollouts (rollout_id, status, mode, queue_pos, data) VALUES "
            "(%s, %s, %s, CASE WHEN %s THEN nextval('agl_queue_pos') END, %s)",
            (
                rollout.rollout_id,
                rollout.status.value,
                rollout.mode,
                rollout.status.is_claimable,
                rollout.model_dump_json(),
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
        self,
        statuses: Sequence[RolloutStatus] | None,
        mode: RolloutMode | None,
        limit: int,
        offset: int,
    ) -> tuple[list[Rollout], int]:
        # NULL parameters switch a condition off: one statement, planned once.
        values = None if statuses is None else [status.value for status in statuses]
        params = {"statuses": values, "mode": mode, "limit": limit, "offset": offset}
        counted = self.db.execute(
            "SELECT COUNT(*) FROM agl_rollouts "
            "WHERE (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::text[])) "
            "AND (%(mode)s::text IS NULL OR mode = %(mode)s::text)",
            params,
        ).fetchone()
        rows = self.db.execute(
            "SELECT data FROM agl_rollouts "
            "WHERE (%(statuses)s::text[] IS NULL OR status = ANY(%(statuses)s::text[])) "
            "AND (%(mode)s::text IS NULL OR mode = %(mode)s::text) "
            "ORDER BY seq LIMIT %(limit)s OFFSET %(offset)s",
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
            "INSERT INTO agl_attempts (rollout_id, attempt_id, sequence, deadline, data) "
            "VALUES (%s, %s, %s, %s, %s) " + _ATTEMPT_CONFLICT,
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
            "INSERT INTO agl_attempts (rollout_id, attempt_id, sequence, deadline, data) "
            "SELECT * FROM unnest(%b::text[], %b::text[], %b::int[], %b::float8[], %b::text[]) "
            + _ATTEMPT_CONFLICT,
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
        # retried. Batches go by COPY, which streams the rows in one statement (several times
        # faster than INSERTs); a lone span by INSERT, which costs one round trip, not three.
        if len(spans) == 1:
            self.db.execute(
                "INSERT INTO agl_spans (rollout_id, sequence_id, attempt_id, trace_id, span_id, "
                "data) VALUES (%s, %s, %s, %s, %s, %s)",
                span_row(*spans[0]),
            )
            return
        with (
            self.db.cursor() as cursor,
            cursor.copy(
                "COPY agl_spans (rollout_id, sequence_id, attempt_id, trace_id, span_id, data) "
                "FROM STDIN"
            ) as copy,
        ):
            for span, sequence_id in spans:
                copy.write_row(span_row(span, sequence_id))

    def spans_query(self, rollout_id: str, attempt_id: str | None) -> list[Span]:
        rows = self.db.execute(
            "SELECT data FROM agl_spans WHERE rollout_id = %s "
            "AND (%s::text IS NULL OR attempt_id = %s::text) ORDER BY sequence_id",
            (rollout_id, attempt_id, attempt_id),
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
        counts = {
            f"rollouts.{status}": int(count)
            for status, count in self.db.execute(
                "SELECT status, COUNT(*) FROM agl_rollouts GROUP BY status"
            )
        }
        row = self.db.execute(
            "SELECT (SELECT COUNT(*) FROM agl_attempts), (SELECT COUNT(*) FROM agl_spans), "
            "(SELECT COUNT(*) FROM agl_resources), (SELECT COUNT(*) FROM agl_workers)"
        ).fetchone()
        assert row is not None
        tables = ("attempts", "spans", "resources", "workers")
        counts.update(zip(tables, map(int, row), strict=True))
        return counts
