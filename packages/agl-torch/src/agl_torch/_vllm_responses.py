"""Answer generation requests in vLLM's wire format: whole bodies, stream chunks, errors.

A :class:`Reply` turns a :class:`~agl_torch.engine.Completion` (or the engine's stream of
tokens) into the body (or server-sent events) ``vllm serve`` would send, with the token ids,
logprobs and weight version a training loop needs; the server module's docstring describes the
format. :func:`error_response` gives OpenAI's error bodies.

:data:`VERSION_HEADER` and :func:`fingerprint` are public as :mod:`agl_torch.server`'s.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, NamedTuple

from fastapi.responses import JSONResponse, Response, StreamingResponse

from agl_torch._vllm_requests import JSON, GenerationRequest
from agl_torch.engine import Completion, Token
from agl_torch.tool_parser import TOOL_CALL_START, ToolCall, parse_tool_calls

VERSION_HEADER = "x-agl-weight-version"
"""The response header holding the weight version that produced the response."""


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
        self.top = request.logprobs
        self.tools = request.tools
        self.ids = request.token_ids
        self.usage = request.include_usage
        self.head: JSON = {
            "id": f"{'chatcmpl' if self.is_chat else 'cmpl'}-{uuid.uuid4().hex}",
            "object": "chat.completion" if self.is_chat else "text_completion",
            "created": int(time.time()),
            "model": request.model or model_name,
        }

    # --- whole bodies -----------------------------------------------------------------------

    def respond(self, done: Completion) -> Response:
        """The whole body answering the request, once its generation is ``done``."""
        return self._chat(done) if self.is_chat else self._completion(done)

    def _chat(self, done: Completion) -> Response:
        text = self.texts.decode(done.token_ids)
        content, calls = parse_tool_calls(text) if self.tools else (text, [])
        message: JSON = {"role": "assistant", "content": content if calls else text}
        message["tool_calls"] = _tool_calls(calls)
        choice = {
            "index": 0,
            "message": message,
            "logprobs": self._chat_logprobs(done.token_ids, done.logprobs, done.top_logprobs),
            "finish_reason": "tool_calls" if calls else done.finish_reason,
            "stop_reason": done.stop_reason,
            "token_ids": done.token_ids if self.ids else None,
        }
        body = self._body(done, choice)
        body["prompt_token_ids"] = self._prompt_ids()
        return JSONResponse(body, headers=_version_header(done.weight_version))

    def _completion(self, done: Completion) -> Response:
        choice = {
            "index": 0,
            "text": self.texts.decode(done.token_ids),
            "logprobs": self._completion_logprobs(done.token_ids, done.logprobs, done.top_logprobs),
            "finish_reason": done.finish_reason,
            "stop_reason": done.stop_reason,
            "prompt_token_ids": self._prompt_ids(),
            "token_ids": done.token_ids if self.ids else None,
        }
        return JSONResponse(self._body(done, choice), headers=_version_header(done.weight_version))

    def _body(self, done: Completion, choice: JSON) -> JSON:
        return {
            **self.head,
            "choices": [choice],
            "usage": _usage(len(self.prompt), len(done.token_ids)),
            "system_fingerprint": fingerprint(done.weight_version),
        }

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
            head["object"] = "chat.completion.chunk"
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
            role |= {"logprobs": None, "finish_reason": None}
            yield _sse({**head, "choices": [role], "prompt_token_ids": self._prompt_ids()})
        text = _StreamText(self.texts, self.tools)
        pending, done = first, None
        try:
            async for event in events:
                if isinstance(event, Token):
                    yield _sse({**head, "choices": [self._chunk(pending, text.add(pending.id))]})
                    pending = event
                else:
                    done = event
        except Exception as exc:  # the batch failed: tell the client, as vLLM does
            yield _sse({"error": _error_body(500, f"generation failed: {exc}")})
            yield "data: [DONE]\n\n"
            return
        finally:
            await events.aclose()
        assert done is not None
        last = self._chunk(pending, text.finish(pending.id))
        last["finish_reason"] = "tool_calls" if text.calls else done.finish_reason
        last["stop_reason"] = done.stop_reason
        yield _sse({**head, "choices": [last]})
        if self.usage:
            usage = _usage(len(self.prompt), len(done.token_ids))
            yield _sse({**head, "choices": [], "usage": usage})
        yield "data: [DONE]\n\n"

    def _chunk(self, token: Token, piece: _Piece) -> JSON:
        """The choice of one token's chunk; ``piece`` is what the token adds to the text."""
        ids, lps, tops = [token.id], [token.logprob], [token.top_logprobs]
        if self.is_chat:
            delta: JSON = {"content": piece.text} if piece.text else {}
            if piece.calls:
                delta["tool_calls"] = [
                    {"index": i, **call} for i, call in enumerate(_tool_calls(piece.calls))
                ]
            choice = {"index": 0, "delta": delta, "logprobs": self._chat_logprobs(ids, lps, tops)}
        else:
            logprobs = self._completion_logprobs(ids, lps, tops, piece.offset)
            choice = {"index": 0, "text": piece.text, "logprobs": logprobs}
            choice["prompt_token_ids"] = self._prompt_ids() if piece.position == 0 else None
        return choice | {"finish_reason": None, "token_ids": ids if self.ids else None}

    def _prompt_ids(self) -> list[int] | None:
        return self.prompt if self.ids else None

    # --- logprobs ---------------------------------------------------------------------------

    def _chat_logprobs(
        self, ids: list[int], lps: list[float], tops: list[list[tuple[int, float]]]
    ) -> JSON | None:
        if self.top is None:
            return None
        return {
            "content": [
                {
                    **self._entry(token, logprob),
                    "top_logprobs": [self._entry(t, lp) for t, lp in top],
                }
                for token, logprob, top in zip(ids, lps, tops, strict=True)
            ]
        }

    def _entry(self, token_id: int, logprob: float) -> JSON:
        text = self.texts.token_text(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    def _completion_logprobs(
        self,
        ids: list[int],
        lps: list[float],
        tops: list[list[tuple[int, float]]],
        offset: int = 0,
    ) -> JSON | None:
        if self.top is None:
            return None
        tokens = [self.texts.token_text(t) for t in ids]
        offsets = []
        for token in tokens:
            offsets.append(offset)
            offset += len(token)
        top_dicts = [
            {self.texts.token_text(t): lp for t, lp in [*top, (token, logprob)]}
            for token, logprob, top in zip(ids, lps, tops, strict=True)
        ]
        return {
            "tokens": tokens,
            "token_logprobs": lps,
            "top_logprobs": top_dicts,
            "text_offset": offsets,
        }


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
    return [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in calls
    ]


def _usage(prompt_tokens: int, completion_tokens: int) -> JSON:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _version_header(version: int) -> dict[str, str]:
    return {VERSION_HEADER: str(version)}


def error_response(status: int, message: str, *, param: str | None = None) -> JSONResponse:
    """An error answer: OpenAI's error body, with status code ``status``."""
    return JSONResponse(_error_body(status, message, param), status_code=status)


def _error_body(status: int, message: str, param: str | None = None) -> JSON:
    """OpenAI's error body, with the ``type`` names vLLM and the OpenAI SDK use."""
    kinds = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}
    kind = kinds.get(status, "InternalServerError" if status == 500 else "APIError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def _sse(data: Mapping[str, Any]) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"
