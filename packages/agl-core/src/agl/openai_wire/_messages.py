"""The Anthropic Messages API (``POST /v1/messages``), served through one chat call.

What an agent sends (the ``anthropic`` SDK, Claude Code, PydanticAI / LangChain with an
Anthropic model) becomes the chat request an engine renders with its own template:

* ``system`` (a string or text blocks) is the first system message; each message's content (a string
  or blocks) maps block by block: ``text``; ``image`` (base64 or URL source) as a chat image part,
  which an engine that takes images reads and any other refuses; ``document`` with a plain-text
  source as text; an assistant's ``tool_use`` blocks become its ``tool_calls`` (the ``input`` as
  JSON text); a user's ``tool_result`` blocks become tool messages, before the user's other content,
  each answering a ``tool_use`` earlier in the conversation (with ``is_error`` the content is marked
  ``Error:``, as chat has no such flag).
* ``tools`` (``name``, ``description``, ``input_schema``), ``tool_choice`` (``auto``, ``any``,
  ``tool``, ``none``; ``disable_parallel_tool_use``), ``max_tokens`` (required, as Anthropic's API
  requires it), ``stop_sequences``, ``temperature``, ``top_p``, ``top_k`` (and vLLM's other sampling
  extras, such as ``seed``); ``metadata``, ``service_tier`` and ``cache_control`` marks are accepted
  and change nothing.
* Claude Code's defaults change nothing an open engine does and are accepted: ``thinking``
  ``adaptive`` (the model may think: this one answers without a thinking channel), context edits
  that clear thinking blocks, ``output_config.effort``; ``output_config.format`` (a JSON schema) is
  chat's ``response_format``. System messages inside ``messages`` (Claude Code sends its environment
  so) are chat system messages in place.
* Refused with a 400 naming the field: ``thinking`` enabled (a budget that would have to be spent),
  other context edits, thinking blocks in the history, server tools (web search, code execution,
  bash / text editor / computer use of Anthropic's own definition) and their blocks,
  ``mcp_servers``, ``container``, documents that are not plain text, and an ``anthropic-version``
  header that is not a version of the API (a date from ``2023-06-01`` on).

The answer is a ``message`` whose content holds a text block (when there is text) and a
``tool_use`` block per tool call; ``stop_reason`` is ``end_turn``, ``tool_use``, ``max_tokens``
or ``stop_sequence`` (with the ``stop_sequence`` that matched, from vLLM's ``stop_reason``). Its
id is the chat completion's, as ``msg_<hex>``. A stream is the events the SDK parses:
``message_start``, per block ``content_block_start`` / ``content_block_delta`` (``text_delta``,
``input_json_delta``) / ``content_block_stop``, then ``message_delta`` (``stop_reason`` and usage)
and ``message_stop``; a failure mid-stream is an ``error`` event. Errors are Anthropic's
``{"type": "error", "error": {"type", "message"}}``.

``/v1/messages/count_tokens`` is answered by the engine's tokenizer (vLLM's ``/tokenize``, on
the chat the messages become): the count is the prompt's token count under its own template.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agl.openai_wire import _messages_blocks as blocks
from agl.openai_wire._bodies import new_id, sse
from agl.openai_wire._requests import WireError
from agl.openai_wire._translate import SAMPLING_EXTRAS, ChatAnswer, ChatReader, Wire, WireStream

__all__ = ["ANTHROPIC_VERSION", "MessagesWire", "anthropic_error"]

JSON = dict[str, Any]

ANTHROPIC_VERSION = "2023-06-01"
"""The first ``anthropic-version`` of the Messages API as it is today. Later versions (dated
``YYYY-MM-DD``, as SDKs send them) are accepted: what they changed is in the fields, which are
each checked; anything that is not such a date is refused."""

_VERSION = re.compile(r"20\d\d-[01]\d-[0-3]\d")

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}

_REFUSED = {
    "mcp_servers": "MCP servers run on Anthropic's service, not on an open engine",
    "container": "containers run on Anthropic's service, not on an open engine",
}


def anthropic_error(status: int, message: str) -> JSON:
    """An Anthropic error body: ``{"type": "error", "error": {"type", "message"}}``."""
    kind = _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


class MessagesWire(Wire):
    """The Anthropic Messages API, over chat completions (see the module docstring)."""

    name = "messages"

    def to_chat(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> JSON:
        version = headers.get("anthropic-version")
        if version is not None and (not _VERSION.fullmatch(version) or version < ANTHROPIC_VERSION):
            raise WireError(
                f"anthropic-version: {version!r} is not a version of the Messages API: send "
                f"{ANTHROPIC_VERSION!r} or a later dated version",
                field="anthropic-version",
            )
        for key, why in _REFUSED.items():
            if body.get(key):
                raise WireError(f"{key}: not supported: {why}", field=key)
        _check_thinking(body.get("thinking"), body.get("context_management"))
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise WireError("model: Field required (a non-empty string)", field="model")
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise WireError(
                f"max_tokens: must be an integer of at least 1 (got {max_tokens!r})",
                field="max_tokens",
            )
        chat: JSON = {
            "model": model,
            "messages": blocks.chat_messages(body.get("system"), body.get("messages")),
            "max_tokens": max_tokens,
        }
        tools = blocks.chat_tools(body.get("tools"))
        if tools:
            chat["tools"] = tools
        if body.get("tool_choice") is not None:
            chat.update(blocks.chat_tool_choice(body["tool_choice"], tools))
        stop = body.get("stop_sequences")
        if stop is not None:
            if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
                raise WireError("stop_sequences: must be a list of strings", field="stop_sequences")
            if stop:
                chat["stop"] = stop
        response_format = _response_format(body.get("output_config"))
        if response_format is not None:
            chat["response_format"] = response_format
        for key in ("temperature", "top_p", "top_k"):
            value = body.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise WireError(f"{key}: must be a number (got {value!r})", field=key)
                chat[key] = value
        for key in SAMPLING_EXTRAS:
            if body.get(key) is not None:
                chat.setdefault(key, body[key])
        if body.get("stream") is not None and not isinstance(body["stream"], bool):
            raise WireError("stream: must be true or false", field="stream")
        if body.get("stream"):
            chat["stream"] = True
            chat["stream_options"] = {"include_usage": True}
        return chat

    def answer(self, chat: Mapping[str, Any], request: Mapping[str, Any]) -> JSON:
        answer = ChatReader().body(chat)
        content: list[JSON] = []
        text = answer.text
        calls = []
        for call in answer.tool_calls:
            block = blocks.tool_use_block(call.id, call.name, call.arguments)
            if block is None:  # not a JSON object: what the model wrote, as text
                text += call.arguments
            else:
                calls.append(block)
        if text or not calls:
            content.append({"type": "text", "text": text})
        content += calls
        stop_reason, stop_sequence = _stop(answer, request, bool(calls))
        return {
            "id": self.response_id(answer.id),
            "type": "message",
            "role": "assistant",
            "model": answer.model or request.get("model"),
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": _usage(answer.prompt_tokens, answer.completion_tokens),
        }

    def stream(self, request: Mapping[str, Any]) -> WireStream:
        return _MessagesStream(self, request)

    def tokenize_request(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> JSON:
        """The engine's ``/tokenize`` request (vLLM's) counting a ``/v1/messages/count_tokens``
        request's prompt: its messages and tools, as the chat they become."""
        chat = self.to_chat({**body, "max_tokens": 1, "stream": False}, headers)
        keep = ("model", "messages", "tools")
        return {**{k: chat[k] for k in keep if k in chat}, "add_generation_prompt": True}

    def error(self, status: int, message: str, param: str | None = None) -> JSON:
        return anthropic_error(status, message)

    def response_id(self, chat_id: str) -> str:
        suffix = chat_id.removeprefix("chatcmpl-").replace("-", "")
        return "msg_" + (suffix or new_id(""))


def _check_thinking(thinking: Any, context_management: Any) -> None:
    """Refuse thinking that would have to happen; accept what is a no-op without it.

    ``adaptive`` thinking lets the model decide, and a model behind this gateway answers
    without a separate thinking channel, so no thinking block comes back; ``enabled`` (a
    thinking budget the model must spend) cannot be honoured. Context edits that clear
    thinking blocks find none; any other edit would change the history the agent sent.
    """
    if thinking is not None:
        kind = thinking.get("type") if isinstance(thinking, Mapping) else None
        if kind not in ("disabled", "adaptive"):
            raise WireError(
                f"thinking: {kind!r} thinking is not supported by an open engine behind this "
                "gateway: leave 'thinking' out, or use 'adaptive' or 'disabled'",
                field="thinking",
            )
    if context_management is None:
        return
    edits = context_management.get("edits") if isinstance(context_management, Mapping) else None
    if not isinstance(edits, list) or not all(
        isinstance(edit, Mapping) and str(edit.get("type", "")).startswith("clear_thinking")
        for edit in edits
    ):
        raise WireError(
            "context_management: only clearing thinking blocks (there are none here) is "
            "supported: the history is sent to the engine as the agent sent it",
            field="context_management",
        )


def _response_format(output_config: Any) -> JSON | None:
    """``output_config.format`` (a JSON schema the answer must follow) as chat's; ``effort``,
    which only sets how much a model thinks, changes nothing here."""
    if output_config is None:
        return None
    if not isinstance(output_config, Mapping):
        raise WireError("output_config: must be an object", field="output_config")
    fmt = output_config.get("format")
    if fmt is None:
        return None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        schema = fmt.get("schema")
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    raise WireError(
        f"output_config.format: {fmt!r} is not supported (a json_schema format is)",
        field="output_config.format",
    )


def _usage(prompt: int | None, made: int | None) -> JSON:
    return {
        "input_tokens": prompt or 0,
        "output_tokens": made or 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _stop(answer: ChatAnswer, request: Mapping[str, Any], calls: bool) -> tuple[str, str | None]:
    """``stop_reason`` and ``stop_sequence`` from the chat finish reason (and vLLM's
    ``stop_reason``, the stop string that matched)."""
    if answer.finish_reason == "length":
        return "max_tokens", None
    if calls:
        return "tool_use", None
    stops = request.get("stop_sequences") or []
    if isinstance(answer.stop_reason, str) and answer.stop_reason in stops:
        return "stop_sequence", answer.stop_reason
    return "end_turn", None


class _MessagesStream(WireStream):
    """Chat chunks in, the Messages API's events out."""

    def __init__(self, wire: MessagesWire, request: Mapping[str, Any]) -> None:
        super().__init__()
        self._wire = wire
        self._request = request
        self._started = False
        self._block = -1  # the index of the block being streamed
        self._open: str | None = None  # its type

    @staticmethod
    def _event(kind: str, **fields: Any) -> str:
        return sse({"type": kind, **fields}, event=kind)

    def _start(self) -> list[str]:
        if self._started:
            return []
        self._started = True
        answer = self.reader.answer
        message: JSON = {
            "id": self._wire.response_id(answer.id),
            "type": "message",
            "role": "assistant",
            "model": answer.model or self._request.get("model"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": _usage(answer.prompt_tokens, 0),
        }
        return [self._event("message_start", message=message)]

    def _close(self) -> list[str]:
        if self._open is None:
            return []
        self._open = None
        return [self._event("content_block_stop", index=self._block)]

    def _open_block(self, block: JSON) -> list[str]:
        out = self._close()
        self._block += 1
        self._open = block["type"]
        out.append(self._event("content_block_start", index=self._block, content_block=block))
        return out

    def chunk(self, chunk: Mapping[str, Any]) -> list[str]:
        out: list[str] = []
        for delta in self.reader.chunk(chunk):
            out += self._start()
            if delta.kind == "text":
                if self._open != "text":
                    out += self._open_block({"type": "text", "text": ""})
                text_delta = {"type": "text_delta", "text": delta.text}
                out.append(self._event("content_block_delta", index=self._block, delta=text_delta))
            elif delta.kind == "tool" and delta.tool is not None:
                block = {"type": "tool_use", "id": delta.tool.id, "name": delta.tool.name}
                out += self._open_block({**block, "input": {}})
            elif delta.kind == "arguments" and self._open == "tool_use":
                json_delta = {"type": "input_json_delta", "partial_json": delta.text}
                out.append(self._event("content_block_delta", index=self._block, delta=json_delta))
        return out

    def end(self) -> list[str]:
        out = self._start()
        answer = self.reader.answer
        if self._block < 0:
            out += self._open_block({"type": "text", "text": ""})  # an empty answer
        out += self._close()
        stop_reason, stop_sequence = _stop(answer, self._request, bool(answer.tool_calls))
        usage = _usage(answer.prompt_tokens, self.reader.completion_tokens())
        delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
        out.append(self._event("message_delta", delta=delta, usage=usage))
        out.append(self._event("message_stop"))
        return out

    def fail(self, status: int, message: str) -> list[str]:
        return [*self._start(), sse(anthropic_error(status, message), event="error")]
