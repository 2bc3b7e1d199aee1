"""The gateway's wires suite, in front of the scripted vLLM-format engine."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agl.testing.gateway_wires import GatewayWiresConformance
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
