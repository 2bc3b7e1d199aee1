"""What the gateway's OpenAPI document says its routes accept and answer.

The generation routes read their body by hand (chat and completions are forwarded upstream as
they came, with token ids asked for; the Responses and Messages APIs are translated to chat), so
FastAPI cannot infer it: it is declared here, as much of each request as the gateway itself
relies on. Any other field is checked by the translation or passed on to the upstream, which
judges it. Errors are OpenAI's error object, which every OpenAI client understands; on the
Messages route, Anthropic's.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CHAT_REQUEST",
    "COMPLETIONS_REQUEST",
    "COUNT_TOKENS_REQUEST",
    "COUNT_TOKENS_RESPONSES",
    "ERRORS",
    "FLUSH_RESPONSES",
    "MESSAGES_REQUEST",
    "MESSAGES_RESPONSES",
    "OPENAI_RESPONSES",
    "RESPONSES_REQUEST",
]

_ERROR = {
    "description": "An OpenAI-style error",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["message", "type"],
                        "properties": {
                            "message": {"type": "string"},
                            "type": {"type": "string"},
                            "param": {},
                            "code": {},
                        },
                    }
                },
            }
        }
    },
}

ERRORS: dict[int | str, dict[str, Any]] = {
    400: _ERROR,  # a path id is no id (agl._ids), the body is no JSON object, or upstream said so
    401: _ERROR,  # a token is required and was missing or wrong
    404: _ERROR,  # the store has no such rollout or attempt
    422: _ERROR,
    502: _ERROR,  # the upstream is unreachable or sent no JSON
    503: _ERROR,  # the store is unreachable
    504: _ERROR,  # the upstream timed out
}
"""The error answers of the OpenAI routes (the upstream's own 4xx are passed on as they are)."""

OPENAI_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The engine's answer: a JSON object, or with stream=true server-sent "
        "events ending with data: [DONE]",
        "content": {
            "application/json": {"schema": {"type": "object"}},
            # each event's data: a chunk object, and last the string [DONE]
            "text/event-stream": {
                "schema": {"oneOf": [{"type": "object"}, {"type": "string", "const": "[DONE]"}]}
            },
        },
    },
    **ERRORS,
}
"""The answers of the chat and completions routes."""

FLUSH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Every call answered so far is in the store",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["flushed"],
                    "properties": {"flushed": {"type": "boolean"}},
                }
            }
        },
    },
    401: _ERROR,
    504: _ERROR,  # the store did not take the records in time
}

_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {"role": {"type": "string", "minLength": 1}},
}


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


CHAT_REQUEST = _body(
    {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "messages": {"type": "array", "minItems": 1, "items": _MESSAGE},
            "stream": {"type": "boolean"},
            "max_tokens": {"type": "integer", "minimum": 1},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "logprobs": {"type": "boolean"},
            "return_token_ids": {"type": "boolean"},
        },
    }
)
"""``POST …/chat/completions``: OpenAI's chat request (other fields go upstream as they are)."""

COMPLETIONS_REQUEST = _body(
    {
        "type": "object",
        "required": ["model", "prompt"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "prompt": {
                "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
            },
            "stream": {"type": "boolean"},
            "max_tokens": {"type": "integer", "minimum": 1},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "logprobs": {"type": "integer", "minimum": 0, "maximum": 20},
            "return_token_ids": {"type": "boolean"},
        },
    }
)
"""``POST …/completions``: OpenAI's completions request."""


RESPONSES_REQUEST = _body(
    {
        "type": "object",
        "required": ["input"],
        "properties": {
            "model": {"type": "string"},
            "input": {
                "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]
            },
            "instructions": {"type": "string"},
            "tools": {"type": "array", "items": {"type": "object"}},
            "stream": {"type": "boolean"},
            "max_output_tokens": {"type": "integer", "minimum": 1},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
        },
    }
)
"""``POST …/responses``: the OpenAI Responses API's request (translated to one chat call)."""

_ANTHROPIC_ERROR = {
    "description": "An Anthropic-style error",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["type", "error"],
                "properties": {
                    "type": {"type": "string", "const": "error"},
                    "error": {
                        "type": "object",
                        "required": ["type", "message"],
                        "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
                    },
                },
            }
        }
    },
}

MESSAGES_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "A message object, or with stream=true the Messages API's server-sent "
        "events (message_start ... message_stop)",
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "text/event-stream": {"schema": {"type": "object"}},
        },
    },
    **dict.fromkeys(ERRORS, _ANTHROPIC_ERROR),
}
"""The answers of the Messages route: Anthropic's message, events and errors."""

MESSAGES_REQUEST = _body(
    {
        "type": "object",
        "required": ["model", "max_tokens", "messages"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "max_tokens": {"type": "integer", "minimum": 1},
            "messages": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["role", "content"],
                    "properties": {
                        "role": {"type": "string", "enum": ["user", "assistant", "system"]},
                        "content": {
                            "oneOf": [
                                {"type": "string"},
                                {"type": "array", "items": {"type": "object"}},
                            ]
                        },
                    },
                },
            },
            "system": {
                "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]
            },
            "stream": {"type": "boolean"},
            "stop_sequences": {"type": "array", "items": {"type": "string"}},
        },
    }
)
"""``POST …/messages``: the Anthropic Messages API's request (translated to one chat call)."""

COUNT_TOKENS_REQUEST = _body(
    {
        "type": "object",
        "required": ["model", "messages"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "messages": MESSAGES_REQUEST["requestBody"]["content"]["application/json"]["schema"][
                "properties"
            ]["messages"],
            "system": {
                "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}}]
            },
        },
    }
)
"""``POST …/messages/count_tokens``: the Messages API's token count request."""

COUNT_TOKENS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The prompt's token count under the engine's own chat template",
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["input_tokens"],
                    "properties": {"input_tokens": {"type": "integer", "minimum": 0}},
                }
            }
        },
    },
    **dict.fromkeys(ERRORS, _ANTHROPIC_ERROR),
}
"""The answers of the count-tokens route."""
