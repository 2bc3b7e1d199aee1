"""The example's data: a real SQLite database, its questions, and the reward.

Everything comes from the files in ``data/`` (nothing is downloaded): ``schema.sql`` (five
tables of a small company), ``rows.sql`` (their rows) and ``questions.jsonl`` (30 questions with
their gold SQL, split into ``train`` and ``val``). :func:`database` builds the SQLite file once
per process, outside the repository, and every query runs on it through :func:`execute`: a
read-only connection with a time limit, so SQL written by a model can neither change the data
nor hang a rollout.

The reward (:func:`reward`) executes the predicted and the gold SQL and compares what they
return: 1.0 for the same rows, else 0.0 (a query that fails, or no query at all, is 0.0). Rows
are compared as a multiset unless the gold query orders its result (a top-level ``ORDER BY``);
column names do not matter, column order does, and floats are compared to 6 decimals.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "DATA",
    "QueryError",
    "Row",
    "database",
    "execute",
    "is_ordered",
    "questions",
    "reward",
    "same_result",
    "schema",
]

DATA = Path(__file__).resolve().parent / "data"
"""The shipped schema, rows and questions."""

Row = tuple[Any, ...]


class QueryError(Exception):
    """A query could not run: bad SQL, not a query, too slow, or too many rows."""


def schema() -> str:
    """The schema the agents are shown: ``schema.sql`` as it is, comments included."""
    return (DATA / "schema.sql").read_text()


def questions(split: Literal["train", "val", "all"] = "all") -> list[dict[str, str]]:
    """The questions of ``split``: dicts with ``id``, ``split``, ``question`` and gold ``sql``."""
    rows = [json.loads(line) for line in (DATA / "questions.jsonl").read_text().splitlines()]
    return [row for row in rows if split in ("all", row["split"])]


@functools.cache
def database() -> Path:
    """The SQLite file built from ``schema.sql`` and ``rows.sql`` (built once, then reused).

    It lives in the temporary directory under a name derived from the files' contents, so an
    edit to the data builds a fresh database, and concurrent builders never see a half-written
    file (each builds its own copy and renames it into place).
    """
    script = schema() + "\n" + (DATA / "rows.sql").read_text()
    digest = hashlib.sha256(script.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"agl-langgraph-sql-{digest}.db"
    if not path.exists():
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".partial")
        os.close(fd)
        try:
            with contextlib.closing(sqlite3.connect(partial)) as connection:
                connection.executescript(script)
            os.replace(partial, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
    return path


def execute(
    sql: str,
    *,
    path: Path | None = None,
    timeout: float = 2.0,
    max_rows: int = 1000,
) -> list[Row]:
    """Run one read-only query on the database and return its rows.

    Args:
        sql: One SQL statement (a trailing ``;`` is fine).
        path: The database file (default: :func:`database`).
        timeout: Seconds the query may run.
        max_rows: More rows than this is an error (a runaway join, not an answer).

    Raises:
        QueryError: The SQL is empty, not a single query, invalid, writes, is too slow, or
            returns too many rows.
    """
    if not sql.strip():
        raise QueryError("no SQL to run")
    uri = (path or database()).resolve().as_uri() + "?mode=ro"
    connection = sqlite3.connect(uri, uri=True)
    deadline = time.monotonic() + timeout
    # Called every 1000 virtual-machine steps; a non-zero answer interrupts the query.
    connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)  # no other database files
    try:
        cursor = connection.execute(sql)
        if cursor.description is None:
            raise QueryError("the SQL is not a query (it returns no columns)")
        rows = cursor.fetchmany(max_rows + 1)
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
        if time.monotonic() > deadline:
            raise QueryError(f"the query ran longer than {timeout:g} s") from exc
        raise QueryError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        connection.close()
    if len(rows) > max_rows:
        raise QueryError(f"the query returns more than {max_rows} rows")
    return rows


def is_ordered(sql: str) -> bool:
    """Whether ``sql`` orders its result: an ``ORDER BY`` outside any parentheses."""
    depth, top = 0, []
    for char in sql:
        if char == "(":
            depth += 1
        elif char == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            top.append(char)
    return re.search(r"\border\s+by\b", "".join(top), re.IGNORECASE) is not None


def same_result(got: Sequence[Row], expected: Sequence[Row], *, ordered: bool) -> bool:
    """Whether two results hold the same rows (in the same order, if ``ordered``)."""
    left, right = [_normalized(row) for row in got], [_normalized(row) for row in expected]
    return left == right if ordered else Counter(left) == Counter(right)


def reward(predicted: str, gold: str, *, path: Path | None = None) -> float:
    """1.0 if ``predicted`` returns what ``gold`` returns, else 0.0 (errors included).

    Raises:
        QueryError: The gold SQL itself fails (a bug in the data, not the agent's fault).
    """
    expected = execute(gold, path=path)
    try:
        got = execute(predicted, path=path)
    except QueryError:
        return 0.0
    return 1.0 if same_result(got, expected, ordered=is_ordered(gold)) else 0.0


def _normalized(row: Row) -> Row:
    return tuple(round(value, 6) if isinstance(value, float) else value for value in row)
