"""What the HTTP store client needs beside its requests: URLs, errors back from the server,
long polls cut to the server's limit, and which failures happened in transport."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from pydantic_core import from_json

from agl._errors import (
    ERRORS_BY_NAME,
    AglError,
    InvalidInputError,
    StoreError,
    StoreUnavailableError,
)
from agl._ids import check_id
from agl.store._checks import MAX_POLL_SECONDS, MAX_WAIT_SECONDS

__all__ = [
    "BodyTooLargeError",
    "base_url",
    "decode",
    "failed_in_transport",
    "path_segment",
    "polls",
    "ssl_context",
    "starting_at",
]


def starting_at(url: str, index: int) -> str:
    """``url`` with its servers rotated so that client ``index`` starts at server ``index``.

    A URL of one server is returned as it is. Giving each of N clients its own start spreads
    them over the servers instead of sending all of them to the first.
    """
    servers = url.split(",")
    first = index % len(servers)
    return ",".join(servers[first:] + servers[:first])


def base_url(one: str, url: str) -> str:
    """One server's URL of ``url`` (the whole, for the message), without a trailing slash."""
    parts = urlsplit(one)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidInputError(
            f"HTTP store URL must look like http://host:port (several: "
            f"http://a:4747,http://b:4747), got {url!r}",
            field="url",
            value=url,
        )
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def failed_in_transport(exc: Exception) -> bool:
    """Whether a request that raised ``exc`` failed on its way (no connection, a connection
    lost, no answer in time), not in what the server answered."""
    import aiohttp

    return isinstance(
        exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | TimeoutError
    )


class BodyTooLargeError(InvalidInputError):
    """The server refused a request body over its limit (413): sent in smaller parts, it may
    pass."""


def decode(status: int, body: bytes) -> Any:
    """Return the JSON body of a success, or raise the error the server described."""
    try:
        data = from_json(body) if body else None
    except ValueError:
        data = None
    if 200 <= status < 300:
        return data
    info = data.get("error") if isinstance(data, dict) else None
    if not isinstance(info, dict):
        if status == 503:  # a proxy's, say: the server behind it cannot serve now
            raise StoreUnavailableError(
                f"store answered 503 (unavailable, after the client's retries): "
                f"{body.decode(errors='replace')[:200]!r}"
            )
        raise StoreError(
            f"store answered {status} without an agl error body: "
            f"{body.decode(errors='replace')[:200]!r}"
        )
    cls: type[AglError] = ERRORS_BY_NAME.get(str(info.get("type")), StoreError)
    if status == 413:
        cls = BodyTooLargeError
    raise cls(str(info.get("message")), field=info.get("field"), value=info.get("value"))


def ssl_context() -> Any:
    """Verify servers against certifi's roots, as httpx (the client before aiohttp) did: the
    process's one context (:func:`agl._serving._tls.tls_context`)."""
    from agl._serving._tls import tls_context

    return tls_context()


def path_segment(value: str, field: str) -> str:
    """One id as a path segment, checked as every store checks it (:mod:`agl._ids`)."""
    return quote(check_id(value, field, segment=True), safe="")


def polls(wait: Any) -> list[Any]:
    """A wait as the server's long polls: pieces of at most ``MAX_POLL_SECONDS``. A value the
    store refuses (negative, over an hour, not a number) goes as it is, for the server's 400."""
    if (
        isinstance(wait, bool)
        or not isinstance(wait, int | float)
        or not MAX_POLL_SECONDS < wait <= MAX_WAIT_SECONDS
    ):
        return [wait]
    whole, rest = divmod(float(wait), MAX_POLL_SECONDS)
    return [MAX_POLL_SECONDS] * int(whole) + ([rest] if rest > 0 else [])
