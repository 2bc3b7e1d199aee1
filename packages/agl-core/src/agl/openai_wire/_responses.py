"""The OpenAI Responses API (``POST /v1/responses``), served through one chat call.

What an agent sends (``client.responses.create``, the OpenAI Agents SDK's default model, the
Codex CLI) becomes the chat request an engine renders with its own template:

* ``instructions`` is the first system message; ``input`` (a string: one user message) items:
  messages (``input_text`` / ``output_text`` / ``input_image`` parts; role ``developer`` is
  ``system``), ``function_call`` items (grouped with the assistant text before them into one
  assistant message with ``tool_calls``) and ``function_call_output`` items (tool messages; each
  must answer a ``function_call`` earlier in ``input``).
* function ``tools`` (those in ``namespace`` groups too, offered by their own names; a call of one
  comes back with its ``namespace``), ``tool_choice``, ``parallel_tool_calls``,
  ``max_output_tokens``, ``temperature``, ``top_p``, ``top_logprobs``, ``text.format`` (JSON schema
  / JSON object) map onto their chat fields; vLLM's sampling extras (``seed``, ``top_k``...
  :data:`~agl.openai_wire._translate.SAMPLING_EXTRAS`) pass on as they are. Hints that change
  nothing an open engine does are accepted and ignored: ``store``, ``metadata``, ``user``,
  ``safety_identifier``, ``prompt_cache_key``, ``prompt_cache_retention``, ``service_tier``,
  ``client_metadata``, ``include`` (``message.output_text.logprobs`` is honoured), ``reasoning`` (no
  open model here reasons in a separate channel, so no reasoning item is ever answered),
  ``truncation: "disabled"``.
* What a stateless gateway cannot honestly do is refused with a 400 naming the field:
  ``previous_response_id`` and ``conversation`` (conversation state is the agent's: send the whole
  ``input``), ``background``, ``prompt`` templates, ``truncation: "auto"``, ``context_management``;
  reasoning and ``item_reference`` input items; built-in tools (web search, file search, computer
  use, code interpreter, image generation, MCP, shell) and their items; ``allowed_tools`` tool
  choices.

The answer is a ``response`` object whose ``output`` holds an assistant message (when there is
text) and a ``function_call`` item per tool call; ``status`` is ``incomplete`` (reason
``max_output_tokens``) when generation hit the limit. Its id is the chat completion's, as
``resp_<hex>``. A stream is the typed events the SDK parses: ``response.created``,
``response.in_progress``, ``response.output_item.added``, ``response.content_part.added``,
``response.output_text.delta`` / ``.done``, ``response.function_call_arguments.delta`` /
``.done``, ``response.content_part.done``, ``response.output_item.done``, then
``response.completed`` (or ``response.incomplete``; ``response.failed`` when the engine fails
mid-stream), each with its ``sequence_number``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agl.openai_wire import _responses_items as items
from agl.openai_wire._bodies import error_body, now, sse
from agl.openai_wire._requests import WireError
from agl.openai_wire._translate import SAMPLING_EXTRAS, ChatAnswer, Wire, WireStream

__all__ = ["ResponsesWire"]

JSON = dict[str, Any]

_REFUSED = {
    "previous_response_id": "the gateway keeps no conversation state: send the whole "
    "conversation in 'input' (the agent's history) instead of 'previous_response_id'",
    "conversation": "the gateway keeps no conversation state: send the whole conversation in "
    "'input' instead of a 'conversation'",
    "background": "background responses are not supported: ask without 'background'",
    "prompt": "stored prompt templates are not supported: send 'instructions' and 'input'",
    "context_management": "server-side context management is not supported: the agent's "
    "history is sent as it is",
    "max_tool_calls": "'max_tool_calls' is not supported: no built-in tools run here",
}


class ResponsesWire(Wire):
    """The OpenAI Responses API, over chat completions (see the module docstring)."""

    name = "responses"

    def to_chat(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> JSON:
        for key, why in _REFUSED.items():
            if body.get(key) not in (None, False):
                raise WireError(f"'{key}' is not supported: {why}", field=key)
        truncation = body.get("truncation")
        if truncation not in (None, "disabled"):
            raise WireError(
                f"'truncation' must be 'disabled' (got {truncation!r}): the engine is sent the "
                "whole input, never a truncated one",
                field="truncation",
            )
        if "input" not in body:
            raise WireError("'input' is required: a string or a list of input items", field="input")
        chat: JSON = {"messages": items.chat_messages(body.get("instructions"), body["input"])}
        if body.get("model") is not None:
            chat["model"] = body["model"]
        tools = items.chat_tools(body.get("tools"))
        if tools:
            chat["tools"] = tools
        if body.get("tool_choice") is not None:
            chat["tool_choice"] = items.chat_tool_choice(body["tool_choice"], tools)
        for source, target in (
            ("parallel_tool_calls", "parallel_tool_calls"),
            ("max_output_tokens", "max_tokens"),
            ("temperature", "temperature"),
            ("top_p", "top_p"),
        ):
            if body.get(source) is not None:
                chat[target] = body[source]
        for key in SAMPLING_EXTRAS:
            if body.get(key) is not None:
                chat.setdefault(key, body[key])
        include = body.get("include") or []
        if not isinstance(include, list):
            raise WireError("'include' must be a list of strings", field="include")
        if body.get("top_logprobs") is not None or "message.output_text.logprobs" in include:
            chat["logprobs"] = True
            chat["top_logprobs"] = body.get("top_logprobs") or 0
        response_format = items.chat_response_format(body.get("text"))
        if response_format is not None:
            chat["response_format"] = response_format
        if body.get("stream"):
            chat["stream"] = True
            chat["stream_options"] = {"include_usage": True}
        return chat

    def answer(self, chat: Mapping[str, Any], request: Mapping[str, Any]) -> JSON:
        from agl.openai_wire._translate import ChatReader

        answer = ChatReader().body(chat)
        groups = items.namespaces(request.get("tools"))
        output = items.output_items(answer, _logprobs_asked(request), groups)
        return items.response_object(self.response_id(answer.id), request, answer, output)

    def stream(self, request: Mapping[str, Any]) -> WireStream:
        return _ResponsesStream(self, request)

    def error(self, status: int, message: str, param: str | None = None) -> JSON:
        return error_body(status, message, param=param)

    def response_id(self, chat_id: str) -> str:
        return "resp_" + chat_id.removeprefix("chatcmpl-").replace("-", "")


def _logprobs_asked(request: Mapping[str, Any]) -> bool:
    include = request.get("include")
    return isinstance(include, list) and "message.output_text.logprobs" in include


class _ResponsesStream(WireStream):
    """Chat chunks in, the Responses API's typed events out."""

    def __init__(self, wire: ResponsesWire, request: Mapping[str, Any]) -> None:
        super().__init__()
        self._wire = wire
        self._request = request
        self._logprobs = _logprobs_asked(request)
        self._groups = items.namespaces(request.get("tools"))
        self._sequence = 0
        self._started = False
        self._created = now()
        self._output: list[JSON] = []  # finished items
        self._open: JSON | None = None  # the item being streamed
        self._text = ""

    def _event(self, kind: str, **fields: Any) -> str:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return sse(event, event=kind)

    def _response(self, status: str, answer: ChatAnswer | None = None) -> JSON:
        answer = answer or ChatAnswer(id=self.reader.answer.id, model=self.reader.answer.model)
        response_id = self._wire.response_id(self.reader.answer.id)
        return items.response_object(
            response_id, self._request, answer, list(self._output), status, self._created
        )

    def _start(self) -> list[str]:
        if self._started:
            return []
        self._started = True
        response = self._response("in_progress")
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def chunk(self, chunk: Mapping[str, Any]) -> list[str]:
        out = []
        for delta in self.reader.chunk(chunk):
            out += self._start()
            if delta.kind == "text":
                if self._open is None or self._open["type"] != "message":
                    out += self._close()
                    out += self._open_message()
                self._text += delta.text
                assert self._open is not None
                out.append(
                    self._event(
                        "response.output_text.delta",
                        item_id=self._open["id"],
                        output_index=len(self._output),
                        content_index=0,
                        delta=delta.text,
                        logprobs=items.text_logprobs(delta.logprobs) if self._logprobs else [],
                    )
                )
            elif delta.kind == "tool" and delta.tool is not None:
                out += self._close()
                namespace = self._groups.get(delta.tool.name)
                self._open = items.function_call_item(
                    delta.tool, status="in_progress", namespace=namespace
                )
                self._open["arguments"] = ""
                out.append(
                    self._event(
                        "response.output_item.added",
                        output_index=len(self._output),
                        item=dict(self._open),
                    )
                )
            elif delta.kind == "arguments" and self._open is not None:
                self._open["arguments"] += delta.text
                out.append(
                    self._event(
                        "response.function_call_arguments.delta",
                        item_id=self._open["id"],
                        output_index=len(self._output),
                        delta=delta.text,
                    )
                )
        return out

    def _open_message(self) -> list[str]:
        answer = self.reader.answer
        self._open = items.message_item(answer.id, len(self._output), "", status="in_progress")
        self._text = ""
        where = {"item_id": self._open["id"], "output_index": len(self._output)}
        start = {**self._open, "content": []}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            self._event("response.output_item.added", output_index=len(self._output), item=start),
            self._event("response.content_part.added", **where, content_index=0, part=part),
        ]

    def _close(self) -> list[str]:
        item = self._open
        if item is None:
            return []
        self._open = None
        where = {"item_id": item["id"], "output_index": len(self._output)}
        out = []
        if item["type"] == "message":
            answer = self.reader.answer
            logprobs = items.text_logprobs(answer.logprobs) if self._logprobs else []
            part = {
                "type": "output_text",
                "text": self._text,
                "annotations": [],
                "logprobs": logprobs,
            }
            length = answer.finish_reason == "length"
            item = {**item, "status": "incomplete" if length else "completed", "content": [part]}
            out.append(
                self._event(
                    "response.output_text.done",
                    **where,
                    content_index=0,
                    text=self._text,
                    logprobs=logprobs,
                )
            )
            out.append(
                self._event("response.content_part.done", **where, content_index=0, part=part)
            )
        else:
            item = {**item, "status": "completed"}
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    **where,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        out.append(
            self._event("response.output_item.done", output_index=len(self._output), item=item)
        )
        self._output.append(item)
        return out

    def end(self) -> list[str]:
        out = self._start()
        answer = self.reader.answer
        if not self._output and self._open is None:
            out += self._open_message()  # an empty answer is an empty message, as whole
        out += self._close()
        answer.completion_tokens = self.reader.completion_tokens()
        status = "incomplete" if answer.finish_reason == "length" else "completed"
        out.append(self._event(f"response.{status}", response=self._response(status, answer)))
        return out

    def fail(self, status: int, message: str) -> list[str]:
        out = self._start()
        response = self._response("failed")
        response["error"] = {"code": "server_error", "message": message}
        out.append(self._event("response.failed", response=response))
        return out
