"""Semantic conventions: every ``agl.*`` span attribute name, defined once.

Where OpenTelemetry's gen_ai conventions already name a fact (model, response id, token usage),
agl uses that name; the constants prefixed ``GEN_AI_`` below are those, repeated here so code has
one place to import attribute names from. Everything agl adds lives under ``agl.`` and is only
ever spelled through these constants.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "AGL_AGENT_NAME",
    "AGL_ANNOTATION_PREFIX",
    "AGL_ATTEMPT_ID",
    "AGL_LINK_RESPONSE_ID",
    "AGL_MESSAGE",
    "AGL_OBJECT_JSON",
    "AGL_OBJECT_TYPE",
    "AGL_OPERATION_INPUT",
    "AGL_OPERATION_NAME",
    "AGL_OPERATION_OUTPUT",
    "AGL_PROMPT_TOKEN_IDS",
    "AGL_REQUEST_JSON",
    "AGL_RESOURCES_ID",
    "AGL_RESPONSE_JSON",
    "AGL_RESPONSE_LOGPROBS",
    "AGL_RESPONSE_TOKEN_IDS",
    "AGL_REWARD",
    "AGL_REWARD_PREFIX",
    "AGL_REWARD_PRIMARY",
    "AGL_ROLLOUT_ID",
    "AGL_SPAN_TYPE",
    "AGL_TOOL_ARGUMENTS",
    "AGL_TOOL_CALLS",
    "AGL_TOOL_NAME",
    "AGL_TOOL_RESULT",
    "AGL_UPSTREAM_LATENCY_MS",
    "AGL_UPSTREAM_URL",
    "AGL_WEIGHT_VERSION",
    "AGL_WIRE",
    "AGL_WIRE_REQUEST_JSON",
    "AGL_WORKER_ID",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_ID",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_SYSTEM",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "SPAN_TYPE_AGENT",
    "SPAN_TYPE_ANNOTATION",
    "SPAN_TYPE_EXCEPTION",
    "SPAN_TYPE_GATEWAY",
    "SPAN_TYPE_LLM",
    "SPAN_TYPE_MESSAGE",
    "SPAN_TYPE_OBJECT",
    "SPAN_TYPE_OPERATION",
    "SPAN_TYPE_REWARD",
    "SPAN_TYPE_TOOL",
]

# --- Where a span belongs -------------------------------------------------------------------

AGL_ROLLOUT_ID: Final = "agl.rollout.id"
"""The rollout a span belongs to. Read from span or resource attributes by OTLP ingest."""

AGL_ATTEMPT_ID: Final = "agl.attempt.id"
"""The attempt (one try of a rollout) a span belongs to."""

AGL_WORKER_ID: Final = "agl.worker.id"
"""The runner that executed the attempt."""

AGL_RESOURCES_ID: Final = "agl.resources.id"
"""The id of the resources update the attempt ran with."""

AGL_SPAN_TYPE: Final = "agl.span.type"
"""What a span records, one of the ``SPAN_TYPE_*`` values below."""

SPAN_TYPE_AGENT: Final = "agent"
SPAN_TYPE_LLM: Final = "llm"
SPAN_TYPE_GATEWAY: Final = "gateway"
"""An LLM call as the gateway saw it: the engine's token ids, joined to the agent's ``llm`` span
of the same call through ``gen_ai.response.id``."""
SPAN_TYPE_TOOL: Final = "tool"
SPAN_TYPE_REWARD: Final = "reward"
SPAN_TYPE_MESSAGE: Final = "message"
SPAN_TYPE_OBJECT: Final = "object"
SPAN_TYPE_EXCEPTION: Final = "exception"
SPAN_TYPE_ANNOTATION: Final = "annotation"
SPAN_TYPE_OPERATION: Final = "operation"

# --- Agents and tools ------------------------------------------------------------------------

AGL_AGENT_NAME: Final = "agl.agent.name"
"""The name of the agent a span (and every LLM call under it) belongs to."""

AGL_TOOL_NAME: Final = "agl.tool.name"
"""The name of a called tool."""

AGL_TOOL_ARGUMENTS: Final = "agl.tool.arguments"
"""The arguments of a tool call, as a JSON string."""

AGL_TOOL_RESULT: Final = "agl.tool.result"
"""What a tool returned, as a string."""

# --- Rewards ----------------------------------------------------------------------------------

AGL_REWARD: Final = "agl.reward"
"""The primary reward value (a float) recorded by a reward span."""

AGL_REWARD_PREFIX: Final = "agl.reward."
"""Prefix of named rewards: ``agl.reward.<name>`` holds the value of the reward ``<name>``."""

AGL_REWARD_PRIMARY: Final = "agl.reward_primary"
"""The name of the primary reward when a reward span records several named rewards."""

AGL_LINK_RESPONSE_ID: Final = "agl.link.response_id"
"""The LLM response id a reward (or other emitted fact) refers to."""

# --- LLM calls as the engine saw them (recorded by the gateway) --------------------------------

AGL_PROMPT_TOKEN_IDS: Final = "agl.llm.prompt_token_ids"
"""The prompt's token ids exactly as the engine tokenized them."""

AGL_RESPONSE_TOKEN_IDS: Final = "agl.llm.response_token_ids"
"""The response's token ids exactly as the engine produced them."""

AGL_RESPONSE_LOGPROBS: Final = "agl.llm.response_logprobs"
"""The log-probability of each response token under the policy that sampled it."""

AGL_REQUEST_JSON: Final = "agl.llm.request"
"""The request the engine was sent, as JSON (chat or completions: the agent's own request, or
what a call on another wire became)."""

AGL_RESPONSE_JSON: Final = "agl.llm.response"
"""The engine's response, as JSON (on chat and completions, what the agent received)."""

AGL_WIRE: Final = "agl.llm.wire"
"""The wire a call came to the gateway on: ``chat``, ``completions``, ``responses`` (the OpenAI
Responses API) or ``messages`` (the Anthropic Messages API)."""

AGL_WIRE_REQUEST_JSON: Final = "agl.llm.wire_request"
"""A call on a wire other than chat and completions: the request as the agent sent it, as
JSON (:data:`AGL_REQUEST_JSON` holds the chat request it became)."""

AGL_TOOL_CALLS: Final = "agl.llm.tool_calls"
"""The tool calls an LLM response asked for: a JSON list of ``{id, name, arguments}``."""

AGL_UPSTREAM_URL: Final = "agl.llm.upstream"
"""The upstream server a gateway forwarded a call to."""

AGL_UPSTREAM_LATENCY_MS: Final = "agl.llm.upstream_latency_ms"
"""Milliseconds the upstream took to answer."""

AGL_WEIGHT_VERSION: Final = "agl.llm.weight_version"
"""The version of the policy weights that produced a response."""

# --- Emitted facts ----------------------------------------------------------------------------

AGL_MESSAGE: Final = "agl.message"
"""The text of an emitted message."""

AGL_OBJECT_JSON: Final = "agl.object.json"
"""An emitted object, serialized to JSON."""

AGL_OBJECT_TYPE: Final = "agl.object.type"
"""The Python type name of an emitted object."""

AGL_ANNOTATION_PREFIX: Final = "agl.annotation."
"""Prefix of emitted annotations: ``agl.annotation.<key>``."""

AGL_OPERATION_NAME: Final = "agl.operation.name"
"""The name of a recorded operation."""

AGL_OPERATION_INPUT: Final = "agl.operation.input"
"""An operation's inputs, as JSON."""

AGL_OPERATION_OUTPUT: Final = "agl.operation.output"
"""An operation's output, as JSON."""

# --- OpenTelemetry gen_ai names agl relies on ----------------------------------------------------

GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
"""The kind of model call (``chat``, ``text_completion``, ...)."""

GEN_AI_SYSTEM: Final = "gen_ai.system"
"""The model provider, in older instrumentations (``openai``, ``vllm``, ...)."""

GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
"""The model provider, in current instrumentations."""

GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
"""The messages sent to the model, as JSON (OpenTelemetry GenAI message format)."""

GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
"""The messages the model returned, as JSON (OpenTelemetry GenAI message format)."""

GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
"""The model name the agent asked for."""

GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
"""The model name the server answered with."""

GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
"""The id of a model response: the key that joins gateway and instrumentor spans."""

GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
"""Prompt tokens the server counted."""

GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
"""Response tokens the server counted."""
