"""The wires agents speak, written once: requests read and checked, answers built.

Chat completions and completions in vLLM's format (:mod:`._requests`, :mod:`._bodies`); the
OpenAI Responses API (:mod:`._responses`) and the Anthropic Messages API (:mod:`._messages`),
each served through one chat call by the translation layer (:mod:`._translate`), so an engine
renders every prompt once, with its own template, and the token ids it reports are the ones it
used.

Every server agl runs or ships speaks it through this package: the gateway (errors, events),
the scripted test server (:mod:`agl.testing.openai_server`) and agl-torch's policy server. So
a test against the scripted server checks behaviour the real ``vllm serve`` has, and an agent
gets the same error for the same mistake from each of them.
"""

from agl.openai_wire._bodies import (
    DONE,
    WEIGHT_VERSION_HEADER,
    Logprob,
    TokenLogprobs,
    chat_body,
    chat_choice,
    chat_chunk,
    chat_logprobs,
    completion_body,
    completion_choice,
    completion_chunk,
    completion_logprobs,
    error_body,
    error_type,
    head,
    model_list,
    new_id,
    now,
    role_chunk,
    sse,
    sse_data,
    tool_call,
    usage,
    usage_chunk,
)
from agl.openai_wire._messages import ANTHROPIC_VERSION, MessagesWire, anthropic_error
from agl.openai_wire._requests import (
    MAX_TOP_LOGPROBS,
    Api,
    WireError,
    WireRequest,
    check_context,
    content_text,
    read_json,
    read_request,
)
from agl.openai_wire._response import WireJSONResponse
from agl.openai_wire._responses import ResponsesWire
from agl.openai_wire._translate import (
    ChatAnswer,
    ChatReader,
    Wire,
    WireStream,
    serve_wire,
    upstream_error,
)

WIRES: dict[str, Wire] = {"responses": ResponsesWire(), "messages": MessagesWire()}
"""The wires served through chat completions, by the name the gateway records them under."""

__all__ = [
    "ANTHROPIC_VERSION",
    "DONE",
    "MAX_TOP_LOGPROBS",
    "WEIGHT_VERSION_HEADER",
    "WIRES",
    "Api",
    "ChatAnswer",
    "ChatReader",
    "Logprob",
    "MessagesWire",
    "ResponsesWire",
    "TokenLogprobs",
    "Wire",
    "WireError",
    "WireJSONResponse",
    "WireRequest",
    "WireStream",
    "anthropic_error",
    "chat_body",
    "chat_choice",
    "chat_chunk",
    "chat_logprobs",
    "check_context",
    "completion_body",
    "completion_choice",
    "completion_chunk",
    "completion_logprobs",
    "content_text",
    "error_body",
    "error_type",
    "head",
    "model_list",
    "new_id",
    "now",
    "read_json",
    "read_request",
    "role_chunk",
    "serve_wire",
    "sse",
    "sse_data",
    "tool_call",
    "upstream_error",
    "usage",
    "usage_chunk",
]
