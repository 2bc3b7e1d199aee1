"""Pick a store backend from a URL."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from agl.errors import InvalidInputError
from agl.store.base import Store

SCHEMES = ("memory", "sqlite", "http", "https")


def open_store(url: str, **options: Any) -> Store:
    """Open the store a URL names.

    - ``memory://``: in this process's memory;
    - ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``: a durable SQLite file
      (created if missing), options in the query string (see :mod:`agl.store.sqlite`);
    - ``http://host:port`` or ``https://…``: a client of ``agl store serve``; keyword options
      (``token``, ``timeout``, ``retries``) go to :class:`~agl.store.http.HttpStore`;
    - any other scheme a plugin provides (``agl_stores``): ``factory(url, **options)``.

    The returned store is an async context manager; leaving it closes the store.

    Raises:
        InvalidInputError: the URL's scheme is not one of the above, or its options are wrong.
        agl.plugins.PluginError: an installed plugin is invalid, or the scheme's factory
            returned something that is not a store.
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidInputError(
            f"store URL must look like memory://, sqlite:///path.db or http://host:port; "
            f"got {url!r}",
            field="url",
            value=url,
        )
    scheme = urlsplit(url).scheme.lower()
    if scheme == "memory":
        from agl.store.memory import MemoryStore

        return MemoryStore(url, **options)
    if scheme == "sqlite":
        from agl.store.sqlite import SQLiteStore

        if options:
            raise InvalidInputError(
                f"SQLite store options go in the URL's query string, got {sorted(options)}",
                field="options",
            )
        return SQLiteStore.from_url(url)
    if scheme in ("http", "https"):
        from agl.store.http import HttpStore

        return HttpStore(url, **options)
    return _open_plugin_store(scheme, url, options)


def _open_plugin_store(scheme: str, url: str, options: dict[str, Any]) -> Store:
    from agl.plugins import PluginError, installed_plugins, store_factories

    factories = store_factories()
    factory = factories.get(scheme)
    if factory is None:
        known = sorted({*SCHEMES, *factories})
        raise InvalidInputError(
            f"unknown store URL scheme {scheme!r} in {url!r}; expected one of {known} "
            "(plugins add schemes: `agl plugins` lists them)",
            field="url",
            value=url,
        )
    store: object = factory(url, **options)
    if not isinstance(store, Store):
        who = next(p for p in installed_plugins() if scheme in p.stores)
        raise PluginError(
            f"the {scheme!r} store factory of plugin {who.describe()} returned "
            f"{type(store).__name__}, which is not an agl.Store",
            field="url",
            value=url,
        )
    return store
