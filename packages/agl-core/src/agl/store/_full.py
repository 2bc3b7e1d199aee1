"""A full disk under a store: how each backend recognizes one, and what the store answers.

A store whose disk is full writes nothing of the call that needed room and raises
:class:`~agl.StoreFullError`, which is retryable: the store server answers it with 503 and
``Retry-After`` (:data:`RETRY_AFTER_SECONDS`), the status OpenTelemetry's OTLP/HTTP exporters
retry (they retry 429, 502, 503 and 504, never 507), and agl's span senders keep the spans
and send them again (:mod:`agl.tracing._exporter`). What was stored before stays stored, and
reads keep working. The message names the cause and what the operator should do.

How the backends say it:

- SQLite answers most writes on a full disk with ``SQLITE_FULL`` ("database or disk is full").
  Where it grows a file by other means it reports an I/O error instead: a connection that maps
  its WAL index on a full disk gets ``SQLITE_IOERR_SHMSIZE`` ("disk I/O error"), and a file
  system that reports ``ENOSPC`` only at ``fsync`` gives ``SQLITE_IOERR_FSYNC``. An I/O error
  counts as a full disk when the disk holding the database has less than
  :data:`NEARLY_FULL_BYTES` free: the error itself does not say why it happened.
- PostgreSQL reports SQLSTATE 53100 (``disk_full``, psycopg's ``DiskFull``) for a table,
  index or temporary file it cannot extend. Its other "insufficient resources" errors (out of
  memory, too many connections) are answered as :class:`~agl.StoreUnavailableError`: retry later.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from agl._errors import StoreFullError

__all__ = [
    "NEARLY_FULL_BYTES",
    "RETRY_AFTER_SECONDS",
    "full_disk_error",
    "sqlite_detail",
    "sqlite_disk_full",
]

RETRY_AFTER_SECONDS = 2
"""The store server's ``Retry-After`` on a 503. OpenTelemetry's OTLP/HTTP exporters wait what
it says between tries, at most 6 tries within their timeout (10 s by default), and give up at
once when it is longer than the time they have left: 2 s keeps them trying for their whole
timeout. agl's HTTP client waits it too between its own retries."""

NEARLY_FULL_BYTES = 1024 * 1024
"""Free space under which an I/O error of SQLite is taken for a full disk."""


def full_disk_error(store: str, where: str, detail: str) -> StoreFullError:
    """The error of a write refused because the disk holding ``where`` is full.

    Args:
        store: The store, as its URL shows it (password redacted).
        where: What lies on the full disk (a file, a database), for the operator to find it.
        detail: The backend's own words, for the record.
    """
    return StoreFullError(
        f"the store {store} cannot write: disk full (no space left on the device holding "
        f"{where}; {detail}). Nothing of this write was kept and everything stored before is "
        "intact. Free space on that disk or grow it; agl's span senders keep their spans "
        "meanwhile and store them once there is room, other writes can be sent again then"
    )


def sqlite_disk_full(exc: BaseException, path: Path | None) -> bool:
    """Whether SQLite raised ``exc`` because the disk holding the database ``path`` is full."""
    if not isinstance(exc, sqlite3.Error):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name == "SQLITE_FULL":
        return True
    if name.startswith("SQLITE_IOERR") and path is not None:
        try:
            return shutil.disk_usage(path.resolve().parent).free < NEARLY_FULL_BYTES
        except OSError:
            return False
    return False


def sqlite_detail(exc: BaseException) -> str:
    """SQLite's words for ``exc``: its error name and message."""
    name = getattr(exc, "sqlite_errorname", None)
    return f"{name}: {exc}" if name else str(exc)
