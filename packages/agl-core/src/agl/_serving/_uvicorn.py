"""How agl's servers run under uvicorn: one configuration, with deadlines for half-sent requests.

uvicorn closes a keep-alive connection that stays idle between requests, but waits without end
for a request that was begun and not finished: a client that opens a connection and sends
nothing, sends half its headers, or announces a body and stops sending it holds a connection
(and, for a body, the request's handler) for as long as it likes. The store server, the gateway
and the dashboard therefore serve through :func:`uvicorn_config`, whose HTTP protocol sets two
deadlines, as nginx's ``client_header_timeout`` and ``client_body_timeout`` do:

* **headers**: a request's headers must all arrive within ``header_timeout`` seconds of its
  first byte (of the connection, for its first request);
* **body**: once the headers are in, ``body_timeout`` seconds may pass between two reads of the
  body (a slow upload that keeps sending is fine; time the handler spends not reading is not
  counted).

A request that misses one is answered ``408 Request Timeout`` (unless its response has begun)
and its connection closed; a connection that sent nothing is closed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

__all__ = ["BODY_TIMEOUT", "HEADER_TIMEOUT", "deadline_protocol", "run", "uvicorn_config"]

HEADER_TIMEOUT = 30.0
"""Seconds a request's headers may take to arrive, from its first byte."""
BODY_TIMEOUT = 60.0
"""Seconds that may pass between two reads of a request's body."""

logger = logging.getLogger("agl.server")


def uvicorn_config(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str,
    header_timeout: float = HEADER_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
) -> Any:
    """The ``uvicorn.Config`` every agl server runs with: no access log, keep-alive 75 s, 5 s to
    finish in-flight requests on shutdown, and the request deadlines of this module."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=75,
        timeout_graceful_shutdown=5,
        http=deadline_protocol(header_timeout, body_timeout),
    )


def run(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str,
    header_timeout: float = HEADER_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
) -> None:
    """Serve ``app`` in the foreground with :func:`uvicorn_config` until interrupted."""
    import uvicorn

    config = uvicorn_config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
    )
    uvicorn.Server(config).run()


def deadline_protocol(header_timeout: float, body_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol (httptools when installed, else h11) with the header and
    body deadlines (seconds, both > 0)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    if not header_timeout > 0 or not body_timeout > 0:
        raise ValueError(
            f"header_timeout and body_timeout must be > 0 seconds, got {header_timeout!r} "
            f"and {body_timeout!r}"
        )
    return type(
        "DeadlineHTTPProtocol",
        (_Deadlines, AutoHTTPProtocol),
        {"header_timeout": header_timeout, "body_timeout": body_timeout},
    )


class _Deadlines:
    """The deadlines, over either of uvicorn's HTTP/1.1 protocols (both keep the request in
    progress as ``cycle``, with ``more_body`` until its body is all in)."""

    header_timeout: float = HEADER_TIMEOUT
    body_timeout: float = BODY_TIMEOUT

    # uvicorn's protocol has these
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    cycle: Any
    flow: Any
    client: tuple[str, int] | None
    timeout_keep_alive_task: asyncio.TimerHandle | None

    _deadline: asyncio.TimerHandle | None = None
    _waiting_for: str | None = None  # "headers" or "body" while a deadline runs
    _received = False  # any byte on this connection yet

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._watch(fresh=False)

    def data_received(self, data: bytes) -> None:
        self._received = True
        super().data_received(data)  # type: ignore[misc]
        self._watch(fresh=True)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        self._watch(fresh=False)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        super().connection_lost(exc)  # type: ignore[misc]

    def _watch(self, *, fresh: bool) -> None:
        """Arm, keep or stop the deadline for what the connection waits for now (``fresh``:
        bytes just came in)."""
        if self.transport.is_closing():
            self._stop()
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            if self.timeout_keep_alive_task is not None:
                self._stop()  # between requests: uvicorn's keep-alive timer closes it
            elif self._waiting_for != "headers":
                # a new connection, or a request begun: the clock runs from its first byte
                self._arm("headers", self.header_timeout)
        elif cycle.more_body:
            if fresh or self._waiting_for != "body":
                self._arm("body", self.body_timeout)
        else:  # the request is all in: the handler's time is its own
            self._stop()

    def _arm(self, waiting_for: str, seconds: float) -> None:
        self._stop()
        self._waiting_for = waiting_for
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _stop(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None
        self._waiting_for = None

    def _expired(self) -> None:
        waiting_for = self._waiting_for
        self._deadline = None
        self._waiting_for = None
        if self.transport.is_closing():
            return
        if waiting_for == "body" and self.flow.read_paused:
            # the handler is not reading (uvicorn paused the socket): not the client's delay
            self._arm("body", self.body_timeout)
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        if waiting_for == "headers" and not self._received:
            logger.info("closed a connection from %s: it sent nothing", client)
            self.transport.close()
            return
        if waiting_for == "headers":
            message = f"the request's headers did not all arrive within {self.header_timeout:g} s"
        else:
            message = f"no part of the request's body arrived for {self.body_timeout:g} s"
        logger.warning("closed a connection from %s: %s", client, message)
        cycle = self.cycle
        started = cycle is not None and not cycle.response_complete and cycle.response_started
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the handler reads a disconnect; what it sends is dropped
            cycle.message_event.set()
        if not started:
            body = f"408 Request Timeout: {message}\n".encode()
            head = (
                "HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n"
            )
            self.transport.write(head.encode() + body)
        self.transport.close()
