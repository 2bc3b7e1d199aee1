"""The dashboard's rig: a real run in a store served by ``agl store serve``, and Chromium.

``run_store`` starts ``agl store serve`` (SQLite, with a token) as its own process and fills it
with a real run: a small algorithm publishes a prompt, serves agl's scripted OpenAI-compatible
model through agl's gateway, runs 4 tasks x 2 samples (the agent asks the model, may call a
tool, emits a step reward; one task fails), logs its metrics, then publishes a second prompt and
runs again. :func:`add_rerendered_group` adds a group whose history was re-rendered (LightningRL's
``prefix_mismatch``). ``browser`` is the distribution's Chromium driven by Playwright (installed by
``scripts/setup.sh``; tests skip without it, except in CI where they fail).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import shutil
import socket
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

import agl
from agl.testing.openai_server import OpenAIServer, Reply, tool_reply

TOKEN = "dashboard-test-token"
PROMPTS = [
    "You answer arithmetic questions.\nReply with digits only.",
    "You answer arithmetic questions.\nThink, then reply with digits only.\nNever guess.",
]
TASKS = [{"a": a, "b": b} for a, b in ((1, 2), (2, 3), (4, 4), (5, 0))]


@dataclass
class RunStore:
    """The store server holding the run, and what the run put there."""

    url: str
    token: str
    db: Path
    resources_ids: list[str]
    rollout_ids: list[str]
    failed_ids: list[str]


_ANSWERS_AFTER_TOOL = itertools.count()


def scripted_model(request: dict[str, Any]) -> Reply:
    """Adds the numbers it is asked about; asks for the calculator first when b is 4, and then
    misreads its result every other time (so the two samples of that task differ)."""
    messages = request["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        wrong = next(_ANSWERS_AFTER_TOOL) % 2
        return Reply(text=str(int(last["content"]) + wrong))
    question = str(last["content"])
    a, b = (int(x) for x in question.split("?", maxsplit=1)[0].rsplit(maxsplit=1)[-1].split("+"))
    if b == 4:
        return tool_reply("calculator", {"expression": f"{a}+{b}"})
    return Reply(text=str(a + b + (1 if b == 3 else 0)))


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]


@agl.rollout
async def adder(task: dict[str, int], llm: agl.LLM, prompt_template: agl.PromptTemplate) -> float:
    if task["b"] == 0:
        raise RuntimeError("the agent refuses to add zero")
    messages: list[Any] = [
        {"role": "system", "content": prompt_template.template},
        {"role": "user", "content": f"What is {task['a']}+{task['b']}? Digits only."},
    ]
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0) as client:
        for _ in range(2):
            reply = await client.chat.completions.create(
                model=llm.model, messages=messages, tools=TOOLS
            )
            message = reply.choices[0].message
            if not message.tool_calls:
                break
            call = message.tool_calls[0]
            messages.append(message.model_dump(exclude_none=True))
            with agl.operation("calculator") as tool:
                result = str(task["a"] + task["b"])
                tool.set_output(result)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            agl.emit_reward(0.1)
    answer = (message.content or "").strip()
    return 1.0 if answer == str(task["a"] + task["b"]) else 0.0


class TwoPrompts(agl.Algorithm):
    """Two steps: each publishes a prompt version and runs every task twice."""

    name = "two-prompts"

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.resources_ids: list[str] = []

    async def run(self, ctx: agl.AlgorithmContext) -> None:
        llm = await ctx.serve_llm([self.upstream], "scripted")
        for step, text in enumerate(PROMPTS, start=1):
            update = await ctx.publish(
                {"llm": llm, "prompt_template": agl.PromptTemplate(template=text)}
            )
            self.resources_ids.append(update.resources_id)
            results = await ctx.run_rollouts(TASKS, n=2, description=f"step {step}")
            rewards = [r.reward or 0.0 for r in results]
            ctx.log(step, {"reward/mean": statistics.fmean(rewards), "actor/loss": 1.0 / step})


def run_async(work: Any) -> Any:
    """Run a coroutine to its end from a test that drives the browser (Playwright's sync API
    keeps an event loop of its own running in this thread)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def run_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunStore]:
    from agl.testing.processes import Processes

    folder = tmp_path_factory.mktemp("dashboard-run")
    db = folder / "agl.db"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Processes(folder) as procs:
        run_async(
            procs.store_server(
                "store", db=f"sqlite:///{db}", port=port, env={"AGL_STORE_TOKEN": TOKEN}
            )
        )
        with OpenAIServer(scripted_model) as model:
            algorithm = TwoPrompts(model.url)
            store = agl.open_store(url, token=TOKEN)
            trainer = agl.Trainer(
                algorithm, store=store, run_dir=folder / "run", progress=False, console=False
            )
            trainer.fit(adder, TASKS)
        ids = run_async(_rollouts(url))
        yield RunStore(
            url=url,
            token=TOKEN,
            db=db,
            resources_ids=algorithm.resources_ids,
            rollout_ids=[r.rollout_id for r in ids],
            failed_ids=[r.rollout_id for r in ids if r.status == "failed"],
        )


async def add_rerendered_group(store: agl.Store) -> tuple[str, str]:
    """Two rollouts of one group (rewards 1 and 0) whose agent asks twice. In the first, the
    chat template renders the first answer again without its reasoning, so the second prompt's
    ids do not extend the first prompt + response (a re-rendered history); in the second, the
    answer has no reasoning and the history extends. Each call is recorded the way the gateway
    records it. Returns the two rollout ids."""
    from agl.gateway._record import CallRecord
    from agl.testing._openai_wire import EOS_ID, encode, render_chat

    requests = [agl.RolloutRequest(input=i, metadata={"group_id": "g"}) for i in range(2)]
    rollouts = await store.enqueue_rollouts(requests)
    claims = {c.rollout.rollout_id: c.attempt for c in await store.dequeue_rollouts(limit=2)}
    first = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "2+2?"}]
    for reward, rollout in zip((1.0, 0.0), rollouts, strict=True):
        rollout_id, attempt_id = rollout.rollout_id, claims[rollout.rollout_id].attempt_id
        thinking = "<think>two and two</think>" if reward else ""
        answer = {"role": "assistant", "content": "4"}
        second = [*first, answer, {"role": "user", "content": "and 3+3?"}]
        spans = []
        for index, (messages, sampled) in enumerate(((first, thinking + "4"), (second, "6"))):
            request = {"model": "policy", "messages": messages}
            record = CallRecord(rollout_id, attempt_id, "chat", "http://engine/v1", request)
            reply = {"role": "assistant", "content": sampled.removeprefix(thinking)}
            choice = {"index": 0, "message": reply, "token_ids": [*encode(sampled), EOS_ID]}
            prompt_ids = encode(render_chat(messages))
            record.take_response({"choices": [choice], "prompt_token_ids": prompt_ids})
            record.start_ns, record.end_ns = 10 * index + 1, 10 * index + 5
            spans.append(record.to_span())
        spans.append(
            agl.Span.create(
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                name="agl.reward",
                attributes={
                    agl.semconv.AGL_SPAN_TYPE: agl.semconv.SPAN_TYPE_REWARD,
                    agl.semconv.AGL_REWARD: reward,
                },
            )
        )
        await store.add_spans(spans)
        await store.update_attempt(rollout_id, attempt_id, agl.AttemptStatus.SUCCEEDED)
    return rollouts[0].rollout_id, rollouts[1].rollout_id


async def _rollouts(url: str) -> list[agl.Rollout]:
    async with agl.open_store(url, token=TOKEN) as store:
        return (await store.query_rollouts(limit=1000)).rollouts


def chromium_path() -> str | None:
    """The distribution's Chromium, if installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one test module. Playwright's sync API keeps an event loop running in this
    thread while it is open, so it is closed before another module's tests run."""
    path = chromium_path()
    if path is None:
        message = "no Chromium: scripts/setup.sh installs it (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=path,
            args=["--no-sandbox", "--disable-background-networking", "--disable-dev-shm-usage"],
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A fresh page (1280 x 900); its screenshot is saved in the test's folder at the end,
    whether the test passed or not (``screenshot.png``)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    page.screenshot(path=str(tmp_path / "screenshot.png"), full_page=True)
    context.close()
    assert not errors, f"the page raised: {errors}"
