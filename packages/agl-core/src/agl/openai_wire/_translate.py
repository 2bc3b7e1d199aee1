"""The translation layer: a wire that is not chat completions, served through a chat call.

An engine renders a chat with its own template and returns the token ids it used; it is asked
once, in chat completions. A request on another wire (the OpenAI Responses API, the Anthropic
Messages API) is turned into that chat request, and the chat answer into the wire's answer, by a
:class:`Wire`. So the ids an engine reports are the ids of the prompt it really saw, whichever
wire the agent spoke, and nothing is ever re-tokenized.

:func:`serve_wire` does it for any server whose chat route answers with a starlette response
(JSON, or server-sent events ending with ``data: [DONE]``): the gateway, the scripted test
server and agl-torch's policy server all serve the other wires through it, so each wire behaves
the same wherever an agent meets it.

:class:`ChatReader` reads a chat answer, whole or chunk by chunk, into what every wire needs: the
text, the tool calls, why generation stopped, the usage.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import Response, StreamingResponse

from agl.openai_wire._bodies import sse_data
from agl.openai_wire._requests import WireError
from agl.openai_wire._response import WireJSONResponse

__all__ = [
    "SAMPLING_EXTRAS",
    "ChatAnswer",
    "ChatReader",
    "ToolCallPart",
    "Wire",
    "WireStream",
    "serve_wire",
]

JSON = dict[str, Any]

SAMPLING_EXTRAS = (
    "seed",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
)
"""Sampling fields an open engine takes on chat (vLLM's extras, sent as ``extra_body``) that a
request on another wire may carry too: passed on to the chat call as they are, for the engine
to judge."""


# --- a chat answer, read --------------------------------------------------------------------


@dataclass
class ToolCallPart:
    """One tool call of a chat answer (a stream's, as far as it has come)."""

    index: int
    id: str
    name: str
    arguments: str = ""


@dataclass
class ChatAnswer:
    """What a chat answer says, whatever its shape (its first choice).

    Attributes:
        id: The chat completion's id.
        model: The model that answered.
        text: The assistant's text ("" when none).
        tool_calls: The tool calls, in order.
        finish_reason: ``stop``, ``length``, ``tool_calls``... (None until known).
        stop_reason: vLLM's ``stop_reason``: the stop string (or token id) that ended the
            generation, None for the end-of-sequence token.
        prompt_tokens / completion_tokens: The usage, when the answer gave it.
        logprobs: The chat logprobs entries of the text's tokens, when asked for.
    """

    id: str = ""
    model: str = ""
    text: str = ""
    tool_calls: list[ToolCallPart] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    logprobs: list[JSON] = field(default_factory=list)


class ChatReader:
    """Read chat completion chunks (or a whole body) of choice 0.

    :meth:`chunk` returns what each chunk adds, as :class:`ChatDelta` items in order, so a wire's
    stream can say it as soon as it is known; :attr:`answer` grows into the whole answer.
    """

    def __init__(self) -> None:
        self.answer = ChatAnswer()
        self._tools: dict[int, ToolCallPart] = {}
        self._ids = 0

    def body(self, body: Mapping[str, Any]) -> ChatAnswer:
        """Read a whole ``chat.completion`` body."""
        answer = self.answer
        self._head(body)
        choices = body.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], Mapping) else {}
        message = choice.get("message") or {}
        answer.text = message.get("content") or ""
        for index, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            answer.tool_calls.append(
                ToolCallPart(
                    index,
                    call.get("id") or f"call_{index}",
                    function.get("name") or "",
                    function.get("arguments") or "",
                )
            )
        answer.finish_reason = choice.get("finish_reason")
        answer.stop_reason = choice.get("stop_reason")
        answer.logprobs = list(((choice.get("logprobs") or {}).get("content")) or [])
        if isinstance(choice.get("token_ids"), list) and answer.completion_tokens is None:
            answer.completion_tokens = len(choice["token_ids"])
        return answer

    def chunk(self, chunk: Mapping[str, Any]) -> list[ChatDelta]:
        """Read one streamed chunk; return what it adds."""
        self._head(chunk)
        out: list[ChatDelta] = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("prompt_token_ids"), list):
                self.answer.prompt_tokens = len(choice["prompt_token_ids"])
            if isinstance(choice.get("token_ids"), list):
                self._ids += len(choice["token_ids"])
            delta = choice.get("delta") or {}
            logprobs = list(((choice.get("logprobs") or {}).get("content")) or [])
            self.answer.logprobs += logprobs
            if delta.get("content"):
                self.answer.text += delta["content"]
                out.append(ChatDelta("text", text=delta["content"], logprobs=logprobs))
            for call in delta.get("tool_calls") or []:
                out += self._tool_delta(call)
            if choice.get("finish_reason"):
                self.answer.finish_reason = choice["finish_reason"]
                self.answer.stop_reason = choice.get("stop_reason")
        return out

    def completion_tokens(self) -> int:
        """The tokens generated: the usage's count, else the streamed token ids counted."""
        given = self.answer.completion_tokens
        return given if given is not None else self._ids

    def _head(self, data: Mapping[str, Any]) -> None:
        answer = self.answer
        if not answer.id and isinstance(data.get("id"), str):
            answer.id = data["id"]
        if not answer.model and isinstance(data.get("model"), str):
            answer.model = data["model"]
        if isinstance(data.get("prompt_token_ids"), list):
            answer.prompt_tokens = len(data["prompt_token_ids"])
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            if isinstance(usage.get("prompt_tokens"), int):
                answer.prompt_tokens = usage["prompt_tokens"]
            if isinstance(usage.get("completion_tokens"), int):
                answer.completion_tokens = usage["completion_tokens"]

    def _tool_delta(self, call: Mapping[str, Any]) -> list[ChatDelta]:
        index = call.get("index", len(self._tools))
        function = call.get("function") or {}
        out = []
        part = self._tools.get(index)
        if part is None:
            part = ToolCallPart(
                index, call.get("id") or f"call_{index}", function.get("name") or ""
            )
            self._tools[index] = part
            self.answer.tool_calls.append(part)
            out.append(ChatDelta("tool", tool=part))
        elif function.get("name"):
            part.name += function["name"]
        if function.get("arguments"):
            part.arguments += function["arguments"]
            out.append(ChatDelta("arguments", text=function["arguments"], tool=part))
        return out


@dataclass
class ChatDelta:
    """What one chunk added: ``text``, a new ``tool`` call, or a call's ``arguments``."""

    kind: str
    text: str = ""
    tool: ToolCallPart | None = None
    logprobs: list[JSON] = field(default_factory=list)


# --- a wire ----------------------------------------------------------------------------------


class WireStream(ABC):
    """One streamed answer on a wire: chat chunks in, the wire's server-sent events out."""

    def __init__(self) -> None:
        self.reader = ChatReader()

    @abstractmethod
    def chunk(self, chunk: Mapping[str, Any]) -> list[str]:
        """The events one chat chunk becomes."""

    @abstractmethod
    def end(self) -> list[str]:
        """The events that end a stream the engine finished."""

    @abstractmethod
    def fail(self, status: int, message: str) -> list[str]:
        """The events that end a stream that broke (the engine's error, or its stream cut)."""


class Wire(ABC):
    """A wire agents speak, served by translating each request to one chat call.

    Attributes:
        name: What the gateway records as the call's wire (``agl.llm.wire``).
    """

    name: str

    @abstractmethod
    def to_chat(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> JSON:
        """The chat request a request on this wire becomes.

        Raises:
            WireError: 400 naming the field, for a request this wire or chat cannot carry.
        """

    @abstractmethod
    def answer(self, chat: Mapping[str, Any], request: Mapping[str, Any]) -> JSON:
        """The wire's answer to ``request``, from the chat answer ``chat``."""

    @abstractmethod
    def stream(self, request: Mapping[str, Any]) -> WireStream:
        """A translator for one streamed answer to ``request``."""

    @abstractmethod
    def error(self, status: int, message: str, param: str | None = None) -> JSON:
        """An error body in the wire's own format."""

    @abstractmethod
    def response_id(self, chat_id: str) -> str:
        """The id the wire's answer has, made from the chat completion's (one to one)."""

    def error_response(self, status: int, message: str, param: str | None = None) -> Response:
        """An error answer in the wire's format."""
        return WireJSONResponse(self.error(status, message, param), status_code=status)


def upstream_error(content: bytes) -> str:
    """The message of a chat error body (OpenAI's format), else the body's text."""
    try:
        body = json.loads(content)
        message = body["error"]["message"]
        if isinstance(message, str):
            return message
    except (ValueError, RecursionError, KeyError, TypeError):
        pass
    return content[:500].decode(errors="replace")


async def serve_wire(
    wire: Wire,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    chat: Callable[[JSON], Awaitable[Response]],
) -> Response:
    """Answer a request on ``wire`` by asking ``chat`` (a server's chat route) once.

    ``chat`` gets the translated chat request and answers as a chat route does: a JSON body,
    server-sent events, or an OpenAI error with its status. Errors come back in the wire's
    format with the same status; a stream the client leaves is closed, so the chat route sees
    the disconnect as it would without translation.
    """
    try:
        request = wire.to_chat(body, headers)
    except WireError as exc:
        return wire.error_response(exc.status, exc.message, exc.field)
    reply = await chat(request)
    if reply.status_code >= 400 and not isinstance(reply, StreamingResponse):
        return wire.error_response(reply.status_code, upstream_error(bytes(reply.body)))
    if isinstance(reply, StreamingResponse):
        return StreamingResponse(
            _translated(wire.stream(body), reply),
            status_code=reply.status_code,
            headers=_passed_headers(reply),
            media_type="text/event-stream",
        )
    try:
        data = json.loads(bytes(reply.body))
    except (ValueError, RecursionError):
        return wire.error_response(502, "the engine's answer is not JSON")
    return WireJSONResponse(wire.answer(data, body), headers=_passed_headers(reply))


def _passed_headers(reply: Response) -> dict[str, str]:
    """The chat answer's own headers worth keeping (the weight version, for one)."""
    skip = {"content-length", "content-type", "transfer-encoding"}
    return {k: v for k, v in reply.headers.items() if k.lower() not in skip}


async def _translated(stream: WireStream, reply: StreamingResponse) -> AsyncIterator[str]:
    source = reply.body_iterator
    done = False
    try:
        buffer = ""
        async for piece in source:
            buffer += piece if isinstance(piece, str) else bytes(piece).decode()
            *events, buffer = buffer.split("\n\n")
            for event in events:
                for line in event.splitlines():
                    payload = sse_data(line)
                    if payload is None:
                        continue
                    if payload == "[DONE]":
                        done = True
                        for out in stream.end():
                            yield out
                        continue
                    try:
                        chunk = json.loads(payload)
                    except (ValueError, RecursionError):
                        continue
                    if isinstance(chunk, dict) and "error" in chunk and "choices" not in chunk:
                        error = chunk["error"] if isinstance(chunk["error"], dict) else {}
                        done = True
                        code = error.get("code")
                        status = code if isinstance(code, int) else 500
                        for out in stream.fail(status, str(error.get("message", "error"))):
                            yield out
                        continue
                    for out in stream.chunk(chunk):
                        yield out
        if not done:
            for out in stream.fail(502, "the engine's stream ended before it finished"):
                yield out
    finally:
        close = getattr(source, "aclose", None)
        if close is not None:
            await close()
