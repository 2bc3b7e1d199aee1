"""The PostgreSQL store's schema: its tables, each version's migration, and migrating.

A database records its schema version; a store that opens a database at an older version
migrates it in place (:func:`migrate`), one that finds a newer version refuses it.

Kept counts (what :meth:`~agl.Store.statistics` reports) live in ``agl_counts``, moved by
triggers in the transaction that writes the rows they count. Each database session moves only
the counts of its own slot (its backend process id), so writers on many servers never wait for
one another on a hot counter row, and never deadlock over one; a read sums the slots, and
:func:`fold_counts` gathers the slots of sessions that ended into slot 0 (no session has it).
"""

from __future__ import annotations

from typing import Any

import psycopg

__all__ = [
    "CHANNEL",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "fold_counts",
    "migrate",
    "read_counts",
    "stored_version",
]

CHANNEL = "agl_store"
"""The LISTEN/NOTIFY channel a transaction that changed a rollout notifies on commit (a
statement trigger on the rollouts table sends it; PostgreSQL delivers one per transaction)."""

_MIGRATION_LOCK = 0x61676C5F6D67  # "agl_mg": one server at a time creates or migrates
_FOLD_LOCK = 0x61676C5F666C  # "agl_fl": one server at a time folds the counts of ended sessions

_COUNTED = {"agl_attempts": "attempts", "agl_resources": "resources", "agl_workers": "workers"}
"""Tables whose rows are counted one by one, by their count's key (rollouts: by status; spans:
where their sequence ids are reserved)."""

_COUNTS = [
    """CREATE TABLE agl_counts (
        key TEXT NOT NULL,
        slot INTEGER NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (key, slot)
    )""",
    # Nothing to add writes nothing (an upsert that only updated still fires INSERT triggers).
    "CREATE FUNCTION agl_count(counted TEXT, delta BIGINT) RETURNS void LANGUAGE sql AS $$ "
    "INSERT INTO agl_counts (key, slot, n) SELECT counted, pg_backend_pid(), delta "
    "WHERE delta <> 0 ON CONFLICT (key, slot) DO UPDATE SET n = agl_counts.n + excluded.n $$",
    # A rollout: by status (each change of status moves two counts).
    "CREATE FUNCTION agl_count_rollout() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF TG_OP <> 'INSERT' THEN PERFORM agl_count('rollouts.' || OLD.status, -1); END IF; "
    "IF TG_OP <> 'DELETE' THEN PERFORM agl_count('rollouts.' || NEW.status, 1); END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER agl_count_rollout_insert AFTER INSERT OR DELETE ON agl_rollouts "
    "FOR EACH ROW EXECUTE FUNCTION agl_count_rollout()",
    "CREATE TRIGGER agl_count_rollout_status AFTER UPDATE OF status ON agl_rollouts "
    "FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) "
    "EXECUTE FUNCTION agl_count_rollout()",
    # Spans: counted where a batch reserves their sequence ids, once per rollout it names (not
    # once per span): the ids are gap-free, each one reserved is a span the same transaction
    # stores.
    "CREATE FUNCTION agl_count_reserved() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "PERFORM agl_count('spans', NEW.next_span_seq - OLD.next_span_seq); RETURN NULL; END $$",
    "CREATE TRIGGER agl_count_spans_reserved AFTER UPDATE OF next_span_seq ON agl_rollouts "
    "FOR EACH ROW WHEN (OLD.next_span_seq IS DISTINCT FROM NEW.next_span_seq) "
    "EXECUTE FUNCTION agl_count_reserved()",
    # Other rows: one statement's rows at once.
    "CREATE FUNCTION agl_count_added() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "PERFORM agl_count(TG_ARGV[0], (SELECT COUNT(*) FROM added)); RETURN NULL; END $$",
    "CREATE FUNCTION agl_count_removed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "PERFORM agl_count(TG_ARGV[0], -(SELECT COUNT(*) FROM removed)); RETURN NULL; END $$",
    *(
        statement
        for table, key in _COUNTED.items()
        for statement in (
            f"CREATE TRIGGER {table}_counted AFTER INSERT ON {table} REFERENCING NEW TABLE AS "
            f"added FOR EACH STATEMENT EXECUTE FUNCTION agl_count_added('{key}')",
            f"CREATE TRIGGER {table}_uncounted AFTER DELETE ON {table} REFERENCING OLD TABLE AS "
            f"removed FOR EACH STATEMENT EXECUTE FUNCTION agl_count_removed('{key}')",
        )
    ),
    "CREATE TRIGGER agl_spans_uncounted AFTER DELETE ON agl_spans REFERENCING OLD TABLE AS "
    "removed FOR EACH STATEMENT EXECUTE FUNCTION agl_count_removed('spans')",
    # The rows already there, counted once. After the triggers: creating one waits for the
    # transactions writing its table and holds off new ones until the migration commits.
    "INSERT INTO agl_counts (key, slot, n) "
    "SELECT 'rollouts.' || status, 0, COUNT(*) FROM agl_rollouts GROUP BY status",
    *(
        f"INSERT INTO agl_counts (key, slot, n) SELECT '{key}', 0, COUNT(*) FROM {table}"
        for table, key in {**_COUNTED, "agl_spans": "spans"}.items()
    ),
]

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
    _COUNTS,  # 6: kept counts for statistics, filled in from the rows already stored
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


FOLD_SLOTS = 256
"""Past this many slots, :func:`read_counts` folds those of ended sessions (a pool replaces its
connections now and then, and each new session starts a slot)."""


def read_counts(db: psycopg.Connection[Any]) -> dict[str, int]:
    """The kept counts, every slot summed: ``rollouts.<status>``, ``attempts``, ``spans``,
    ``resources``, ``workers``. Folds the slots of ended sessions first when there are more
    than :data:`FOLD_SLOTS`."""
    row = db.execute("SELECT COUNT(DISTINCT slot) FROM agl_counts").fetchone()
    if row is not None and row[0] > FOLD_SLOTS:
        fold_counts(db)
    rows = db.execute("SELECT key, SUM(n) FROM agl_counts GROUP BY key").fetchall()
    return {key: int(n) for key, n in rows}


def fold_counts(db: psycopg.Connection[Any]) -> bool:
    """Move the counts of sessions that ended into slot 0, in the caller's transaction.

    Sums are unchanged whatever runs meanwhile: each row is deleted and added to slot 0 in one
    statement. A session still running keeps its slot (folding it would only make the two of
    them wait for each other). Returns False when another server was folding (nothing done).
    """
    taken = db.execute("SELECT pg_try_advisory_xact_lock(%s)", (_FOLD_LOCK,)).fetchone()
    if not taken or not taken[0]:
        return False
    db.execute(
        "WITH gone AS (DELETE FROM agl_counts WHERE slot <> 0 "
        "AND slot NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL) "
        "RETURNING key, n) "
        "INSERT INTO agl_counts (key, slot, n) SELECT key, 0, SUM(n) FROM gone GROUP BY key "
        "ON CONFLICT (key, slot) DO UPDATE SET n = agl_counts.n + excluded.n"
    )
    return True
