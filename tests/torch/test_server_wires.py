"""The policy server on the other wires: the Responses and Messages APIs, through its chat route.

Each wire is one chat generation of the model: what an agent gets back on it is the text (and
tool calls) the chat route gives for the same request, and through agl's gateway the span holds
the model's own prompt ids (its chat template's) and generated ids.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from agl import RolloutRequest, semconv
from agl.gateway import GatewayServer
from agl.store._memory import MemoryStore
from agl_torch.server import PolicyServer

pytestmark = pytest.mark.anyio
QUESTION = "Hello! Tell me a story about a fox."
SEED = {"seed": 7}


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[PolicyServer]:
    with PolicyServer(tiny_model_dir) as server:
        yield server


def chat_text(server: PolicyServer, messages: Any, max_tokens: int) -> tuple[str, str | None]:
    with openai.OpenAI(base_url=server.url, api_key="-", max_retries=0) as client:
        reply = client.chat.completions.create(
            model="policy", messages=messages, max_tokens=max_tokens, extra_body=SEED
        )
    return reply.choices[0].message.content or "", reply.choices[0].finish_reason


def test_both_wires_answer_what_the_chat_route_answers(server: PolicyServer) -> None:
    text, finish = chat_text(
        server,
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}],
        12,
    )
    with openai.OpenAI(base_url=server.url, api_key="-", max_retries=0) as client:
        reply = client.responses.create(
            model="policy",
            instructions="Be brief.",
            input=QUESTION,
            max_output_tokens=12,
            extra_body=SEED,
        )
        events = list(
            client.responses.create(
                model="policy",
                instructions="Be brief.",
                input=QUESTION,
                max_output_tokens=12,
                extra_body=SEED,
                stream=True,
            )
        )
    # The last event holds the whole response: response.incomplete when the limit cut it
    # (the SDK's stream helper only accepts response.completed, as OpenAI's service sends).
    streamed = events[-1].response  # type: ignore[union-attr]
    assert events[-1].type == f"response.{reply.status}"
    assert reply.output_text == streamed.output_text == text
    assert reply.status == ("incomplete" if finish == "length" else "completed")
    with anthropic.Anthropic(base_url=server.base_url, api_key="-", max_retries=0) as claude:
        message = claude.messages.create(
            model="policy",
            max_tokens=12,
            system="Be brief.",
            messages=[{"role": "user", "content": QUESTION}],
            extra_body=SEED,
        )
        with claude.messages.stream(
            model="policy",
            max_tokens=12,
            system="Be brief.",
            messages=[{"role": "user", "content": QUESTION}],
            extra_body=SEED,
        ) as events:
            final = events.get_final_message()
    assert message.content[0].text == final.content[0].text == text  # type: ignore[union-attr]
    assert message.stop_reason == ("max_tokens" if finish == "length" else "end_turn")
    assert message.usage.output_tokens == final.usage.output_tokens


def test_a_wire_mistake_is_an_error_in_the_wires_format(server: PolicyServer) -> None:
    with (
        anthropic.Anthropic(base_url=server.base_url, api_key="-", max_retries=0) as claude,
        pytest.raises(anthropic.BadRequestError) as caught,
    ):
        claude.messages.create(
            model="policy",
            max_tokens=5,
            messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}],
        )
    assert caught.value.body["type"] == "error"  # type: ignore[index]
    assert "tool_use_id" in caught.value.body["error"]["message"]  # type: ignore[index]
    with (
        openai.OpenAI(base_url=server.url, api_key="-", max_retries=0) as client,
        pytest.raises(openai.BadRequestError, match="max_tokens"),  # the engine's own check
    ):
        client.responses.create(model="policy", input=QUESTION, max_output_tokens=100_000)


async def test_the_gateway_records_the_models_own_ids_on_both_wires(
    server: PolicyServer, tokenizer: Any
) -> None:
    store = MemoryStore()
    await store.enqueue_rollouts([RolloutRequest(input="story")])
    [claim] = await store.dequeue_rollouts(limit=1)
    rollout_id, attempt_id = claim.rollout.rollout_id, claim.attempt.attempt_id
    with GatewayServer([server.url], store) as gateway:
        url = gateway.rollout_url(rollout_id, attempt_id)
        async with openai.AsyncOpenAI(base_url=url, api_key="-", max_retries=0) as client:
            reply = await client.responses.create(
                model="policy", input=QUESTION, max_output_tokens=8, extra_body=SEED
            )
        base = url.removesuffix("/v1")
        async with anthropic.AsyncAnthropic(base_url=base, api_key="-", max_retries=0) as claude:
            message = await claude.messages.create(
                model="policy",
                max_tokens=8,
                messages=[{"role": "user", "content": QUESTION}],
                extra_body=SEED,
                stream=False,
            )
        assert gateway.gateway is not None
        assert await asyncio.to_thread(gateway.gateway.sender.flush, 10)
    spans = [
        span
        for span in await store.query_spans(rollout_id)
        if span.attributes[semconv.AGL_SPAN_TYPE] == semconv.SPAN_TYPE_GATEWAY
    ]
    assert [s.attributes[semconv.AGL_WIRE] for s in spans] == ["responses", "messages"]
    expected = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, return_dict=True
    )["input_ids"]
    for span, text in zip(spans, (reply.output_text, message.content[0].text), strict=True):  # type: ignore[union-attr]
        assert span.attributes[semconv.AGL_PROMPT_TOKEN_IDS] == list(expected)
        generated = span.attributes[semconv.AGL_RESPONSE_TOKEN_IDS]
        assert isinstance(generated, list)
        assert tokenizer.decode(generated, skip_special_tokens=True) == text
        weights = span.attributes[semconv.AGL_WEIGHT_VERSION]
        assert weights == 0
        assert json.loads(str(span.attributes[semconv.AGL_REQUEST_JSON]))["max_tokens"] == 8


def test_an_image_is_refused_by_a_text_model_naming_it(server: PolicyServer) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    content: Any = [{"type": "text", "text": "What is this?"}, image]
    with (
        anthropic.Anthropic(base_url=server.base_url, api_key="-", max_retries=0) as claude,
        pytest.raises(anthropic.BadRequestError, match=r"messages\[0\]\.content\[1\].*'image_url'"),
    ):
        claude.messages.create(
            model="policy", max_tokens=5, messages=[{"role": "user", "content": content}]
        )


@pytest.mark.parametrize("route", ["chat/completions", "completions", "responses", "messages"])
def test_a_body_nested_thousands_deep_is_a_400(server: PolicyServer, route: str) -> None:
    deep = ("[" * 5000 + "]" * 5000).encode()
    reply = httpx.post(
        f"{server.url}/{route}", content=deep, headers={"content-type": "application/json"}
    )
    assert reply.status_code == 400, reply.text
    assert "nested too deeply" in reply.json()["error"]["message"]
