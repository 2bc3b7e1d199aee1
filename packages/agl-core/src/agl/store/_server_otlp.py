"""The store server's OTLP/HTTP route: ``POST /v1/traces``, as OpenTelemetry exporters send.

The body (protobuf or JSON, gzip or not) is read into one buffer (not a list of parts joined
into a second copy), its framing checked whole, and its spans parsed, converted and stored a
chunk at a time: a large export is never all in memory as parsed messages or agl spans at
once, so the server's peak grows by about twice the body (``benchmarks/store_memory.py``).

A body that does not parse is a 400 (OTLP says senders must not retry it); a span that cannot
be read (its own bytes do not parse, it lacks the rollout's ids), or that the store refuses (an
unknown rollout), is counted in OTLP's ``partial_success``, named by its path in the request,
while the good spans sent with it are stored. A request none of whose spans could be stored is
a 400 naming why. A store that cannot take spans now (its disk full, its database unreachable)
is a 503 with ``Retry-After``, which OTLP exporters retry; spans of the request stored before
it are not stored twice when it comes again.
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from agl._errors import InvalidInputError, NotFoundError
from agl.store._base import Store
from agl.store._server_errors import MalformedBody
from agl.store._span_batches import add_spans_keeping_good, summary

__all__ = ["CHUNK_BYTES", "CHUNK_SPANS", "otlp_router"]

CHUNK_SPANS = 1000
"""Spans converted and stored at a time. A 28 MB export of 200,000 spans peaked 855 MB over
the server's resting memory when converted whole, 159 MB in chunks of 5,000 (the request still
parsed whole), 34 MB walked a span at a time in chunks of 1,000 (``benchmarks/store_memory.py``)."""


CHUNK_BYTES = 2_000_000
"""And at most this much of the body's spans at a time: a chunk of large spans is as large, as
parsed messages, agl spans and stored rows, as a chunk of many small ones."""


async def _read_body(request: Request) -> bytearray:
    """The request's body in one growing buffer: Starlette's ``body()`` keeps the received
    parts and joins them, two copies of a large export at once."""
    body = bytearray()
    async for part in request.stream():
        body += part
    return body


def otlp_router(store: Store, max_body_bytes: int) -> APIRouter:
    """``POST /v1/traces``, storing into ``store`` bodies of up to ``max_body_bytes`` unpacked."""
    router = APIRouter()

    @router.post(
        "/v1/traces",
        tags=["otlp"],
        summary="OTLP/HTTP trace export",
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
                    "application/json": {"schema": {"type": "object"}},
                },
            }
        },
    )
    async def otlp_traces(request: Request) -> Response:
        from agl.store import _otlp as otlp

        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        encoding = request.headers.get("content-encoding", "identity")
        try:
            body = otlp.decode_body(await _read_body(request), encoding, max_body_bytes)
            chunks = otlp.read_traces(
                body, content_type, chunk=CHUNK_SPANS, chunk_bytes=CHUNK_BYTES
            )
        except (InvalidInputError, NotFoundError) as exc:
            # OTLP/HTTP says bad data is a 400 (and that senders must not retry it).
            raise MalformedBody(exc.message, field=exc.field, value=exc.value) from None
        del body
        refused: list[tuple[str, str]] = []  # (field, why)
        stored = 0
        for chunk in chunks:
            refused += chunk.bad
            if chunk.spans:
                outcome = await add_spans_keeping_good(store, chunk.spans)
                stored += outcome.stored
                for rejected in outcome.rejected:  # "spans[i] ..." as the span's OTLP path
                    path = chunk.paths[rejected.index]
                    message = rejected.message.replace(f"spans[{rejected.index}]", path, 1)
                    refused.append((path, message))
        reasons = summary([message for _, message in refused])
        if refused and not stored:  # all refused: the request failed, for good
            raise MalformedBody(reasons, field=refused[0][0])
        content, media_type = otlp.encode_response(content_type, len(refused), reasons)
        return Response(content=content, media_type=media_type)

    return router
