"""The store server's OTLP/HTTP route: ``POST /v1/traces``, as OpenTelemetry exporters send.

The body (protobuf or JSON, gzip or not) is parsed whole; its spans are converted and stored a
chunk at a time, so a large export is never all in memory as agl spans at once. A body that
does not parse is a 400 (OTLP says senders must not retry it); a span that cannot be read, or
that the store refuses (an unknown rollout), is counted in OTLP's ``partial_success``, named by
its path in the request, while the good spans sent with it are stored. A request none of whose
spans could be stored is a 400 naming why. A store that cannot take spans now (its disk full,
its database unreachable) is a 503 with ``Retry-After``, which OTLP exporters retry; spans of the
request stored before it are not stored twice when it comes again.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, Response

from agl._errors import InvalidInputError, NotFoundError
from agl.store._base import Store
from agl.store._server_errors import MalformedBody
from agl.store._span_batches import add_spans_keeping_good, summary

__all__ = ["CHUNK_SPANS", "add_otlp_route"]

CHUNK_SPANS = 5000
"""Spans converted and stored at a time. A 28 MB export of 200,000 spans peaked 855 MB over
the server's resting memory when taken whole, 159 MB in chunks of 5,000, for 30-40 % more time
(40 transactions instead of one; ``benchmarks/store_memory.py``)."""


def add_otlp_route(app: FastAPI, store: Store, max_body_bytes: int) -> None:
    """Add ``POST /v1/traces`` to ``app``, storing into ``store``."""

    @app.post(
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
            body = otlp.decode_body(await request.body(), encoding, max_body_bytes)
            chunks = otlp.read_traces(body, content_type, chunk=CHUNK_SPANS)
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
