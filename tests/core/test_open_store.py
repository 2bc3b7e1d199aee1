"""open_store picks a backend by URL and rejects what it cannot open, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

import agl
from agl.store._http import HttpStore
from agl.store._memory import MemoryStore
from agl.store._sqlite import SQLiteStore


@pytest.mark.anyio
async def test_backends_by_scheme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(agl.open_store("memory://"), MemoryStore)
    absolute = agl.open_store(f"sqlite:///{tmp_path}/a.db")
    assert isinstance(absolute, SQLiteStore)
    assert absolute.path == tmp_path / "a.db"
    await absolute.close()
    monkeypatch.chdir(tmp_path)
    relative = agl.open_store("sqlite:///rel.db?synchronous=normal&poll_interval=0.05")
    assert isinstance(relative, SQLiteStore)
    assert relative.path == Path("rel.db")
    await relative.close()
    assert (tmp_path / "rel.db").exists()
    remote = agl.open_store("http://127.0.0.1:1", token="t")
    assert isinstance(remote, HttpStore)
    assert remote.url == "http://127.0.0.1:1"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mongodb://x", "unknown store URL scheme"),
        ("postgresql://agl:pw@127.0.0.1:1/db?pool_size=x", "PostgreSQL store URL"),
        ("no-scheme", "must look like"),
        ("sqlite:///", "no file path"),
        ("sqlite:///x.db?color=blue", "unknown SQLite store option"),
        ("sqlite:///x.db?synchronous=sometimes", "synchronous must be"),
        ("sqlite:///missing-folder/x.db", "does not exist"),
        ("sqlite://host/x.db", "names a host"),
        ("http://", "http://host:port"),
    ],
)
def test_bad_urls_are_refused_clearly(
    url: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(agl.InvalidInputError, match=message):
        agl.open_store(url)


def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database " * 100)
    with pytest.raises(agl.InvalidInputError, match="not a usable SQLite database"):
        agl.open_store(f"sqlite:///{path}")
    assert path.read_text().startswith("these are my notes")


@pytest.mark.anyio
async def test_unreachable_http_store_raises_store_unavailable() -> None:
    async with agl.open_store("http://127.0.0.1:9", retries=1, timeout=2) as store:
        with pytest.raises(agl.StoreUnavailableError, match="unreachable"):
            await store.statistics()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


_SQLITE_BEFORE_FILTERS = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
CREATE TABLE rollouts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, rollout_id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL, mode TEXT NOT NULL, queue_pos INTEGER,
    next_span_seq INTEGER NOT NULL DEFAULT 1, data TEXT NOT NULL
);
CREATE TABLE attempts (
    rollout_id TEXT NOT NULL, attempt_id TEXT NOT NULL, sequence INTEGER NOT NULL,
    deadline REAL, data TEXT NOT NULL, PRIMARY KEY (rollout_id, attempt_id)
) WITHOUT ROWID;
"""
"""The tables as an agl without rollout filters or metrics wrote them."""


@pytest.mark.anyio
async def test_a_sqlite_file_from_before_the_filters_opens_and_is_filled_in(
    tmp_path: Path,
) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(_SQLITE_BEFORE_FILTERS)
        rollout = agl.Rollout(rollout_id="ran", input=1, enqueue_time=5.0, mode="val")
        attempt = agl.Attempt(
            rollout_id="ran", attempt_id="at-1", sequence=1, worker_id="w", start_time=6.0
        )
        db.execute(
            "INSERT INTO rollouts (rollout_id, status, mode, data) VALUES ('ran', 'running', "
            "'val', ?)",
            (rollout.model_dump_json(),),
        )
        db.execute(
            "INSERT INTO attempts VALUES ('ran', 'at-1', 1, NULL, ?)", (attempt.model_dump_json(),)
        )
    for _ in range(2):  # a second opening finds everything in place
        async with SQLiteStore(path) as store:
            by_time = await store.query_rollouts(since=5.0, until=5.5)
            assert [r.rollout_id for r in by_time.rollouts] == ["ran"]
            assert (await store.query_rollouts(since=5.5)).total == 0
            assert (await store.query_rollouts(worker_id="w")).total == 1
            await store.add_metrics([agl.MetricsRow(run="r", step=0, time=1.0)])
            assert await store.metric_runs() == ["r"]
    # Kept counts, filled in from the rows already stored, then kept by every write.
    with sqlite3.connect(path) as db:
        assert dict(db.execute("SELECT key, n FROM counts WHERE n <> 0")) == {
            "rollouts.running": 1,
            "attempts": 1,
        }
    async with SQLiteStore(path) as store:
        await store.enqueue_rollouts([agl.RolloutRequest(input=2, rollout_id="new")])
        await store.dequeue_rollouts(worker_id="w")
        stats = await store.statistics()
        assert (stats.rollouts, stats.rollouts_by_status[agl.RolloutStatus.PREPARING]) == (2, 1)
        assert (stats.attempts, stats.workers, stats.spans) == (2, 1, 0)
    with sqlite3.connect(path) as db:
        assert dict(db.execute("SELECT key, n FROM counts WHERE n <> 0")) == {
            "rollouts.running": 1,
            "rollouts.preparing": 1,
            "attempts": 2,
            "workers": 1,
        }


def test_a_sqlite_file_of_another_schema_version_is_refused_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    import sqlite3

    from agl.store._sqlite_schema import SCHEMA_VERSION

    path = tmp_path / "newer.db"
    newer = _SQLITE_BEFORE_FILTERS.replace("'schema_version', '1'", "'schema_version', '99'")
    with sqlite3.connect(path) as db:
        db.executescript(newer)
    tables = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
    with sqlite3.connect(path) as db:
        before = db.execute(tables).fetchall()
    with pytest.raises(
        agl.StoreError, match=f"schema version 99; this agl reads version {SCHEMA_VERSION}"
    ):
        SQLiteStore(path)
    with sqlite3.connect(path) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(rollouts)")}
        after = db.execute(tables).fetchall()
    # nothing added to a file this agl cannot read
    assert "enqueue_time" not in columns
    assert after == before
