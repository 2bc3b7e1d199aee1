"""The conformance suite of the gateway's wires, in front of any engine that returns token ids.

Every wire an agent may speak (chat completions, the OpenAI Responses API, the Anthropic
Messages API) is driven by its own SDK (``openai``, ``anthropic``) through a real
:class:`~agl.gateway.GatewayServer` in front of the engine under test: plain, streamed, with a
tool-call history, with a client that leaves mid-stream and with a request the engine refuses.
Each call must come back as the SDK expects it, and be recorded as the one chat call the engine
answered: its wire named, its prompt ids the very ids the engine gives for that chat request,
its response ids as many as the answer's usage says. A subclass provides the engine::

    class TestMyEngine(GatewayWiresConformance):
        model = "my-model"

        @pytest.fixture(scope="class")
        def engine(self) -> Iterator[str]:
            with start_my_engine() as url:  # an OpenAI-compatible base URL ending in /v1
                yield url

and, where the engine answers too fast for a client to leave mid-stream, ``slow_answers`` (the
disconnect test then checks the whole answer was recorded, not a part of it).
Tests must not be deleted or overridden but with ``@pytest.mark.xfail(reason=...)``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

import agl
from agl import semconv
from agl._rollouts import RolloutRequest
from agl.testing._suite import check_suite_intact

if TYPE_CHECKING:
    from agl.gateway._serve import GatewayServer

__all__ = ["WIRES", "GatewayWiresConformance", "WireRun"]

WIRES = ("chat", "responses", "messages")
"""The wires the suite drives, by the name the gateway records (``agl.llm.wire``)."""

_QUESTION = "What is the weather in Paris?"
_TOOL = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
_CALL_ID = "call_1"
_ARGUMENTS = '{"city": "Paris"}'


class WireRun:
    """One attempt's gateway URL, and calls on each wire through it with the wire's own SDK."""

    def __init__(self, gateway: GatewayServer, store: agl.Store, model: str, ids: tuple[str, str]):
        self.gateway = gateway
        self.store = store
        self.model = model
        self.rollout_id, self.attempt_id = ids
        self.url = gateway.rollout_url(*ids)

    async def call(
        self, wire: str, *, stream: bool = False, tools: bool = False, max_tokens: int = 16
    ) -> tuple[str, str | None]:
        """Ask ``_QUESTION`` on ``wire`` (after a tool round trip when ``tools``); return the
        answer's text and its tool call's name, if it made one."""
        if wire == "messages":
            return await self._messages(stream, tools, max_tokens)
        import openai

        async with openai.AsyncOpenAI(base_url=self.url, api_key="-", max_retries=0) as client:
            if wire == "chat":
                return await _chat(client, self.model, stream, tools, max_tokens)
            return await _responses(client, self.model, stream, tools, max_tokens)

    async def _messages(self, stream: bool, tools: bool, max_tokens: int) -> tuple[str, str | None]:
        import anthropic

        base = self.url.removesuffix("/v1")  # Anthropic's clients add /v1/messages themselves
        messages: list[Any] = [{"role": "user", "content": _QUESTION}]
        kwargs: dict[str, Any] = {}
        if tools:
            use = {
                "type": "tool_use",
                "id": _CALL_ID,
                "name": _TOOL["name"],
                "input": {"city": "Paris"},
            }
            result = {"type": "tool_result", "tool_use_id": _CALL_ID, "content": "sunny"}
            messages += [
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
            ]
            schema = {"input_schema": _TOOL["parameters"]}
            kwargs["tools"] = [
                {"name": _TOOL["name"], "description": _TOOL["description"], **schema}
            ]
        async with anthropic.AsyncAnthropic(base_url=base, api_key="-", max_retries=0) as client:
            ask = {"model": self.model, "max_tokens": max_tokens, "messages": messages, **kwargs}
            if stream:
                async with client.messages.stream(**ask) as events:
                    message = await events.get_final_message()
            else:
                message = await client.messages.create(**ask)
        text = "".join(b.text for b in message.content if b.type == "text")
        called = next((b.name for b in message.content if b.type == "tool_use"), None)
        return text, called

    async def leave_mid_stream(self, wire: str) -> None:
        """Start a long streamed answer on ``wire`` and close the connection after its first
        piece of text."""
        import httpx

        body: dict[str, Any]
        headers = {"authorization": "Bearer -", "x-api-key": "-"}
        if wire == "chat":
            url, body = f"{self.url}/chat/completions", {"messages": [_user()]}
        elif wire == "responses":
            url, body = f"{self.url}/responses", {"input": _QUESTION}
        else:
            url, body = f"{self.url}/messages", {"messages": [_user()]}
        body = {**body, "model": self.model, "stream": True, _max_tokens_key(wire): 200}
        async with (
            httpx.AsyncClient(timeout=30) as client,
            client.stream("POST", url, json=body, headers=headers) as reply,
        ):
            assert reply.status_code == 200, await reply.aread()
            async for line in reply.aiter_lines():
                if '"delta"' in line or '"content"' in line:
                    break

    async def spans(self, count: int) -> list[agl.Span]:
        """The attempt's gateway spans, once there are ``count`` (waiting up to 20 s)."""
        gateway = self.gateway.gateway
        assert gateway is not None
        for _ in range(400):
            assert await asyncio.to_thread(gateway.sender.flush, 10)
            spans = [
                span
                for span in await self.store.query_spans(self.rollout_id)
                if span.attributes.get(semconv.AGL_SPAN_TYPE) == semconv.SPAN_TYPE_GATEWAY
            ]
            if len(spans) >= count:
                return spans
            await asyncio.sleep(0.05)
        raise AssertionError(f"{count} calls were not recorded within 20 s (found {len(spans)})")


def _user() -> dict[str, Any]:
    return {"role": "user", "content": _QUESTION}


def _max_tokens_key(wire: str) -> str:
    return {"chat": "max_tokens", "responses": "max_output_tokens", "messages": "max_tokens"}[wire]


async def _chat(
    client: Any, model: str, stream: bool, tools: bool, max_tokens: int
) -> tuple[str, str | None]:
    messages: list[Any] = [_user()]
    kwargs: dict[str, Any] = {}
    if tools:
        call = {
            "id": _CALL_ID,
            "type": "function",
            "function": {"name": _TOOL["name"], "arguments": _ARGUMENTS},
        }
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": _CALL_ID, "content": "sunny"},
        ]
        kwargs["tools"] = [{"type": "function", "function": _TOOL}]
    ask = {"model": model, "messages": messages, "max_tokens": max_tokens, **kwargs}
    if not stream:
        reply = await client.chat.completions.create(**ask)
        message = reply.choices[0].message
        called = message.tool_calls[0].function.name if message.tool_calls else None
        return message.content or "", called
    text, called = "", None
    async for chunk in await client.chat.completions.create(**ask, stream=True):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                called = called or (call.function.name if call.function else None)
    return text, called


async def _responses(
    client: Any, model: str, stream: bool, tools: bool, max_tokens: int
) -> tuple[str, str | None]:
    items: Any = _QUESTION
    kwargs: dict[str, Any] = {}
    if tools:
        call = {
            "type": "function_call",
            "call_id": _CALL_ID,
            "name": _TOOL["name"],
            "arguments": _ARGUMENTS,
        }
        result = {"type": "function_call_output", "call_id": _CALL_ID, "output": "sunny"}
        items = [_user(), call, result]
        kwargs["tools"] = [{"type": "function", **_TOOL}]
    ask = {"model": model, "input": items, "max_output_tokens": max_tokens, **kwargs}
    if stream:
        events = [event async for event in await client.responses.create(**ask, stream=True)]
        assert events[0].type == "response.created", events[0]
        response = events[-1].response  # response.completed, or .incomplete at the limit
    else:
        response = await client.responses.create(**ask)
    called = next((item.name for item in response.output if item.type == "function_call"), None)
    return response.output_text, called


@pytest.mark.anyio
class GatewayWiresConformance:
    """Subclass me, set :attr:`model` and provide ``engine`` (see the module docstring)."""

    model: ClassVar[str] = "agl-test-model"
    """The model name the requests ask for."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture(scope="class")
    @classmethod
    def engine(cls) -> Iterator[str]:
        """The engine's OpenAI-compatible base URL, ending in ``/v1`` (override me)."""
        raise NotImplementedError("provide an engine fixture")

    @pytest.fixture
    def slow_answers(self) -> None:
        """While active, the engine streams slowly enough for a client to leave mid-stream
        (override me, yielding, for an engine that answers 200 tokens at once)."""

    @pytest.fixture
    async def run(self, engine: str) -> AsyncIterator[WireRun]:
        """A store, the gateway in front of ``engine`` and one claimed attempt."""
        from agl.gateway._serve import GatewayServer
        from agl.store._memory import MemoryStore

        async with MemoryStore() as store:
            await store.enqueue_rollouts([RolloutRequest(input="task")])
            [claim] = await store.dequeue_rollouts(limit=1)
            ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
            with GatewayServer([engine], store) as gateway:
                yield WireRun(gateway, store, self.model, ids)

    async def _check_exact(self, run: WireRun, span: agl.Span, wire: str) -> dict[str, Any]:
        """The span names its wire, holds the ids the engine gives for its chat request, and as
        many response ids as the engine's usage counts."""
        import httpx

        attributes = span.attributes
        assert attributes[semconv.AGL_WIRE] == wire
        assert span.status.code == agl.StatusCode.OK, span.status
        chat: dict[str, Any] = json.loads(str(attributes[semconv.AGL_REQUEST_JSON]))
        again = {**chat, "stream": False, "max_tokens": 1, "return_token_ids": True}
        again.pop("stream_options", None)
        async with httpx.AsyncClient(timeout=60) as client:
            engine = str(attributes[semconv.AGL_UPSTREAM_URL])
            reply = await client.post(f"{engine}/chat/completions", json=again)
        assert reply.status_code == 200, reply.text
        assert attributes[semconv.AGL_PROMPT_TOKEN_IDS] == reply.json()["prompt_token_ids"]
        response = json.loads(str(attributes[semconv.AGL_RESPONSE_JSON]))
        response_ids = attributes[semconv.AGL_RESPONSE_TOKEN_IDS]
        assert isinstance(response_ids, list)
        assert response_ids
        if response.get("usage"):  # a chat stream has none unless the agent asked
            assert len(response_ids) == response["usage"]["completion_tokens"]
        return chat

    # --- the suite guards itself --------------------------------------------------------------

    def test_suite_is_intact(self) -> None:
        """No suite test was deleted, or overridden without an xfail that gives a reason."""
        check_suite_intact(self, GatewayWiresConformance, "gateway wires suite")

    # --- the suite ----------------------------------------------------------------------------

    @pytest.mark.parametrize("wire", WIRES)
    async def test_a_plain_call_is_answered_and_recorded_token_exact(
        self, run: WireRun, wire: str
    ) -> None:
        await run.call(wire)
        [span] = await run.spans(1)
        await self._check_exact(run, span, wire)

    @pytest.mark.parametrize("wire", WIRES)
    async def test_a_streamed_call_is_answered_and_recorded_token_exact(
        self, run: WireRun, wire: str
    ) -> None:
        streamed, _ = await run.call(wire, stream=True)
        [span] = await run.spans(1)
        await self._check_exact(run, span, wire)
        response = json.loads(str(span.attributes[semconv.AGL_RESPONSE_JSON]))
        assert (response["choices"][0]["message"]["content"] or "") == streamed

    @pytest.mark.parametrize("wire", WIRES)
    async def test_a_tool_history_is_rendered_by_the_engine_once(
        self, run: WireRun, wire: str
    ) -> None:
        await run.call(wire, tools=True)
        [span] = await run.spans(1)
        chat = await self._check_exact(run, span, wire)
        roles = [message["role"] for message in chat["messages"]]
        assert roles[-3:] == ["user", "assistant", "tool"], roles
        call = chat["messages"][-2]["tool_calls"][0]
        assert (call["id"], call["function"]["name"]) == (_CALL_ID, _TOOL["name"])
        assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
        assert chat["messages"][-1]["tool_call_id"] == _CALL_ID
        assert [tool["function"]["name"] for tool in chat["tools"]] == [_TOOL["name"]]

    @pytest.mark.parametrize("wire", WIRES)
    async def test_a_client_leaving_mid_stream_is_never_a_whole_call(
        self, run: WireRun, wire: str, slow_answers: None
    ) -> None:
        """A failed call saying the client left; or, when the engine finished before the
        gateway could tell (an engine that answers at once), the whole answer: never a part of
        one recorded as a success."""
        await run.leave_mid_stream(wire)
        [span] = await run.spans(1)
        assert span.attributes[semconv.AGL_WIRE] == wire
        if span.status.code == agl.StatusCode.ERROR:
            assert "disconnected" in (span.status.description or ""), span.status
            return
        response = json.loads(str(span.attributes[semconv.AGL_RESPONSE_JSON]))
        assert response["choices"][0]["finish_reason"] is not None, response
        generated = span.attributes[semconv.AGL_RESPONSE_TOKEN_IDS]
        assert isinstance(generated, list)
        assert generated
        if response.get("usage"):  # a chat stream has none unless the agent asked
            assert len(generated) == response["usage"]["completion_tokens"]

    @pytest.mark.parametrize("wire", WIRES)
    async def test_a_request_the_engine_refuses_is_its_error_on_the_wire_and_recorded(
        self, run: WireRun, wire: str
    ) -> None:
        import anthropic
        import openai

        errors = (openai.APIStatusError, anthropic.APIStatusError)
        with pytest.raises(errors) as caught:
            # beyond any engine's context (streamed: Anthropic's SDK refuses a long wait itself)
            await run.call(wire, max_tokens=10_000_000, stream=wire == "messages")
        assert getattr(caught.value, "status_code", None) == 400, repr(caught.value)
        body = getattr(caught.value, "body", None)
        if wire == "messages":  # Anthropic's error format, which its SDK reads
            assert isinstance(body, dict), body
            assert body.get("type") == "error", body
        [span] = await run.spans(1)
        assert span.attributes[semconv.AGL_WIRE] == wire
        assert span.status.code == agl.StatusCode.ERROR
        assert "400" in (span.status.description or ""), span.status
