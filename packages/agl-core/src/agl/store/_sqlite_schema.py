"""The SQLite store's tables, and what opening a file does to them.

A new file gets every table. A file an older agl wrote (same schema version) gets the columns,
indexes and counters added since, filled in from the stored rows. A file of another schema
version is refused with the versions named.

The ``counts`` table keeps what :meth:`~agl.Store.statistics` reports (rollouts by status,
attempts, spans, resources, workers), so reading them costs the same at any size. Triggers keep
it: each insert (and each change of a rollout's status, and each reservation of span sequence
ids) updates its count in the statement that made it, inside the same transaction, whoever
writes the file (an older agl too).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agl._errors import StoreError

__all__ = ["SCHEMA_VERSION", "prepare", "read_counts"]

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rollouts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    rollout_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    mode TEXT NOT NULL,
    queue_pos INTEGER,
    next_span_seq INTEGER NOT NULL DEFAULT 1,
    data TEXT NOT NULL,
    enqueue_time REAL
);
CREATE INDEX IF NOT EXISTS rollouts_queue ON rollouts (queue_pos) WHERE queue_pos IS NOT NULL;
CREATE INDEX IF NOT EXISTS rollouts_status ON rollouts (status, seq);
CREATE TABLE IF NOT EXISTS attempts (
    rollout_id TEXT NOT NULL,
    attempt_id TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    deadline REAL,
    data TEXT NOT NULL,
    worker_id TEXT,
    PRIMARY KEY (rollout_id, attempt_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS attempts_deadline ON attempts (deadline) WHERE deadline IS NOT NULL;
CREATE TABLE IF NOT EXISTS spans (
    rollout_id TEXT NOT NULL,
    sequence_id INTEGER NOT NULL,
    attempt_id TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (rollout_id, sequence_id)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS spans_identity
    ON spans (rollout_id, attempt_id, span_id, trace_id);
CREATE TABLE IF NOT EXISTS resources (
    version INTEGER PRIMARY KEY,
    resources_id TEXT NOT NULL UNIQUE,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (worker_id TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS metrics (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_run ON metrics (run, seq);
CREATE TABLE IF NOT EXISTS requests (
    request_id TEXT PRIMARY KEY,
    time REAL NOT NULL,
    answer TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS requests_time ON requests (time);
"""

_ADDED_COLUMNS = {
    # table: (column, its type, how to fill it in from the JSON rows written before it)
    "rollouts": ("enqueue_time", "REAL", "json_extract(data, '$.enqueue_time')"),
    "attempts": ("worker_id", "TEXT", "json_extract(data, '$.worker_id')"),
}
"""Columns a store file written before them (same schema version) gets when it is opened."""

_INDEXES_OF_ADDED_COLUMNS = """
CREATE INDEX IF NOT EXISTS rollouts_enqueue_time ON rollouts (enqueue_time);
CREATE INDEX IF NOT EXISTS attempts_worker ON attempts (worker_id, rollout_id)
    WHERE worker_id IS NOT NULL;
"""


def _add_columns(connection: sqlite3.Connection) -> None:
    """Give a file written by an older agl the columns and indexes this one queries.

    In one write transaction: a process opening the file at the same time waits, then finds
    the columns there.
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        for table, (column, kind, source) in _ADDED_COLUMNS.items():
            present = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                connection.execute(f"UPDATE {table} SET {column} = {source}")
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.executescript(_INDEXES_OF_ADDED_COLUMNS)


_COUNTED = {"attempts": "attempts", "resources": "resources", "workers": "workers"}
"""Tables whose rows are counted one by one, by the key of their count."""

_BUMP = (
    "INSERT INTO counts (key, n) VALUES ({key}, {delta}) "
    "ON CONFLICT (key) DO UPDATE SET n = n + excluded.n"
)


def _counter_triggers() -> list[str]:
    """The triggers that keep ``counts``, one statement each.

    Spans are counted where a batch reserves their sequence ids (once per rollout a batch
    names, not once per span): the ids are gap-free, every id reserved is a span stored in the
    same transaction.
    """
    triggers = []
    for table, key in _COUNTED.items():
        for event, delta in (("INSERT", 1), ("DELETE", -1)):
            bump = _BUMP.format(key=f"'{key}'", delta=delta)
            triggers.append(
                f"CREATE TRIGGER counts_{table}_{event.lower()} AFTER {event} ON {table} "
                f"BEGIN {bump}; END"
            )
    for event, row, delta in (("INSERT", "NEW", 1), ("DELETE", "OLD", -1)):
        bump = _BUMP.format(key=f"'rollouts.' || {row}.status", delta=delta)
        triggers.append(
            f"CREATE TRIGGER counts_rollouts_{event.lower()} AFTER {event} ON rollouts "
            f"BEGIN {bump}; END"
        )
    out = _BUMP.format(key="'rollouts.' || OLD.status", delta=-1)
    into = _BUMP.format(key="'rollouts.' || NEW.status", delta=1)
    reserved = _BUMP.format(key="'spans'", delta="NEW.next_span_seq - OLD.next_span_seq")
    removed = _BUMP.format(key="'spans'", delta=-1)
    triggers += [
        "CREATE TRIGGER counts_rollouts_status AFTER UPDATE OF status ON rollouts "
        f"WHEN OLD.status IS NOT NEW.status BEGIN {out}; {into}; END",
        "CREATE TRIGGER counts_spans_reserved AFTER UPDATE OF next_span_seq ON rollouts "
        f"WHEN OLD.next_span_seq IS NOT NEW.next_span_seq BEGIN {reserved}; END",
        f"CREATE TRIGGER counts_spans_delete AFTER DELETE ON spans BEGIN {removed}; END",
    ]
    return triggers


def _add_counters(connection: sqlite3.Connection) -> None:
    """Give a file without kept counts its ``counts`` table and triggers, filled in once from
    the rows it holds (a new file: from none).

    In one write transaction, as :func:`_add_columns`: no row is written between the count and
    the triggers that keep it.
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        present = connection.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'counts'"
        ).fetchone()
        if present is None:
            connection.execute(
                "CREATE TABLE counts (key TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID"
            )
            connection.execute(
                "INSERT INTO counts (key, n) "
                "SELECT 'rollouts.' || status, COUNT(*) FROM rollouts GROUP BY status"
            )
            for table, key in {**_COUNTED, "spans": "spans"}.items():
                connection.execute(
                    f"INSERT INTO counts (key, n) SELECT '{key}', COUNT(*) FROM {table}"
                )
            for trigger in _counter_triggers():
                connection.execute(trigger)
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def read_counts(connection: sqlite3.Connection) -> dict[str, int]:
    """The kept counts: ``rollouts.<status>``, ``attempts``, ``spans``, ``resources``,
    ``workers`` (see :meth:`agl.store._tx.Transaction.counts`)."""
    return {key: int(n) for key, n in connection.execute("SELECT key, n FROM counts")}


def prepare(connection: sqlite3.Connection, path: Path) -> None:
    """Create the tables (or check a file's schema version), then add what an older agl lacks.

    A file of another schema version is refused before anything is written to it.

    Raises:
        StoreError: The file holds a store of another schema version.
    """
    _check_version(connection, path)
    connection.executescript(SCHEMA)
    connection.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
        (str(SCHEMA_VERSION),),
    )
    _check_version(connection, path)  # another process may have created the file meanwhile
    _add_columns(connection)
    _add_counters(connection)


def _check_version(connection: sqlite3.Connection, path: Path) -> None:
    has_meta = connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
    ).fetchone()
    if has_meta is None:
        return
    row = connection.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is not None and int(row[0]) != SCHEMA_VERSION:
        raise StoreError(
            f"{str(path)!r} holds an agl store of schema version {row[0]}; "
            f"this agl reads version {SCHEMA_VERSION}"
        )
