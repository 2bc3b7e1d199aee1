"""Answer generation requests in vLLM's wire format: whole bodies, stream chunks, errors.

A :class:`Reply` turns a :class:`~agl_torch.engine.Completion` (or the engine's stream of
tokens) into the body (or server-sent events) ``vllm serve`` would send, with the token ids,
logprobs and weight version a training loop needs; the server module's docstring describes the
format. :func:`error_response` gives OpenAI's error bodies.

:data:`VERSION_HEADER` and :func:`fingerprint` are public as :mod:`agl_torch.server`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, NamedTuple

from fastapi.responses import JSONResponse, Response, StreamingResponse

from agl import openai_wire as wire
from agl_torch._vllm_requests import JSON, GenerationRequest
from agl_torch.engine import Completion, Token
from agl_torch.tool_parser import TOOL_CALL_START, ToolCall, parse_tool_calls

VERSION_HEADER = wire.WEIGHT_VERSION_HEADER
"""The response header holding the weight version that produced the response (the gateway
records it on the call's span)."""


def fingerprint(version: int) -> str:
    """The ``system_fingerprint`` of responses produced by weight version ``version``."""
    return f"agl-torch-v{version}"


class TokenTexts:
    """Token ids to text, as responses show it (one tokenizer's, shared by all responses)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._token_texts: dict[int, str] = {}

    def decode(self, token_ids: list[int]) -> str:
        """Text as a choice shows it: special tokens left out."""
        return str(self.tokenizer.decode(token_ids, skip_special_tokens=True))

    def token_text(self, token_id: int) -> str:
        """One token as logprobs show it (special tokens included)."""
        if token_id not in self._token_texts:
            self._token_texts[token_id] = str(self.tokenizer.decode([token_id]))
        return self._token_texts[token_id]


class Reply:
    """One response being built: the whole body, or the chunks of a stream.

    Args:
        request: What it answers.
        texts: Token texts, from the served model's tokenizer.
        model_name: The served model's name, for requests that name none.
    """

    def __init__(self, request: GenerationRequest, texts: TokenTexts, model_name: str) -> None:
        self.texts = texts
        self.is_chat = request.chat
        self.prompt = request.prompt
        self.top = request.wire.logprobs
        self.tools = request.wire.use_tools
        self.ids = request.wire.return_token_ids
        self.usage = request.wire.include_usage
        model = request.wire.model or model_name
        self.head = wire.head("chat" if request.chat else "completions", model)

    # --- whole bodies -----------------------------------------------------------------------

    def respond(self, done: Completion) -> Response:
        """The whole body answering the request, once its generation is ``done``."""
        body = self._chat(done) if self.is_chat else self._completion(done)
        return JSONResponse(body, headers=_version_header(done.weight_version))

    def _chat(self, done: Completion) -> JSON:
        text = self.texts.decode(done.token_ids)
        content, calls = parse_tool_calls(text) if self.tools else (text, [])
        choice = wire.chat_choice(
            0,
            content=content if calls else text,
            tool_calls=_tool_calls(calls),
            logprobs=self._logprobs(done.token_ids, done.logprobs, done.top_logprobs),
            finish_reason="tool_calls" if calls else done.finish_reason,
            stop_reason=done.stop_reason,
            token_ids=done.token_ids if self.ids else None,
        )
        return wire.chat_body(
            self.head,
            [choice],
            wire.usage(len(self.prompt), len(done.token_ids)),
            prompt_token_ids=self._prompt_ids(),
            system_fingerprint=fingerprint(done.weight_version),
        )

    def _completion(self, done: Completion) -> JSON:
        choice = wire.completion_choice(
            0,
            text=self.texts.decode(done.token_ids),
            logprobs=self._logprobs(done.token_ids, done.logprobs, done.top_logprobs),
            finish_reason=done.finish_reason,
            stop_reason=done.stop_reason,
            prompt_token_ids=self._prompt_ids(),
            token_ids=done.token_ids if self.ids else None,
        )
        return wire.completion_body(
            self.head,
            [choice],
            wire.usage(len(self.prompt), len(done.token_ids)),
            system_fingerprint=fingerprint(done.weight_version),
        )

    # --- streams ---------------------------------------------------------------------------

    async def stream(self, events: AsyncGenerator[Token | Completion, None]) -> Response:
        """Wait for the first token (request errors surface here, as 400s), then stream."""
        try:
            first = await anext(events)
        except BaseException:
            await events.aclose()
            raise
        assert isinstance(first, Token)  # every generation has a token before its end
        return StreamingResponse(
            self._events(first, events),
            media_type="text/event-stream",
            headers=_version_header(first.weight_version),
        )

    async def _events(
        self, first: Token, events: AsyncGenerator[Token | Completion, None]
    ) -> AsyncIterator[str]:
        """The SSE events: one chunk per token, each sent once the next event is in.

        Sending one event late lets the last token's chunk carry the finish reason and, for a
        chat with tools, the tool calls (which only the whole text shows).
        """
        head = {**self.head, "system_fingerprint": fingerprint(first.weight_version)}
        if self.is_chat:
            yield wire.sse(wire.role_chunk(head, 0, prompt_token_ids=self._prompt_ids()))
        text = _StreamText(self.texts, self.tools)
        pending, done = first, None
        try:
            async for event in events:
                if isinstance(event, Token):
                    yield wire.sse(self._chunk(head, pending, text.add(pending.id)))
                    pending = event
                else:
                    done = event
        except Exception as exc:  # the batch failed: tell the client, as vLLM does
            yield wire.sse(wire.error_body(500, f"generation failed: {exc}"))
            yield wire.DONE
            return
        finally:
            await events.aclose()
        assert done is not None
        piece = text.finish(pending.id)  # the rest of the text, and the tool calls it holds
        finish = "tool_calls" if piece.calls else done.finish_reason
        last = self._chunk(head, pending, piece, finish, done.stop_reason)
        yield wire.sse(last)
        if self.usage:
            total = wire.usage(len(self.prompt), len(done.token_ids))
            yield wire.sse(wire.usage_chunk(head, total))
        yield wire.DONE

    def _chunk(
        self,
        head: JSON,
        token: Token,
        piece: _Piece,
        finish_reason: str | None = None,
        stop_reason: int | str | None = None,
    ) -> JSON:
        """The chunk of one token; ``piece`` is what the token adds to the text."""
        ids = [token.id]
        logprobs = self._logprobs(ids, [token.logprob], [token.top_logprobs], piece.offset)
        token_ids = ids if self.ids else None
        if self.is_chat:
            delta: JSON = {"content": piece.text} if piece.text else {}
            if piece.calls:
                delta["tool_calls"] = [
                    {"index": i, **call} for i, call in enumerate(_tool_calls(piece.calls))
                ]
            return wire.chat_chunk(
                head,
                0,
                delta=delta,
                logprobs=logprobs,
                finish_reason=finish_reason,
                stop_reason=stop_reason,
                token_ids=token_ids,
            )
        choice = wire.completion_choice(
            0,
            text=piece.text,
            logprobs=logprobs,
            finish_reason=finish_reason,
            stop_reason=stop_reason,
            prompt_token_ids=self._prompt_ids() if piece.position == 0 else None,
            token_ids=token_ids,
        )
        del choice["prompt_logprobs"]  # vLLM's stream choices have no prompt logprobs
        return wire.completion_chunk(head, choice)

    def _prompt_ids(self) -> list[int] | None:
        return self.prompt if self.ids else None

    # --- logprobs ---------------------------------------------------------------------------

    def _logprobs(
        self,
        ids: list[int],
        lps: list[float],
        tops: list[list[tuple[int, float]]],
        offset: int = 0,
    ) -> JSON | None:
        """The choice's (or chunk's) logprobs, None when not asked for."""
        if self.top is None:
            return None
        text = self.texts.token_text
        tokens = [
            wire.TokenLogprobs(
                wire.Logprob(text(token), logprob), [wire.Logprob(text(t), lp) for t, lp in top]
            )
            for token, logprob, top in zip(ids, lps, tops, strict=True)
        ]
        if self.is_chat:
            return wire.chat_logprobs(tokens)
        return wire.completion_logprobs(tokens, offset)


class _Piece(NamedTuple):
    """What one streamed token adds: text, and (with the last token) the tool calls."""

    text: str
    position: int
    offset: int
    calls: list[ToolCall]


class _StreamText:
    """Turns a stream's tokens into text pieces that add up to the decoding of all of them.

    A piece never ends in half a character (the replacement character a partial UTF-8 sequence
    decodes to waits for the rest), and with tools nothing from ``<tool_call>`` on, nor what
    could be its beginning, is sent as text: the calls go out with the last token.
    """

    def __init__(self, texts: TokenTexts, tools: bool) -> None:
        self.texts = texts
        self.tools = tools
        self.ids: list[int] = []
        self.sent = ""
        self.offset = 0  # the text_offset of the next token in completions logprobs
        self.calls: list[ToolCall] = []

    def add(self, token_id: int) -> _Piece:
        """The piece of a token that is not the last."""
        self.ids.append(token_id)
        visible = self.texts.decode(self.ids).rstrip("\ufffd")
        return self._piece(visible[: _tool_start(visible)] if self.tools else visible)

    def finish(self, token_id: int) -> _Piece:
        """The piece of the last token: the rest of the text, and the tool calls if any."""
        self.ids.append(token_id)
        text = self.texts.decode(self.ids)
        if self.tools:
            content, self.calls = parse_tool_calls(text)
            if self.calls:
                return self._piece(content or "")
        return self._piece(text)

    def _piece(self, visible: str) -> _Piece:
        new = visible[len(self.sent) :] if visible.startswith(self.sent) else ""
        self.sent += new
        offset = self.offset
        self.offset += len(self.texts.token_text(self.ids[-1]))
        return _Piece(new, len(self.ids) - 1, offset, self.calls)


def _tool_start(text: str) -> int:
    """Where a tool call starts or may be starting in ``text`` (its length if nowhere)."""
    at = text.find(TOOL_CALL_START)
    if at >= 0:
        return at
    for size in range(min(len(TOOL_CALL_START) - 1, len(text)), 0, -1):
        if TOOL_CALL_START.startswith(text[-size:]):
            return len(text) - size
    return len(text)


def _tool_calls(calls: list[ToolCall]) -> list[JSON]:
    return [wire.tool_call(f"call_{uuid.uuid4().hex[:24]}", c.name, c.arguments) for c in calls]


def _version_header(version: int) -> dict[str, str]:
    return {VERSION_HEADER: str(version)}


def error_response(status: int, message: str, *, param: str | None = None) -> JSONResponse:
    """An error answer: OpenAI's error body, with status code ``status``."""
    return JSONResponse(wire.error_body(status, message, param=param), status_code=status)
