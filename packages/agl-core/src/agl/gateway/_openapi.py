"""What the gateway's OpenAPI document says its routes accept and answer.

The chat and completions routes read their body by hand (it is forwarded upstream as it came,
with token ids asked for), so FastAPI cannot infer it: it is declared here, as much of OpenAI's
request as the gateway itself relies on. Any other field is passed on to the upstream, which
judges it. Errors are OpenAI's error object, which every OpenAI client understands.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CHAT_REQUEST", "COMPLETIONS_REQUEST", "ERRORS", "FLUSH_RESPONSES", "OPENAI_RESPONSES"]

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
    400: _ERROR,  # the body is not a JSON object, or the upstream refused the request
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
