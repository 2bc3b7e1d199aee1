"""Pick a store backend from a URL."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from agl._errors import InvalidInputError
from agl.store._base import Store

SCHEMES = ("memory", "sqlite", "postgresql", "postgres", "http", "https")
"""The URL schemes of core's own stores."""


def scheme_of(url: str) -> str:
    """The lowercase scheme of a store URL.

    Raises:
        InvalidInputError: ``url`` does not look like a URL.
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidInputError(
            "store URL must look like memory://, sqlite:///path.db, postgresql://host/db or "
            f"http://host:port; got {url!r}",
            field="url",
            value=url,
        )
    return urlsplit(url).scheme.lower()


def open_store(
    url: str, *, schemes: Mapping[str, Callable[..., Store]] | None = None, **options: Any
) -> Store:
    """Open the store a URL names.

    - ``memory://``: in this process's memory;
    - ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``: a durable SQLite file
      (created if missing), options in the query string (see :mod:`agl.store._sqlite`);
    - ``postgresql://user:password@host:5432/database``: a PostgreSQL database that several
      processes and machines share (needs ``agl-core[postgres]``; see
      :mod:`agl.store._postgres`);
    - ``http://host:port`` or ``https://…``: a client of ``agl store serve``; keyword options
      (``token``, ``timeout``, ``retries``) go to :class:`~agl.store._http.HttpStore`;
    - any other scheme in ``schemes``: ``schemes[scheme](url, **options)``. A plugin's schemes
      are opened by its :class:`agl.plugins.PluginManager` (``PluginManager().open_store(url)``),
      as the trainer, the runner and the CLI do.

    The returned store is an async context manager; leaving it closes the store.

    Raises:
        InvalidInputError: the URL's scheme is not one of the above, or its options are wrong.
    """
    scheme = scheme_of(url)
    if scheme == "memory":
        from agl.store._memory import MemoryStore

        return MemoryStore(url, **options)
    if scheme == "sqlite":
        from agl.store._sqlite import SQLiteStore

        if options:
            raise InvalidInputError(
                f"SQLite store options go in the URL's query string, got {sorted(options)}",
                field="options",
            )
        return SQLiteStore.from_url(url)
    if scheme in ("postgresql", "postgres"):
        if options:
            raise InvalidInputError(
                f"PostgreSQL store options go in the URL's query string, got {sorted(options)}",
                field="options",
            )
        try:
            from agl.store._postgres import PostgresStore
        except ImportError as exc:
            raise InvalidInputError(
                f"the PostgreSQL store needs psycopg ({exc}): pip install 'agl-core[postgres]'",
                field="url",
            ) from None
        return PostgresStore.from_url(url)
    if scheme in ("http", "https"):
        from agl.store._http import HttpStore

        return HttpStore(url, **options)
    factory = (schemes or {}).get(scheme)
    if factory is None:
        known = sorted({*SCHEMES, *(schemes or {})})
        hint = (
            "plugins add schemes: `agl plugins` lists them"
            if schemes is not None
            else "a plugin's scheme opens with agl.plugins.PluginManager().open_store(url)"
        )
        raise InvalidInputError(
            f"unknown store URL scheme {scheme!r} in {url!r}; expected one of {known} ({hint})",
            field="url",
            value=url,
        )
    return factory(url, **options)
