"""The instrumentor conformance suite: what every instrumentor must do, as pytest tests.

An instrumentor passes by subclassing :class:`InstrumentorConformance` and providing two
fixtures: ``instrumentor_factory``, which builds the instrumentor for a tracer (usually the
class itself, as registered with ``agl_instrumentors``), and ``llm_call``, a function that makes
the framework do its usual work with one user prompt against an OpenAI-compatible server::

    import pytest
    import shout
    from agl.testing.instrumentor import InstrumentorConformance
    from agl_shout.instrumentor import ShoutInstrumentor

    class TestShoutInstrumentor(InstrumentorConformance):
        @pytest.fixture
        def instrumentor_factory(self):
            return ShoutInstrumentor

        @pytest.fixture
        def llm_call(self):
            def call(base_url: str, prompt: str) -> None:
                model = shout.OpenAIModel("any-model", base_url=base_url, api_key="test")
                shout.Agent(model=model).run(prompt)

            return call

``llm_call(base_url, prompt)`` may be sync (it then runs on a worker thread, in the rollout's
context, as a runner runs a sync agent) or async. The server is
:class:`agl.testing.openai_server.OpenAIServer` on loopback: real HTTP and streaming, every
reply ``"ok: <the last user message>"``; the suite notes the response id of every reply. (The
server needs agl-core's ``server`` extra.)

The suite checks that spans recorded inside ``tracer.rollout(...)`` reach the store with the
rollout's and attempt's ids and in the rollout's trace; that an LLM-call span
(:func:`agl.tracing.is_llm_span`) carries the ``gen_ai.response.id`` the server sent;
that concurrent rollouts do not mix; that ``instrument()`` twice equals once; and that after
``uninstrument()`` nothing is recorded, until ``instrument()`` again.

Tests must not be deleted or overridden to make an instrumentor pass. A test it cannot pass is
overridden with ``@pytest.mark.xfail(reason="…")`` naming what is missing;
``test_suite_is_intact`` fails otherwise. The suite runs on anyio's pytest plugin (asyncio).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, ClassVar

import pytest

import agl
from agl import RolloutRequest, Span, semconv
from agl.store._memory import MemoryStore
from agl.testing._suite import check_suite_intact
from agl.testing.openai_server import OpenAIServer
from agl.tracing._conventions import is_llm_span
from agl.tracing._instrumentor import Instrumentor, InstrumentorFactory

__all__ = ["InstrumentorConformance", "LLMCall", "RecordingOpenAIServer"]

LLMCall = Callable[[str, str], Any]
"""``call(base_url, prompt)``: make the framework send ``prompt`` to the model at
``base_url`` (sync, or returning an awaitable)."""


class RecordingOpenAIServer(OpenAIServer):
    """The scripted OpenAI-compatible server, noting which response ids answered which request.

    :attr:`exchanges` holds ``(request body text, [response ids])`` per request; the ids are the
    top-level ``id`` of a JSON body or of stream chunks, and ``response.id`` of Responses API
    stream events. Each piece of a response has its ids noted before it leaves the server: a
    client may stop reading once it has what it needs (the OpenAI SDK closes a stream at
    ``data: [DONE]``, before the body's end), and must still find its ids here when it returns.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._exchanges: list[tuple[str, list[str]]] = []
        self._lock = threading.Lock()

    @property
    def exchanges(self) -> list[tuple[str, list[str]]]:
        with self._lock:
            return list(self._exchanges)

    def response_ids(self, prompt: str) -> set[str]:
        """The ids of every response to a request whose body contains ``prompt``."""
        return {rid for body, ids in self.exchanges if prompt in body for rid in ids}

    def create_app(self) -> Any:
        app = super().create_app()

        async def recording(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            request, response = bytearray(), bytearray()
            exchange: int | None = None  # this request's index in self._exchanges, once answered

            async def receive_body() -> Any:
                message = await receive()
                if message["type"] == "http.request":
                    request.extend(message.get("body", b""))
                return message

            async def send_body(message: Any) -> None:
                nonlocal exchange
                if message["type"] == "http.response.start":
                    with self._lock:
                        exchange = len(self._exchanges)
                        self._exchanges.append((request.decode("utf-8", "replace"), []))
                elif message["type"] == "http.response.body" and exchange is not None:
                    response.extend(message.get("body", b""))
                    ids = _response_ids(bytes(response))  # a body cut mid-document: what is whole
                    with self._lock:
                        self._exchanges[exchange] = (request.decode("utf-8", "replace"), ids)
                await send(message)

            await app(scope, receive_body, send_body)

        return recording


def _response_ids(body: bytes) -> list[str]:
    documents: list[Any] = []
    try:
        documents.append(json.loads(body))
    except ValueError:
        for line in body.decode("utf-8", "replace").splitlines():
            if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
                try:
                    documents.append(json.loads(line[5:]))
                except ValueError:
                    continue
    ids: list[str] = []
    for document in documents:
        if not isinstance(document, dict):
            continue
        nested = document.get("response")
        for value in (document.get("id"), nested.get("id") if isinstance(nested, dict) else None):
            if isinstance(value, str) and value not in ids:
                ids.append(value)
    return ids


def _work_spans(spans: list[Span]) -> list[Span]:
    """The spans an instrumentor recorded: all but the rollout's own root span."""
    return [s for s in spans if s.attributes.get(semconv.AGL_SPAN_TYPE) != "rollout"]


def _llm_spans(spans: list[Span]) -> list[Span]:
    return [s for s in spans if is_llm_span(dict(s.attributes))]


@pytest.mark.anyio
class InstrumentorConformance:
    """Subclass me and provide the ``instrumentor_factory`` and ``llm_call`` fixtures."""

    call_timeout: ClassVar[float] = 60.0
    """Seconds one ``llm_call`` may take."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        """Build the instrumentor under test for a tracer (override me)."""
        raise NotImplementedError("provide an instrumentor_factory fixture")

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        """Make the framework send one prompt to an OpenAI-compatible base URL (override me)."""
        raise NotImplementedError("provide an llm_call fixture")

    @pytest.fixture(scope="class")
    @classmethod
    def openai_server(cls) -> Iterator[RecordingOpenAIServer]:
        """The server ``llm_call`` talks to (one per test class)."""
        with RecordingOpenAIServer() as server:
            yield server

    @pytest.fixture
    async def tracer(self) -> AsyncIterator[agl.Tracer]:
        async with MemoryStore() as store:
            with agl.Tracer(store) as tracer:
                yield tracer

    @pytest.fixture
    def instrumentor(
        self, instrumentor_factory: InstrumentorFactory, tracer: agl.Tracer
    ) -> Iterator[Instrumentor]:
        instrumentor = instrumentor_factory(tracer)
        yield instrumentor
        instrumentor.uninstrument()

    # --- helpers ------------------------------------------------------------------------------

    async def _rollout(
        self,
        tracer: agl.Tracer,
        llm_call: LLMCall,
        server: RecordingOpenAIServer,
        prompt: str | None = None,
    ) -> tuple[str, str, str, list[Span]]:
        """Run one call inside a new rollout; return its ids, the prompt and its stored spans."""
        prompt = prompt or f"agl conformance {uuid.uuid4().hex[:12]}"
        [rollout] = await tracer.store.enqueue_rollouts([RolloutRequest(input=prompt)])
        [claim] = await tracer.store.dequeue_rollouts(limit=1)
        assert claim.rollout.rollout_id == rollout.rollout_id
        rollout_id, attempt_id = rollout.rollout_id, claim.attempt.attempt_id
        async with tracer.rollout(rollout_id, attempt_id):
            await asyncio.wait_for(self._call(llm_call, server.url, prompt), self.call_timeout)
        return rollout_id, attempt_id, prompt, await tracer.store.query_spans(rollout_id)

    @staticmethod
    async def _call(llm_call: LLMCall, base_url: str, prompt: str) -> None:
        if inspect.iscoroutinefunction(llm_call):
            await llm_call(base_url, prompt)
            return
        result = await asyncio.to_thread(llm_call, base_url, prompt)  # copies the context
        if inspect.isawaitable(result):
            await result

    # --- the suite guards itself ----------------------------------------------------------------

    def test_suite_is_intact(self) -> None:
        """No suite test was deleted, or overridden without an xfail that gives a reason."""
        check_suite_intact(self, InstrumentorConformance, "instrumentor suite")

    # --- recording ----------------------------------------------------------------------------

    async def test_is_an_instrumentor(self, instrumentor: Instrumentor) -> None:
        assert isinstance(instrumentor, Instrumentor)
        assert instrumentor.instrumented is False
        instrumentor.uninstrument()  # never instrumented: nothing to undo, no error
        assert instrumentor.instrumented is False

    async def test_spans_reach_the_store_with_the_rollout_and_attempt(
        self,
        instrumentor: Instrumentor,
        tracer: agl.Tracer,
        llm_call: LLMCall,
        openai_server: RecordingOpenAIServer,
    ) -> None:
        instrumentor.instrument()
        assert instrumentor.instrumented is True
        rollout_id, attempt_id, _, spans = await self._rollout(tracer, llm_call, openai_server)
        recorded = _work_spans(spans)
        assert recorded, "the instrumentor recorded no span for the call"
        for span in recorded:
            assert (span.rollout_id, span.attempt_id) == (rollout_id, attempt_id), span.name

    async def test_spans_belong_to_the_rollout_trace(
        self,
        instrumentor: Instrumentor,
        tracer: agl.Tracer,
        llm_call: LLMCall,
        openai_server: RecordingOpenAIServer,
    ) -> None:
        instrumentor.instrument()
        *_, spans = await self._rollout(tracer, llm_call, openai_server)
        [root] = [s for s in spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == "rollout"]
        for span in _work_spans(spans):
            assert span.trace_id == root.trace_id, f"{span.name} started a trace of its own"

    async def test_an_llm_call_span_carries_the_response_id(
        self,
        instrumentor: Instrumentor,
        tracer: agl.Tracer,
        llm_call: LLMCall,
        openai_server: RecordingOpenAIServer,
    ) -> None:
        instrumentor.instrument()
        _, _, prompt, spans = await self._rollout(tracer, llm_call, openai_server)
        sent = openai_server.response_ids(prompt)
        assert sent, "the framework did not send the prompt to the server"
        llm = _llm_spans(spans)
        assert llm, f"no LLM-call span among {[s.name for s in spans]}"
        recorded = {s.attributes.get(semconv.GEN_AI_RESPONSE_ID) for s in llm} - {None}
        assert recorded & sent, f"no LLM span has a response id the server sent ({sent})"
        assert recorded <= sent, f"LLM spans name responses the server never sent: {recorded}"

    async def test_concurrent_rollouts_do_not_mix(
        self,
        instrumentor: Instrumentor,
        tracer: agl.Tracer,
        llm_call: LLMCall,
        openai_server: RecordingOpenAIServer,
    ) -> None:
        instrumentor.instrument()
        tag = uuid.uuid4().hex[:8]
        outcomes = await asyncio.gather(
            *(
                self._rollout(tracer, llm_call, openai_server, f"agl concurrent {tag} {i}")
                for i in range(4)
            )
        )
        for _, _, prompt, spans in outcomes:
            recorded = {s.attributes.get(semconv.GEN_AI_RESPONSE_ID) for s in _llm_spans(spans)}
            assert recorded - {None} == openai_server.response_ids(prompt), prompt

    # --- idempotent and reversible ----------------------------------------------------------------

    async def test_instrument_twice_is_the_same_as_once(
        self,
        instrumentor: Instrumentor,
        tracer: agl.Tracer,
        llm_call: LLMCall,
        openai_server: RecordingOpenAIServer,
    ) -> None:
        instrumentor.instrument()
        *_, once = await self._rollout(tracer, llm_call, openai_server)
        instrumentor.instrument()
        instrumentor.instrument()
        assert instrumentor.instrumented is True
        *_, thrice = await self._rollout(tracer, llm_call, openai_server)
        assert _work_spans(once), "the instrumentor recorded no span for the call"
        assert sorted(s.name for s in _work_spans(thrice)) == sorted(
            s.name for s in _work_spans(once)
        )

    async def test_nothing_is_recorded_after_uninstrument(
        self,
        instrumentor: Instrumentor,
        tracer: agl.Tracer,
        llm_call: LLMCall,
        openai_server: RecordingOpenAIServer,
    ) -> None:
        instrumentor.instrument()
        *_, before = await self._rollout(tracer, llm_call, openai_server)
        assert _work_spans(before), "the instrumentor recorded no span for the call"
        instrumentor.uninstrument()
        assert instrumentor.instrumented is False
        unattributed = tracer.unattributed
        _, _, prompt, after = await self._rollout(tracer, llm_call, openai_server)
        assert openai_server.response_ids(prompt), "the framework did not call the server"
        assert _work_spans(after) == [], [s.name for s in _work_spans(after)]
        assert tracer.unattributed == unattributed  # nor anything outside the rollout
        instrumentor.uninstrument()  # a second time: nothing left to undo

    async def test_instrument_works_again_after_uninstrument(
        self,
        instrumentor: Instrumentor,
        tracer: agl.Tracer,
        llm_call: LLMCall,
        openai_server: RecordingOpenAIServer,
    ) -> None:
        instrumentor.instrument()
        instrumentor.uninstrument()
        instrumentor.instrument()
        _, _, prompt, spans = await self._rollout(tracer, llm_call, openai_server)
        recorded = {s.attributes.get(semconv.GEN_AI_RESPONSE_ID) for s in _llm_spans(spans)}
        sent = openai_server.response_ids(prompt)
        assert recorded & sent, f"LLM spans name {recorded}, the server sent {sent}"
