"""The gateway's wires suite, in front of the scripted vLLM-format engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import agl
from agl.testing.gateway_wires import WIRES, GatewayWiresConformance, WireRun
from agl.testing.openai_server import OpenAIServer, echo, last_user_text, text_reply


class TestScriptedEngine(GatewayWiresConformance):
    @pytest.fixture(scope="class")
    @classmethod
    def server(cls) -> Iterator[OpenAIServer]:
        with OpenAIServer(echo, max_model_len=4096) as server:
            yield server

    @pytest.fixture(scope="class")
    @classmethod
    def engine(cls, server: OpenAIServer) -> str:
        return server.url

    @pytest.fixture
    def slow_answers(self, server: OpenAIServer) -> Iterator[None]:
        server.script = lambda request: text_reply(
            f"ok: {last_user_text(request)} " * 5, chunk_delay=0.01
        )
        try:
            yield
        finally:
            server.script = echo

    @pytest.mark.parametrize("wire", WIRES)
    async def test_leaving_a_slow_stream_is_recorded_as_a_failed_call(
        self, run: WireRun, wire: str, slow_answers: None
    ) -> None:
        await run.leave_mid_stream(wire)
        [span] = await run.spans(1)
        assert span.status.code == agl.StatusCode.ERROR
        assert "client disconnected" in (span.status.description or "")
