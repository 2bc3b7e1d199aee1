"""The PostgreSQL store's schema: its tables, each version's migration, and migrating.

A database records its schema version; a store that opens a database at an older version
migrates it in place (:func:`migrate`), one that finds a newer version refuses it.
"""

from __future__ import annotations

from typing import Any

import psycopg

__all__ = ["CHANNEL", "MIGRATIONS", "SCHEMA_VERSION", "migrate", "stored_version"]

CHANNEL = "agl_store"
"""The LISTEN/NOTIFY channel a transaction that changed a rollout notifies on commit (a
statement trigger on the rollouts table sends it; PostgreSQL delivers one per transaction)."""

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
    [  # 4: rollouts filtered by enqueue time and by worker (columns), training metrics
        "ALTER TABLE agl_rollouts ADD COLUMN IF NOT EXISTS enqueue_time DOUBLE PRECISION",
        "UPDATE agl_rollouts SET enqueue_time = (data::jsonb ->> 'enqueue_time')::float8",
        "CREATE INDEX IF NOT EXISTS agl_rollouts_enqueue_time ON agl_rollouts (enqueue_time)",
        "ALTER TABLE agl_attempts ADD COLUMN IF NOT EXISTS worker_id TEXT",
        "UPDATE agl_attempts SET worker_id = data::jsonb ->> 'worker_id'",
        "CREATE INDEX IF NOT EXISTS agl_attempts_worker ON agl_attempts (worker_id, rollout_id) "
        "WHERE worker_id IS NOT NULL",
        """CREATE TABLE IF NOT EXISTS agl_metrics (
            seq BIGSERIAL PRIMARY KEY,
            run TEXT NOT NULL,
            data TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS agl_metrics_run ON agl_metrics (run, seq)",
    ],
    [  # 5: the answers to requests a client may repeat (a dequeue, metrics rows), by its id
        """CREATE TABLE IF NOT EXISTS agl_requests (
            request_id TEXT PRIMARY KEY,
            time DOUBLE PRECISION NOT NULL,
            answer TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS agl_requests_time ON agl_requests (time)",
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
