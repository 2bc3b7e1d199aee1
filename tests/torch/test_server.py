"""The policy server over real HTTP: the openai client, httpx and agl's gateway, on the tiny model.

Token ids and logprobs are checked against an independent forward pass of the model; under a
weight swap, against the weights of the version each response names.
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch

from agl import RolloutRequest, semconv
from agl.gateway import GatewayServer
from agl.lightning import extract_calls
from agl.store._memory import MemoryStore
from agl_torch.server import PolicyServer
from agl_torch.tool_parser import ToolCall, parse_tool_calls

pytestmark = pytest.mark.anyio
MESSAGES: Any = [{"role": "user", "content": "Hello! Tell me a story about a fox."}]
IDS = {"return_token_ids": True}
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate arithmetic.",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
TOOL_MESSAGES: Any = [{"role": "user", "content": "What is 12*7? Use the calculator."}]
TOOL_ARGUMENTS = '{"expression": "12*7"}'
TOOL_CONTENT = "Let me compute 12*7. "
"""What the tool-call model says before its call."""
Answer = tuple[int, list[int], list[int], list[float]]
"""A response's weight version, prompt ids, token ids and logprobs."""
ModelLogprobs = Callable[[Any, Sequence[int], Sequence[int]], list[float]]
"""The ``model_logprobs`` fixture: ``(model, prompt, tokens)`` -> one logprob per token."""


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[PolicyServer]:
    with PolicyServer(tiny_model_dir) as server:
        yield server


@pytest.fixture
def client(server: PolicyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url, api_key="-", max_retries=0) as client:
        yield client


def chat_prompt(tokenizer: Any, messages: Any, tools: Any = None) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, return_dict=True
    )["input_ids"]
    return list(ids)


@pytest.fixture(scope="module")
def model_logprobs(forward_logprobs: Callable[..., torch.Tensor]) -> ModelLogprobs:
    """``(model, prompt, tokens)``: the logprob ``model`` gives each of ``tokens``."""

    def chosen(model: Any, prompt: Sequence[int], tokens: Sequence[int]) -> list[float]:
        logprobs = forward_logprobs(model, prompt, tokens)
        return logprobs.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1).tolist()

    return chosen


def assert_close(actual: Sequence[float], expected: Sequence[float]) -> None:
    assert len(actual) == len(expected)
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), atol=1e-4, rtol=0)


def sse_chunks(text: str) -> list[dict[str, Any]]:
    events = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(event) for event in events[:-1]]


# --- token-id fidelity ------------------------------------------------------------------------


def test_chat_returns_the_exact_tokens_and_their_logprobs(
    client: openai.OpenAI, tokenizer: Any, reference: Any, model_logprobs: ModelLogprobs
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="policy",
        messages=MESSAGES,
        max_tokens=12,
        seed=1,
        logprobs=True,
        top_logprobs=3,
        extra_body=IDS,
    )
    reply = raw.parse()
    assert raw.headers["x-agl-weight-version"] == "0"
    assert reply.system_fingerprint == "agl-torch-v0"
    assert reply.id.startswith("chatcmpl-")
    prompt_ids = (reply.model_extra or {})["prompt_token_ids"]
    assert prompt_ids == chat_prompt(tokenizer, MESSAGES)
    [choice] = reply.choices
    token_ids = (choice.model_extra or {})["token_ids"]
    assert choice.message.content == tokenizer.decode(token_ids, skip_special_tokens=True)
    assert choice.finish_reason == "length"
    assert choice.logprobs is not None
    assert choice.logprobs.content is not None
    entries = choice.logprobs.content
    assert_close([e.logprob for e in entries], model_logprobs(reference, prompt_ids, token_ids))
    for entry, token in zip(entries, token_ids, strict=True):
        assert entry.token == tokenizer.decode([token])
        assert entry.bytes == list(entry.token.encode())
        assert len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.logprob
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (len(prompt_ids), 12)


def test_a_chat_stream_adds_up_to_the_same_tokens(
    client: openai.OpenAI, tokenizer: Any, reference: Any, model_logprobs: ModelLogprobs
) -> None:
    ask: Any = {"model": "policy", "messages": MESSAGES, "max_tokens": 12, "seed": 5}
    whole = client.chat.completions.create(**ask, extra_body=IDS)
    raw = client.chat.completions.with_raw_response.create(
        **ask, stream=True, stream_options={"include_usage": True}, logprobs=True, extra_body=IDS
    )
    assert raw.headers["x-agl-weight-version"] == "0"
    chunks = list(raw.parse())
    assert {chunk.system_fingerprint for chunk in chunks} == {"agl-torch-v0"}
    prompt_ids = (chunks[0].model_extra or {})["prompt_token_ids"]
    assert prompt_ids == chat_prompt(tokenizer, MESSAGES)
    token_ids: list[int] = []
    logprobs: list[float] = []
    content = ""
    for chunk in chunks[1:-1]:
        [choice] = chunk.choices
        token_ids += (choice.model_extra or {})["token_ids"]
        assert choice.logprobs is not None
        logprobs += [entry.logprob for entry in choice.logprobs.content or []]
        content += choice.delta.content or ""
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(token_ids) == 12
    assert token_ids == (whole.choices[0].model_extra or {})["token_ids"]  # same seed
    assert content == tokenizer.decode(token_ids, skip_special_tokens=True)
    assert content == whole.choices[0].message.content
    assert_close(logprobs, model_logprobs(reference, prompt_ids, token_ids))


def test_completions_take_text_or_token_ids(
    server: PolicyServer, tokenizer: Any, reference: Any, model_logprobs: ModelLogprobs
) -> None:
    prompt = "Tell me a story about a fox"
    prompt_ids = tokenizer.encode(prompt)
    ask = {"model": "policy", "max_tokens": 10, "seed": 2, "logprobs": 2, **IDS}
    with httpx.Client(base_url=server.url) as http:
        plain = http.post("/completions", json={**ask, "prompt": prompt})
        by_ids = http.post("/completions", json={**ask, "prompt": prompt_ids}).json()
        streamed = http.post("/completions", json={**ask, "prompt": [prompt], "stream": True})
    assert plain.headers["x-agl-weight-version"] == "0"
    body = plain.json()
    assert body["id"].startswith("cmpl-")
    [choice] = body["choices"]
    assert choice["prompt_token_ids"] == prompt_ids
    assert choice["text"] == tokenizer.decode(choice["token_ids"], skip_special_tokens=True)
    logprobs = choice["logprobs"]
    assert_close(
        logprobs["token_logprobs"], model_logprobs(reference, prompt_ids, choice["token_ids"])
    )
    assert logprobs["tokens"] == [tokenizer.decode([t]) for t in choice["token_ids"]]
    offsets = [sum(len(t) for t in logprobs["tokens"][:i]) for i in range(len(logprobs["tokens"]))]
    assert logprobs["text_offset"] == offsets
    for token, top in zip(logprobs["tokens"], logprobs["top_logprobs"], strict=True):
        assert token in top  # the top 2 and the sampled token (texts may coincide)
        assert 1 <= len(top) <= 3
    assert by_ids["choices"][0]["token_ids"] == choice["token_ids"]

    chunks = sse_chunks(streamed.text)
    assert chunks[0]["choices"][0]["prompt_token_ids"] == prompt_ids
    assert "".join(c["choices"][0]["text"] for c in chunks) == choice["text"]
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == choice["token_ids"]
    streamed_offsets = [o for c in chunks for o in c["choices"][0]["logprobs"]["text_offset"]]
    assert streamed_offsets == offsets
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_models_health_and_weight_routes(server: PolicyServer) -> None:
    with httpx.Client(base_url=server.base_url) as http:
        assert http.get("/health").status_code == 200
        [card] = http.get("/v1/models").json()["data"]
        assert (card["id"], card["max_model_len"]) == ("policy", 1024)
        assert http.get("/agl/weights").json() == {"version": 0}


# --- errors -----------------------------------------------------------------------------------


def test_bad_requests_get_openai_400s_and_the_server_keeps_serving(
    server: PolicyServer, client: openai.OpenAI, tokenizer: Any
) -> None:
    with pytest.raises(openai.BadRequestError, match="'n' must be 1"):
        client.chat.completions.create(model="policy", messages=MESSAGES, n=2)
    long: Any = [{"role": "user", "content": "0 " * 600}]
    length = len(chat_prompt(tokenizer, long))
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError, match=rf"is 1024 tokens.*{length} input"):
            client.chat.completions.create(model="policy", messages=long, stream=stream)
    fits = len(chat_prompt(tokenizer, MESSAGES))
    with pytest.raises(openai.BadRequestError, match=rf"2000 > 1024 - {fits}"):
        client.chat.completions.create(model="policy", messages=MESSAGES, max_tokens=2000)
    bad_bodies: list[tuple[str, Any]] = [
        ("/chat/completions", b"{not json"),
        ("/chat/completions", b"[1, 2]"),
        ("/chat/completions", b'{"model": "policy"}'),
        ("/chat/completions", json.dumps({"messages": MESSAGES, "top_logprobs": 2}).encode()),
        ("/chat/completions", json.dumps({"messages": MESSAGES, "temperature": "hot"}).encode()),
        ("/chat/completions", json.dumps({"messages": MESSAGES, "max_tokens": 0}).encode()),
        ("/completions", json.dumps({"prompt": {"text": "hi"}}).encode()),
        ("/completions", json.dumps({"prompt": [10**6]}).encode()),
        ("/completions", json.dumps({"prompt": "hi", "echo": True}).encode()),
    ]
    with httpx.Client(base_url=server.url) as http:
        for path, content in bad_bodies:
            response = http.post(path, content=content)
            assert response.status_code == 400, content
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert (error["type"], error["code"]) == ("BadRequestError", 400)
        missing = http.get("/nowhere")
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, 404)
    reply = client.chat.completions.create(model="policy", messages=MESSAGES, max_tokens=2)
    assert reply.choices[0].finish_reason == "length"


# --- weight swaps -----------------------------------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
async def test_a_weight_swap_under_load_fails_nothing_and_labels_every_response(
    tiny_model_dir: Path,
    reference: Any,
    tmp_path: Path,
    model_logprobs: ModelLogprobs,
    device: str,
) -> None:
    generator = torch.Generator().manual_seed(1)
    swapped = copy.deepcopy(reference)
    with torch.no_grad():
        for parameter in swapped.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    swapped.save_pretrained(tmp_path / "v1")
    models = {0: reference, 1: swapped}

    # Set when the first response starts (a stream's, with its first token): a batch is running.
    started = asyncio.Event()

    async def ask(http: httpx.AsyncClient, index: int) -> Answer:
        body = {
            "model": "policy",
            "messages": [{"role": "user", "content": f"Tell me story number {index}."}],
            "max_tokens": 24,
            "seed": index,
            "logprobs": True,
            "stream": index % 4 == 0,
            **IDS,
        }
        async with http.stream("POST", "/chat/completions", json=body) as response:
            assert response.status_code == 200
            started.set()
            text = (await response.aread()).decode()
        version = int(response.headers["x-agl-weight-version"])
        if body["stream"]:
            chunks = sse_chunks(text)
            assert {c["system_fingerprint"] for c in chunks} == {f"agl-torch-v{version}"}
            prompt = chunks[0]["prompt_token_ids"]
            tokens = [t for c in chunks[1:] for t in c["choices"][0]["token_ids"]]
            logprobs = [
                e["logprob"] for c in chunks[1:] for e in c["choices"][0]["logprobs"]["content"]
            ]
        else:
            reply = json.loads(text)
            assert reply["system_fingerprint"] == f"agl-torch-v{version}"
            prompt, choice = reply["prompt_token_ids"], reply["choices"][0]
            tokens = choice["token_ids"]
            logprobs = [e["logprob"] for e in choice["logprobs"]["content"]]
        return version, prompt, tokens, logprobs

    with PolicyServer(tiny_model_dir, device=device) as server:
        assert server.engine.device.type == device
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            early = [asyncio.ensure_future(ask(http, i)) for i in range(32)]
            await started.wait()
            path = str(tmp_path / "v1")
            update = await http.post(f"{server.base_url}/agl/weights", json={"path": path})
            assert update.json() == {"version": 1}
            late = await asyncio.gather(*(ask(http, 100 + i) for i in range(8)))
            early_results = await asyncio.gather(*early)
        assert server.engine.stats.largest_batch > 1
    assert {version for version, *_ in late} == {1}
    versions = [version for version, *_ in early_results]
    assert 0 in versions
    assert set(versions) <= {0, 1}
    # The label is true: the logprobs are those of the weights it names, not of the others.
    for version in (0, 1):
        labelled = [answer for answer in [*early_results, *late] if answer[0] == version]
        for _, prompt, tokens, logprobs in labelled[:3]:
            assert_close(logprobs, model_logprobs(models[version], prompt, tokens))
            other = model_logprobs(models[1 - version], prompt, tokens)
            assert max(abs(a - b) for a, b in zip(logprobs, other, strict=True)) > 1e-3


# --- tool calls -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tool_server(reference: Any, tokenizer: Any) -> Iterator[PolicyServer]:
    """A server whose model was overfitted to answer TOOL_MESSAGES with one calculator call."""
    call = {"type": "function", "function": {"name": "calculator", "arguments": TOOL_ARGUMENTS}}
    turn = {"role": "assistant", "content": TOOL_CONTENT, "tool_calls": [call]}
    prompt = chat_prompt(tokenizer, TOOL_MESSAGES, TOOLS)
    full = tokenizer.apply_chat_template([*TOOL_MESSAGES, turn], tools=TOOLS, return_dict=True)
    ids = full["input_ids"][: full["input_ids"].index(tokenizer.eos_token_id, len(prompt)) + 1]
    inputs = torch.tensor([ids])
    labels = inputs.clone()
    labels[:, : len(prompt)] = -100  # learn the reply only
    model = copy.deepcopy(reference).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    torch.manual_seed(0)
    for _ in range(200):
        loss = model(input_ids=inputs, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.005:
            break
    with PolicyServer(model.eval(), tokenizer=tokenizer, model_name="tools") as server:
        yield server


def test_tool_calls_come_back_as_openai_tool_calls(
    tool_server: PolicyServer, tokenizer: Any
) -> None:
    with openai.OpenAI(base_url=tool_server.url, api_key="-", max_retries=0) as client:
        ask: Any = {"model": "tools", "messages": TOOL_MESSAGES, "tools": TOOLS, "temperature": 0}
        reply = client.chat.completions.create(**ask, extra_body=IDS)
        stream = list(client.chat.completions.create(**ask, stream=True, extra_body=IDS))
        plain = client.chat.completions.create(**ask, tool_choice="none")
    [choice] = reply.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == TOOL_CONTENT
    [call] = choice.message.tool_calls or []
    assert call.id.startswith("call_")
    assert call.type == "function"
    assert (call.function.name, call.function.arguments) == ("calculator", TOOL_ARGUMENTS)
    # The call, rendered back into the conversation, is exactly the tokens the model generated.
    prompt = (reply.model_extra or {})["prompt_token_ids"]
    generated = (choice.model_extra or {})["token_ids"]
    turn = {"role": "assistant", "content": TOOL_CONTENT, "tool_calls": [call.model_dump()]}
    history = tokenizer.apply_chat_template([*TOOL_MESSAGES, turn], tools=TOOLS, return_dict=True)
    assert history["input_ids"][: len(prompt) + len(generated)] == prompt + generated

    deltas = [c.choices[0].delta for c in stream if c.choices]
    assert "".join(d.content or "" for d in deltas) == TOOL_CONTENT
    assert sum(bool(d.content) for d in deltas) > 3  # sent as it came, before the call
    [streamed_call] = [t for d in deltas for t in d.tool_calls or []]
    assert streamed_call.function is not None
    assert (streamed_call.function.name, streamed_call.function.arguments) == (
        "calculator",
        TOOL_ARGUMENTS,
    )
    assert stream[-1].choices[0].finish_reason == "tool_calls"
    assert [
        t for c in stream[1:] for t in (c.choices[0].model_extra or {})["token_ids"]
    ] == generated

    assert plain.choices[0].message.tool_calls in (None, [])
    call_text = f'<tool_call>{{"name": "calculator", "arguments": {TOOL_ARGUMENTS}}}</tool_call>'
    assert plain.choices[0].message.content == TOOL_CONTENT + call_text
    assert plain.choices[0].finish_reason == "stop"


def test_the_tool_parser_keeps_arguments_as_written() -> None:
    text = (
        'Let me check. <tool_call>{"name": "search", "arguments": {"q": "a}b",  "n": [1, 2]}}'
        '</tool_call>\n<tool_call> {"arguments":{}, "name": "now"} </tool_call>'
    )
    assert parse_tool_calls(text) == (
        "Let me check. ",
        [ToolCall("search", '{"q": "a}b",  "n": [1, 2]}'), ToolCall("now", "{}")],
    )
    unclosed = '<tool_call>{"name": "now", "arguments": {}}'
    assert parse_tool_calls(unclosed) == (None, [ToolCall("now", "{}")])
    for malformed in (
        '<tool_call>{"name": "now", "arguments": {}</tool_call>',
        '<tool_call>{"name": "now"}</tool_call>',
        '<tool_call>{"name": 3, "arguments": {}}</tool_call>',
        '<tool_call>{"name": "a", "arguments": "{}"}</tool_call>',
        '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>oops</tool_call>',
        '<tool_call>{"name": "a", "arguments": {}} trailing',
    ):
        assert parse_tool_calls(malformed) == (malformed, [])
    assert parse_tool_calls("just text") == ("just text", [])
    assert parse_tool_calls("") == (None, [])


# --- through agl's gateway, and from the command line -----------------------------------------


async def test_the_gateway_records_the_tokens_the_server_returned(server: PolicyServer) -> None:
    store = MemoryStore()
    await store.enqueue_rollouts([RolloutRequest(input="story")])
    [claim] = await store.dequeue_rollouts(limit=1)
    rollout_id, attempt_id = claim.rollout.rollout_id, claim.attempt.attempt_id
    ask: Any = {"model": "policy", "messages": MESSAGES, "max_tokens": 10, "seed": 9}
    with GatewayServer([server.url], store) as gateway:
        base_url = gateway.rollout_url(rollout_id, attempt_id)
        async with openai.AsyncOpenAI(base_url=base_url, api_key="-", max_retries=0) as llm:
            reply = await llm.chat.completions.create(**ask, logprobs=True, extra_body=IDS)
            stream = await llm.chat.completions.create(**ask, stream=True)
            streamed = "".join(
                [c.choices[0].delta.content or "" async for c in stream if c.choices]
            )
        assert gateway.gateway is not None
        assert await asyncio.to_thread(gateway.gateway.sender.flush, 10)
    assert streamed == reply.choices[0].message.content
    prompt_ids = (reply.model_extra or {})["prompt_token_ids"]
    token_ids = (reply.choices[0].model_extra or {})["token_ids"]
    assert reply.choices[0].logprobs is not None
    logprobs = [entry.logprob for entry in reply.choices[0].logprobs.content or []]
    spans = [
        span
        for span in await store.query_spans(rollout_id)
        if span.attributes[semconv.AGL_SPAN_TYPE] == semconv.SPAN_TYPE_GATEWAY
    ]
    assert len(spans) == 2
    for span in spans:  # the plain call and the stream (same seed: same tokens)
        assert span.attributes[semconv.AGL_PROMPT_TOKEN_IDS] == prompt_ids
        assert span.attributes[semconv.AGL_RESPONSE_TOKEN_IDS] == token_ids
        assert span.attributes[semconv.AGL_RESPONSE_LOGPROBS] == logprobs


async def test_every_recorded_call_names_its_weight_version(
    tiny_model_dir: Path, reference: Any
) -> None:
    # Its own server: the weight update must not change the version other tests see.
    store = MemoryStore()
    await store.enqueue_rollouts([RolloutRequest(input="story")])
    [claim] = await store.dequeue_rollouts(limit=1)
    rollout_id, attempt_id = claim.rollout.rollout_id, claim.attempt.attempt_id
    ask: Any = {"model": "policy", "messages": MESSAGES, "max_tokens": 4}
    with PolicyServer(tiny_model_dir) as server, GatewayServer([server.url], store) as gateway:
        base_url = gateway.rollout_url(rollout_id, attempt_id)
        async with openai.AsyncOpenAI(base_url=base_url, api_key="-", max_retries=0) as llm:
            for version in (0, 1):
                if version:
                    weights = reference.state_dict()
                    assert await asyncio.to_thread(server.update_weights, weights) == 1
                await llm.chat.completions.create(**ask, extra_body=IDS)
                stream = await llm.chat.completions.create(**ask, stream=True, extra_body=IDS)
                _ = [chunk async for chunk in stream]
        assert gateway.gateway is not None
        assert await asyncio.to_thread(gateway.gateway.sender.flush, 10)
    spans = await store.query_spans(rollout_id)
    gateway_spans = [
        span
        for span in spans
        if span.attributes[semconv.AGL_SPAN_TYPE] == semconv.SPAN_TYPE_GATEWAY
    ]
    assert [span.attributes[semconv.AGL_WEIGHT_VERSION] for span in gateway_spans] == [0, 0, 1, 1]
    calls = extract_calls(spans).calls
    assert [call.weight_version for call in calls] == [0, 0, 1, 1]


def test_the_command_line_serves_a_model_folder(tiny_model_dir: Path) -> None:
    command = [sys.executable, "-m", "agl_torch.server", "--model", str(tiny_model_dir)]
    with subprocess.Popen(
        [*command, "--port", "0", "--model-name", "cli"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().strip()
            assert url.endswith("/v1")
            [card] = httpx.get(f"{url}/models").json()["data"]
            assert card["id"] == "cli"
        finally:
            process.terminate()


SAME_MISTAKES: list[tuple[str, dict[str, Any]]] = [
    ("chat/completions", {"messages": []}),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}),
    (
        "chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": 1}},
    ),
    ("chat/completions", {"messages": [{"role": "user", "content": "hi"}], "temperature": "x"}),
    ("completions", {"prompt": "hi", "logprobs": 21}),
    ("completions", {"prompt": 5}),
    ("completions", {"prompt": "hi", "max_tokens": 10_000}),
]


@pytest.mark.parametrize(("route", "body"), SAME_MISTAKES)
def test_a_mistake_gets_the_error_the_scripted_vllm_gives(
    server: PolicyServer, route: str, body: dict[str, Any]
) -> None:
    """The policy server and the scripted test server read requests with one reader."""
    from agl.testing.openai_server import OpenAIServer

    max_model_len = server.engine.max_model_len
    with OpenAIServer(max_model_len=max_model_len) as scripted:
        expected = httpx.post(f"{scripted.url}/{route}", json=body)
    got = httpx.post(f"{server.url}/{route}", json=body)
    assert got.status_code == expected.status_code == 400
    message = got.json()["error"]["message"]
    if "context length" in message:  # the prompt's length is the tokenizer's own
        assert "'max_tokens' or 'max_completion_tokens' is too large: 10000" in message
        assert expected.json()["error"]["message"].startswith(message.split(". This")[0])
    else:
        assert got.json() == expected.json()
