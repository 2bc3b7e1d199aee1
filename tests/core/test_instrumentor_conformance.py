"""Core's OpenAI instrumentation passes the instrumentor conformance suite, as registered."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from agl.plugins import PluginManager
from agl.testing.instrumentor import InstrumentorConformance, LLMCall, RecordingOpenAIServer
from agl.testing.openai_server import OpenAIServer
from agl.tracing._instrumentor import InstrumentorFactory
from agl.tracing._openai import OpenAIInstrumentation


class TestOpenAIInstrumentation(InstrumentorConformance):
    """The factory ``instrument=["openai"]`` resolves to, with the sync client."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return PluginManager().provided("agl_instrumentors")["openai"]

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        def call(base_url: str, prompt: str) -> None:
            with openai.OpenAI(base_url=base_url, api_key="test", max_retries=0) as client:
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": prompt}]
                )

        return call


class TestOpenAIInstrumentationStreamingAsync(InstrumentorConformance):
    """The class itself, with the async client streaming through the Responses API."""

    @pytest.fixture
    def instrumentor_factory(self) -> InstrumentorFactory:
        return OpenAIInstrumentation

    @pytest.fixture
    def llm_call(self) -> LLMCall:
        async def call(base_url: str, prompt: str) -> None:
            async with openai.AsyncOpenAI(base_url=base_url, api_key="t", max_retries=0) as client:
                stream = await client.responses.create(model="m", input=prompt, stream=True)
                async for _ in stream:
                    pass

        return call


class _LateClosingServer(OpenAIServer):
    """Holds back each response's closing empty body message, as a loaded server may."""

    def create_app(self) -> Any:
        app = super().create_app()

        async def late(scope: Any, receive: Any, send: Any) -> None:
            async def send_late(message: Any) -> None:
                closing = message["type"] == "http.response.body" and not message.get("body")
                if closing and not message.get("more_body", False):
                    await asyncio.sleep(2)
                await send(message)

            await app(scope, receive, send_late)

        return late


class _LateClosingRecordingServer(RecordingOpenAIServer, _LateClosingServer):
    pass


def test_the_recording_server_notes_an_exchange_before_the_client_has_the_reply() -> None:
    """The client has a reply once Content-Length bytes arrive; the exchange is noted by then."""
    with _LateClosingRecordingServer() as server:
        with openai.OpenAI(base_url=server.url, api_key="t", max_retries=0) as client:
            reply = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "agl late closing"}]
            )
        assert server.response_ids("agl late closing") == {reply.id}


def test_the_recording_server_notes_a_stream_before_the_client_stops_reading_it() -> None:
    """The OpenAI SDK closes a stream at ``data: [DONE]``, before the body's closing message."""
    with _LateClosingRecordingServer() as server:
        with openai.OpenAI(base_url=server.url, api_key="t", max_retries=0) as client:
            stream = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "agl late stream"}], stream=True
            )
            ids = {chunk.id for chunk in stream}
        assert ids
        assert server.response_ids("agl late stream") == ids
