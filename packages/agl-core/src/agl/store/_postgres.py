"""``postgresql://user:password@host:5432/database``: the store for many machines.

Several ``agl store serve`` processes (or trainers and runners opening the database directly)
share one PostgreSQL database; none of them holds state of its own. The store's rules are the
same functions every backend runs (:mod:`agl.store._engine`); here each operation runs in one
database transaction, and how concurrent servers stay correct is written beside the SQL
(:mod:`agl.store._postgres_sql`; the schema: :mod:`agl.store._postgres_schema`).

The driver is psycopg 3, not asyncpg: the engine's rules are synchronous functions over a
:class:`~agl.store._tx.Transaction` (shared with the memory and SQLite stores), and psycopg
offers both a synchronous connection pool, whose connections run those rules in worker threads,
and the LISTEN/NOTIFY support the store waits on; asyncpg is asynchronous only, so the rules
would need a second, async copy. Values are always bound by psycopg, never formatted into SQL.

Waiting: ``dequeue_rollouts(wait=…)`` and ``wait_for_rollouts`` wake when any server commits a
change to a rollout (each such transaction notifies a channel this store listens on). A waiter
also looks again every ``poll_interval`` seconds, only to notice deadlines (an attempt's timeout
or lost heartbeats), which no write announces.

A transaction that loses a race to another server (a serialization failure, a deadlock, a
unique row inserted first) is retried from the start, up to ``retries`` times; every rule
validates before it writes, so a retry sees the winner's row and answers as if it had come
second. Commits are durable (PostgreSQL's ``synchronous_commit``) before the call returns.
A disk that fills up (SQLSTATE 53100) fails the write with the retryable
:class:`~agl.StoreFullError`; the server's other resource errors (class 53: memory,
connections) with :class:`~agl.StoreUnavailableError` (:mod:`agl.store._full`).

URL options (query string), besides libpq's own: ``pool_size`` (connections per store,
default 8), ``poll_interval`` (seconds, default 1.0), ``retries`` (default 20). The schema's
version is stored; an older schema is migrated in place when the store opens, a newer one (a
newer agl wrote it) is refused.

The password: leave it out of the URL (``postgresql://agl@db:5432/agl``), where ``ps`` would
show it on a command line, and let libpq find it, as every PostgreSQL client does: in
``PGPASSWORD``, or in a password file (``PGPASSFILE``, by default ``~/.pgpass``). Messages and
logs name the URL without its password.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from agl._errors import AglError, InvalidInputError, StoreError, StoreUnavailableError
from agl.store import _postgres_schema as schema
from agl.store import _postgres_sql as sql
from agl.store._checks import redact
from agl.store._full import full_disk_error
from agl.store._stateful import StatefulStore
from agl.store._tx import Transaction

__all__ = ["PostgresStore"]

T = TypeVar("T")

_OPTIONS = {"pool_size", "poll_interval", "retries"}
_RACES = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected, pg_errors.UniqueViolation)


class PostgresStore(StatefulStore):
    """A store in one PostgreSQL database. See the module docstring for the guarantees."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        poll_interval: float = 1.0,
        retries: int = 20,
        connect_timeout: float = 10.0,
    ) -> None:
        super().__init__(url, poll_interval=poll_interval)
        self._display = redact(url)
        conninfo = _conninfo(url)
        self._retries = retries
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=connect_timeout,
            name="agl-postgres-store",
            kwargs={"connect_timeout": max(1, round(connect_timeout))},
        )
        try:
            with psycopg.connect(conninfo, connect_timeout=max(1, round(connect_timeout))) as db:
                found, now = schema.migrate(db)
        except psycopg.Error as exc:
            raise _connection_error(self._display, exc) from None
        if found > schema.SCHEMA_VERSION:
            raise StoreError(
                f"the database at {self._display} holds an agl store of schema version {found}, "
                f"written by a newer agl; this agl reads up to version {schema.SCHEMA_VERSION}: "
                "upgrade agl-core"
            )
        self.migrated_from = found if found < now else None
        """The schema version the database had, where opening it migrated it; else None."""
        self._pool.open()
        self._threads = ThreadPoolExecutor(pool_size, thread_name_prefix="agl-postgres")
        self._listener = _Listener(conninfo, self._notifier.notify_all)
        self._listener.start()

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """Open ``postgresql://…?pool_size=8&poll_interval=1&retries=20``."""
        parts = urlsplit(url)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        ours = {key: value for key, value in pairs if key in _OPTIONS}
        rest = [(key, value) for key, value in pairs if key not in _OPTIONS]
        try:
            pool_size = int(ours.get("pool_size", 8))
            poll = float(ours.get("poll_interval", 1.0))
            retries = int(ours.get("retries", 20))
        except ValueError as exc:
            raise InvalidInputError(
                f"PostgreSQL store URL {redact(url)!r}: {exc}", field="url", value=redact(url)
            ) from None
        if pool_size < 1 or retries < 0 or poll <= 0:
            raise InvalidInputError(
                f"PostgreSQL store URL {redact(url)!r}: pool_size must be at least 1, retries "
                "at least 0 and poll_interval above 0",
                field="url",
                value=redact(url),
            )
        clean = urlunsplit(parts._replace(query=urlencode(rest)))
        return cls(clean, pool_size=pool_size, poll_interval=poll, retries=retries)

    @property
    def url(self) -> str:
        return self._display

    async def _run(self, operation: Callable[[Transaction], T]) -> T:
        if self._closed:
            raise StoreError(f"the store {self._display} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._run_sync, operation)

    def _run_sync(self, operation: Callable[[Transaction], T]) -> T:
        for attempt in range(self._retries + 1):
            try:
                # In pipeline mode a statement whose result nobody reads (most writes) is
                # sent without waiting for its answer: the round trips of an operation are
                # those of its reads, plus the commit.
                with self._pool.connection() as db, db.pipeline(), db.transaction():
                    result = operation(sql.PostgresTransaction(db))
                return result
            except _RACES:
                if attempt == self._retries:
                    raise StoreError(
                        f"PostgreSQL store {self._display}: an operation lost to concurrent "
                        f"writers {self._retries + 1} times; nothing of it was kept"
                    ) from None
                time.sleep(random.uniform(0, 0.002 * 2 ** min(attempt, 6)))
            except PoolTimeout as exc:
                raise StoreUnavailableError(
                    f"cannot reach PostgreSQL at {self._display}: {exc}"
                ) from None
            except pg_errors.InsufficientResources as exc:  # a full disk, memory, connections
                raise _out_of_resources(self._display, exc) from None
            except psycopg.OperationalError as exc:
                raise _connection_error(self._display, exc) from None
            except psycopg.Error as exc:
                raise StoreError(
                    f"PostgreSQL store {self._display}: {type(exc).__name__}: {exc}"
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._listener.stop()
            await asyncio.to_thread(self._shutdown)

    def _shutdown(self) -> None:
        self._threads.shutdown(wait=True)
        self._pool.close()
        self._listener.join()


class _Listener(threading.Thread):
    """LISTENs on the store's channel and wakes the store's waiters on each notification.

    A lost connection is re-opened (waiters keep their ``poll_interval`` re-check meanwhile).
    """

    def __init__(self, conninfo: str, wake: Callable[[], None]) -> None:
        super().__init__(name="agl-postgres-listen", daemon=True)
        self._conninfo = conninfo
        self._wake = wake
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=5) as db:
                    db.execute(f"LISTEN {schema.CHANNEL}")
                    self._wake()  # changes made while no one listened
                    while not self._stopping.is_set():
                        for _ in db.notifies(timeout=0.2):
                            self._wake()
            except psycopg.Error:
                self._stopping.wait(0.5)


def _conninfo(url: str) -> str:
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise InvalidInputError(
            f"malformed PostgreSQL URL {redact(url)!r}: {exc}; expected "
            "postgresql://user:password@host:5432/database",
            field="url",
            value=redact(url),
        ) from None
    return url


def _connection_error(display: str, exc: Exception) -> AglError:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    lowered = message.lower()
    if "connection option" in lowered or "invalid uri" in lowered or "invalid integer" in lowered:
        return InvalidInputError(
            f"malformed PostgreSQL URL {display!r}: {message}; expected "
            "postgresql://user:password@host:5432/database",
            field="url",
            value=display,
        )
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return StoreUnavailableError(
            f"PostgreSQL at {display} refused the credentials: {message}; the password comes "
            "from PGPASSWORD or a password file (PGPASSFILE, default ~/.pgpass, mode 0600)"
        )
    if "does not exist" in lowered and "database" in lowered:
        return StoreUnavailableError(f"PostgreSQL at {display}: {message}; create it first")
    if isinstance(exc, pg_errors.InsufficientResources) or "no space left" in lowered:
        return _out_of_resources(display, exc)
    return StoreUnavailableError(f"cannot reach PostgreSQL at {display}: {message}")


def _out_of_resources(display: str, exc: Exception) -> StoreUnavailableError:
    """A retryable error for PostgreSQL's SQLSTATE class 53: a full disk (53100) as such, out
    of memory or connections as a server that cannot serve now."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, pg_errors.DiskFull) or "no space left" in message.lower():
        return full_disk_error(display, "the database's files on the PostgreSQL server", message)
    return StoreUnavailableError(
        f"PostgreSQL at {display} is out of resources, retry later: {message}"
    )
