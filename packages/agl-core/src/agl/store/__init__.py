"""Stores: where rollouts, attempts, spans and resources live.

Open one by URL with :func:`open_store`; every backend implements :class:`Store`. The built-in
backends, for building one directly: :class:`MemoryStore`, :class:`SQLiteStore`,
:class:`PostgresStore` and :class:`HttpStore` (a client of a store server); :class:`StoreServer`
serves any store over HTTP. ``import agl.store`` stays light: those load their module (aiohttp,
psycopg, uvicorn) on first use.
"""

from typing import TYPE_CHECKING, Any

from agl.store._base import ClosingStore, Store, StoreStatistics
from agl.store._open import open_store

if TYPE_CHECKING:
    from agl.store._http import HttpStore
    from agl.store._memory import MemoryStore
    from agl.store._postgres import PostgresStore
    from agl.store._serve import StoreServer
    from agl.store._sqlite import SQLiteStore

__all__ = [
    "ClosingStore",
    "HttpStore",
    "MemoryStore",
    "PostgresStore",
    "SQLiteStore",
    "Store",
    "StoreServer",
    "StoreStatistics",
    "open_store",
]

_LAZY = {
    "HttpStore": "agl.store._http",
    "MemoryStore": "agl.store._memory",
    "PostgresStore": "agl.store._postgres",
    "SQLiteStore": "agl.store._sqlite",
    "StoreServer": "agl.store._serve",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'agl.store' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
