"""Every store backend passes the same conformance suite."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

import agl
from agl.store._memory import MemoryStore
from agl.store._serve import StoreServer
from agl.store._sqlite import SQLiteStore
from agl.testing.postgres import PostgresServer
from agl.testing.store import StoreConformance


class TestMemoryStore(StoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[agl.Store]:
        async with MemoryStore() as store:
            yield store


class TestSQLiteStore(StoreConformance):
    persistent = True

    @pytest.fixture
    async def opened(self) -> AsyncIterator[list[agl.Store]]:
        stores: list[agl.Store] = []
        yield stores
        for store in stores:
            await store.close()

    @pytest.fixture
    async def store(self, tmp_path: Path, opened: list[agl.Store]) -> agl.Store:
        opened.append(agl.open_store(f"sqlite:///{tmp_path}/store.db"))
        return opened[-1]

    @pytest.fixture
    def reopen(
        self, tmp_path: Path, opened: list[agl.Store]
    ) -> Callable[[agl.Store], Awaitable[agl.Store]]:
        async def reopen(store: agl.Store) -> agl.Store:
            await store.close()
            opened.append(SQLiteStore(tmp_path / "store.db"))
            return opened[-1]

        return reopen


class TestHttpStoreOverMemory(StoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[agl.Store]:
        with StoreServer("memory://") as server:
            async with agl.open_store(server.url) as store:
                yield store


class TestHttpStoreOverSQLite(StoreConformance):
    persistent = True

    @pytest.fixture
    async def opened(self, tmp_path: Path) -> AsyncIterator[list[agl.Store]]:
        self._server = StoreServer(f"sqlite:///{tmp_path}/store.db")
        self._server.start()
        stores: list[agl.Store] = []
        try:
            yield stores
        finally:
            for store in stores:
                await store.close()
            self._server.stop()

    @pytest.fixture
    async def store(self, opened: list[agl.Store]) -> agl.Store:
        opened.append(agl.open_store(self._server.url))
        return opened[-1]

    @pytest.fixture
    def reopen(
        self, tmp_path: Path, opened: list[agl.Store]
    ) -> Callable[[agl.Store], Awaitable[agl.Store]]:
        async def reopen(store: agl.Store) -> agl.Store:
            # Restart the server on the same file: a new client sees the same data.
            await store.close()
            self._server.stop()
            self._server = StoreServer(f"sqlite:///{tmp_path}/store.db")
            self._server.start()
            opened.append(agl.open_store(self._server.url))
            return opened[-1]

        return reopen


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


class TestPostgresStore(StoreConformance):
    persistent = True

    @pytest.fixture
    async def opened(self, postgres: PostgresServer) -> AsyncIterator[list[agl.Store]]:
        self._url = postgres.create_database(f"conformance_{uuid.uuid4().hex}")
        stores: list[agl.Store] = []
        yield stores
        for store in stores:
            await store.close()

    @pytest.fixture
    async def store(self, opened: list[agl.Store]) -> agl.Store:
        opened.append(agl.open_store(self._url))
        return opened[-1]

    @pytest.fixture
    def reopen(self, opened: list[agl.Store]) -> Callable[[agl.Store], Awaitable[agl.Store]]:
        async def reopen(store: agl.Store) -> agl.Store:
            await store.close()
            opened.append(agl.open_store(self._url))
            return opened[-1]

        return reopen
