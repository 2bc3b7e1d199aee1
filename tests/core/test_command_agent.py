"""CommandAgent: real processes, run by the runner, calling a real gateway.

Claude Code and the Codex CLI cannot be driven by a model small enough for tests, and are not
installed here; a stand-in program (``STAND_IN``) takes their place. It reads its endpoint the
way each harness does (``ANTHROPIC_*`` variables, ``$CODEX_HOME/config.toml``, ``OPENAI_*``)
and calls the gateway over HTTP on that program's wire (``POST /v1/messages?beta=true`` with
``x-api-key`` as Claude Code does, ``POST /responses`` as Codex does, chat completions), and
the gateway forwards to a scripted server speaking vLLM's wire with its token ids.
``tests/examples/test_cli_agents.py`` runs the real programs.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agl
from agl import LLM, AttemptStatus, RolloutConfig, RolloutRequest, Runner, semconv
from agl._results import fetch_results
from agl.gateway import GatewayServer
from agl.lightning import extract_calls
from agl.store._memory import MemoryStore
from agl.testing.openai_server import OpenAIServer, decode, echo

pytestmark = pytest.mark.anyio

STAND_IN = textwrap.dedent(
    """
    import json, os, sys, tomllib, urllib.request

    wire, task = sys.argv[1], sys.argv[2]
    headers = {"Content-Type": "application/json"}
    if wire == "chat":  # a plain OpenAI-client program
        url = os.environ["OPENAI_BASE_URL"] + "/chat/completions"
        key, model = os.environ["OPENAI_API_KEY"], os.environ["OPENAI_MODEL"]
        headers["Authorization"] = "Bearer " + key
        body = {"model": model, "messages": [{"role": "user", "content": task}]}
    elif wire == "claude":  # what Claude Code reads and sends
        url = os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages?beta=true"
        key, model = os.environ["ANTHROPIC_API_KEY"], os.environ["ANTHROPIC_MODEL"]
        headers.update({"x-api-key": key, "anthropic-version": "2023-06-01"})
        messages = [{"role": "user", "content": [{"type": "text", "text": task}]}]
        body = {"model": model, "max_tokens": 256, "messages": messages}
    elif wire == "codex":  # what the Codex CLI reads and sends
        with open(os.path.join(os.environ["CODEX_HOME"], "config.toml"), "rb") as file:
            config = tomllib.load(file)
        provider = config["model_providers"][config["model_provider"]]
        url = provider["base_url"] + "/responses"
        key, model = os.environ[provider["env_key"]], config["model"]
        headers["Authorization"] = "Bearer " + key
        content = [{"type": "input_text", "text": task}]
        body = {"model": model, "input": [{"role": "user", "content": content}], "store": False}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    reply = json.load(urllib.request.urlopen(request, timeout=30))
    if wire == "chat":
        answer = reply["choices"][0]["message"]["content"]
    elif wire == "claude":
        answer = "".join(block["text"] for block in reply["content"] if block["type"] == "text")
    else:
        items = [item for item in reply["output"] if item["type"] == "message"]
        answer = "".join(part["text"] for item in items for part in item["content"])
    with open("answer.txt", "w") as file:
        file.write(answer)
    facts = {"cwd": os.getcwd(), "url": url, "key": key, "model": model, "env": dict(os.environ)}
    print(json.dumps(facts))
    """
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer(max_model_len=4096) as server:
        server.script = echo
        yield server


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    path = tmp_path / "stand_in.py"
    path.write_text(STAND_IN, encoding="utf-8")
    return path


def listing(path: Path) -> list[str]:
    return sorted(child.name for child in path.iterdir())


def answered(result: agl.CommandResult) -> float:
    """The reward: the stand-in wrote the model's echo of the task into answer.txt."""
    return 1.0 if result.read("answer.txt") == f"ok: {result.task}" else 0.0


async def run_rollouts(
    agent: agl.CommandAgent, store: MemoryStore, gateway: GatewayServer, *tasks: Any, **request: Any
) -> list[agl.RolloutResult]:
    await store.add_resources({"llm": LLM(endpoint=gateway.endpoint_template, model="policy")})
    rollouts = await store.enqueue_rollouts([RolloutRequest(input=t, **request) for t in tasks])
    await Runner(
        agent,
        store,
        handle_signals=False,
        poll_wait=0.1,
        concurrency=len(tasks),
        max_rollouts=len(tasks),
        gateway_token="tok",
    ).run()
    finished = [await store.get_rollout(rollout.rollout_id) for rollout in rollouts]
    return await fetch_results(store, finished)


def of_type(result: agl.RolloutResult, span_type: str) -> list[agl.Span]:
    return [s for s in result.spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == span_type]


def recorded(result: agl.RolloutResult) -> dict[str, Any]:
    """The CommandResult the agent put on the rollout."""
    [span] = of_type(result, semconv.SPAN_TYPE_OBJECT)
    assert span.attributes[semconv.AGL_OBJECT_TYPE] == "CommandResult"
    value: dict[str, Any] = json.loads(str(span.attributes[semconv.AGL_OBJECT_JSON]))
    return value


@pytest.mark.parametrize(
    ("wire", "harness", "wire_name"),
    [("claude", "claude-code", "messages"), ("codex", "codex", "responses")],
)
async def test_each_rollout_runs_the_program_in_a_fresh_directory_through_the_gateway(
    wire: str,
    harness: str,
    wire_name: str,
    stand_in: Path,
    store: MemoryStore,
    upstream: OpenAIServer,
    tmp_path: Path,
) -> None:
    agent = agl.CommandAgent(
        [sys.executable, str(stand_in), wire, "{task}"],
        harness=harness,
        reward=answered,
        timeout=30,
        workdir_root=tmp_path,
    )
    with GatewayServer([upstream.url], store, token="tok") as gateway:
        results = await run_rollouts(agent, store, gateway, "alpha", "beta")
    assert [r.reward for r in results] == [1.0, 1.0], [r.error for r in results]
    runs = [recorded(r) for r in results]
    facts = [json.loads(run["stdout"]) for run in runs]
    assert len({fact["cwd"] for fact in facts}) == 2  # a directory of its own each
    assert [run["workdir"] for run in runs] == [fact["cwd"] for fact in facts]
    assert listing(tmp_path) == [stand_in.name]  # and removed afterwards
    for result, fact in zip(results, facts, strict=True):
        rollout_id, attempt_id = result.rollout.rollout_id, result.rollout.latest_attempt_id
        assert fact["url"].startswith(f"{gateway.url}/rollout/{rollout_id}/attempt/{attempt_id}/")
        assert (fact["key"], fact["model"]) == ("tok", "policy")
        assert fact["env"]["HOME"] != os.environ.get("HOME")
        [call] = of_type(result, semconv.SPAN_TYPE_GATEWAY)
        assert call.attributes[semconv.AGL_WIRE] == wire_name
        prompt_ids = call.attributes[semconv.AGL_PROMPT_TOKEN_IDS]
        response_ids = call.attributes[semconv.AGL_RESPONSE_TOKEN_IDS]
        assert isinstance(prompt_ids, list)
        assert isinstance(response_ids, list)
        assert str(result.rollout.input) in decode(prompt_ids)  # type: ignore[arg-type]
        assert decode(response_ids) == f"ok: {result.rollout.input}"  # type: ignore[arg-type]
        # the call is the agent's: a table per agent or an algorithm map finds it by name
        assert [call.agent for call in extract_calls(result.spans).calls] == [agent.name]
    env = facts[0]["env"]
    if harness == "claude-code":
        assert env["ANTHROPIC_BASE_URL"] == facts[0]["url"].removesuffix("/v1/messages?beta=true")
        assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
        assert env["DISABLE_AUTOUPDATER"] == "1"
    else:
        config = (Path(env["CODEX_HOME"]) / "config.toml").as_posix()
        assert config.startswith(env["HOME"])
        assert "OPENAI_API_KEY" not in env


async def test_a_plain_program_gets_openai_variables_and_dict_tasks_fill_placeholders(
    stand_in: Path, store: MemoryStore, upstream: OpenAIServer
) -> None:
    def reward(result: agl.CommandResult) -> float:
        return 1.0 if result.read("answer.txt") == f"ok: {result.task['question']}" else 0.0

    agent = agl.CommandAgent(
        [sys.executable, str(stand_in), "chat", "{task[question]}"], reward=reward, timeout=30
    )
    assert agent.harness is None
    with GatewayServer([upstream.url], store, token="tok") as gateway:
        [result] = await run_rollouts(agent, store, gateway, {"question": "2+2?"})
    assert result.reward == 1.0, result.error
    fact = json.loads(recorded(result)["stdout"])
    assert fact["env"]["OPENAI_BASE_URL"].endswith(
        f"/attempt/{result.rollout.latest_attempt_id}/v1"
    )
    assert recorded(result)["command"][-1] == "2+2?"


async def test_files_are_seeded_and_a_reward_can_read_what_the_program_wrote(
    tmp_path: Path,
) -> None:
    script = "import pathlib; pathlib.Path('out.txt').write_text(pathlib.Path('in/a.txt').read_text() + pathlib.Path('b.txt').read_text())"  # noqa: E501
    seen: list[agl.CommandResult] = []

    async def reward(result: agl.CommandResult) -> float:  # rewards may be async
        seen.append(result)
        return float(result.read("out.txt") == "ab")

    agent = agl.CommandAgent(
        [sys.executable, "-c", script], files={"in/a.txt": "a"}, reward=reward, keep_workdir=True
    )
    assert await agent.rollout({"files": {"b.txt": b"b"}}) == 1.0
    [result] = seen
    assert result.ok
    assert result.read("missing.txt") is None
    assert result.workdir.is_dir()  # kept
    assert result.workdir.parent.name.startswith("agl-command-")


async def test_output_is_kept_bounded_to_its_tail(tmp_path: Path) -> None:
    script = "import sys; sys.stdout.write('x' * 99_000 + 'END'); sys.stderr.write('e' * 50_000)"
    seen: list[agl.CommandResult] = []
    agent = agl.CommandAgent(
        [sys.executable, "-c", script], output_limit=1000, reward=seen.append, workdir_root=tmp_path
    )
    await agent.rollout("task")
    [result] = seen
    assert result.stdout == "x" * 997 + "END"
    assert (result.stdout_bytes, result.stderr_bytes) == (99_003, 50_000)
    assert result.stderr == "e" * 1000
    assert listing(tmp_path) == []  # the directory is gone


GROUP = textwrap.dedent(
    """
    import os, pathlib, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends this one
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pathlib.Path(sys.argv[1]).write_text("%d %d" % (os.getpid(), child.pid))
    print("started", flush=True)
    time.sleep(60)
    """
)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie nobody reaped yet is gone as far as work goes


async def wait_gone(pids: list[int], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if alive(p)]}"
        await asyncio.sleep(0.05)


async def test_the_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    seen: list[agl.CommandResult] = []
    agent = agl.CommandAgent(
        [sys.executable, "-c", GROUP, str(pids_file)],
        timeout=2.0,  # time enough to start the child on a busy machine
        kill_grace=0.3,
        reward=seen.append,
    )
    started = time.monotonic()
    assert await agent.rollout("task") is None  # no reward: the function returned none
    assert time.monotonic() - started < 10
    [result] = seen
    assert result.timed_out
    assert not result.ok
    assert result.exit_code == -9  # it ignored SIGTERM
    assert result.stdout == "started\n"
    await wait_gone([int(pid) for pid in pids_file.read_text().split()])


async def test_the_rollouts_own_timeout_kills_the_group_and_times_the_attempt_out(
    tmp_path: Path, store: MemoryStore
) -> None:
    pids_file = tmp_path / "pids"
    agent = agl.CommandAgent([sys.executable, "-c", GROUP, str(pids_file)])
    await store.enqueue_rollouts(
        [RolloutRequest(input="task", config=RolloutConfig(timeout_seconds=2.0))]
    )
    stats = await Runner(agent, store, handle_signals=False, poll_wait=0.1, max_rollouts=1).run()
    assert stats.timed_out == 1
    await wait_gone([int(pid) for pid in pids_file.read_text().split()])
    [rollout] = (await store.query_rollouts()).rollouts
    [attempt] = await store.query_attempts(rollout.rollout_id)
    assert attempt.status == AttemptStatus.TIMEOUT


async def test_a_missing_program_names_the_command_that_installs_it(tmp_path: Path) -> None:
    agent = agl.CommandAgent(["claude", "-p", "{task}"], env={"PATH": str(tmp_path)})
    assert agent.harness is not None
    assert agent.harness.name == "claude-code"
    llm = LLM(endpoint="http://127.0.0.1:1/v1", model="m")
    with pytest.raises(agl.InvalidInputError) as caught:
        await agent.rollout("task", llm)
    assert caught.value.field == "command[0]"
    assert "'claude'" in str(caught.value)
    assert "npm install -g @anthropic-ai/claude-code@2.1.328" in str(caught.value)
    codex = agl.CommandAgent(["codex", "exec", "{task}"], env={"PATH": str(tmp_path)})
    with pytest.raises(agl.InvalidInputError, match=r"npm install -g @openai/codex@0\.169\.0"):
        await codex.rollout("task", llm)
    with pytest.raises(agl.InvalidInputError, match="needs an LLM resource"):
        await codex.rollout("task")
    plain = agl.CommandAgent(["no-such-program-here"])
    with pytest.raises(agl.InvalidInputError, match=r"'no-such-program-here'.*not on PATH"):
        await plain.rollout("task")


@pytest.mark.parametrize(
    ("arguments", "field", "match"),
    [
        ({"command": []}, "command", "empty"),
        ({"command": "claude -p {task}"}, "command", "shlex.split"),
        ({"command": ["claude", 3]}, "command[1]", "string"),
        ({"command": ["claude", "{taks}"]}, "command[1]", r"\{taks\}.*known are"),
        ({"command": ["claude", "{}"]}, "command[1]", "placeholder"),
        ({"command": ["claude", "{task"]}, "command[1]", "not a valid template"),
        ({"command": ["x"], "harness": "claude"}, "harness", "claude-code"),
        ({"command": ["x"], "timeout": 0}, "timeout", "> 0"),
        ({"command": ["x"], "output_limit": -1}, "output_limit", ">= 0"),
        ({"command": ["x"], "files": {"../up": "x"}}, "files", "relative"),
        ({"command": ["x"], "env": {"A": 1}}, "env.A", "string"),
        ({"command": ["x"], "reward": 1.0}, "reward", "function"),
    ],
)
def test_bad_input_names_the_field(arguments: dict[str, Any], field: str, match: str) -> None:
    with pytest.raises(agl.InvalidInputError, match=match) as caught:
        agl.CommandAgent(**arguments)
    assert caught.value.field == field


async def test_a_task_without_the_key_the_command_asks_for_is_named() -> None:
    agent = agl.CommandAgent(["echo", "{task[question]}"])
    with pytest.raises(agl.InvalidInputError, match=r"command\[1\].*\['prompt'\]") as caught:
        await agent.rollout({"prompt": "hi"})
    assert caught.value.field == "command[1]"


def test_an_agent_travels_to_runner_processes_pickled() -> None:
    agent = agl.CommandAgent(["codex", "exec", "{task}"], reward=answered, timeout=5)
    copy = pickle.loads(pickle.dumps(agent))
    assert (copy.command, copy.harness, copy.reward, copy.timeout) == (
        agent.command,
        agent.harness,
        answered,
        5.0,
    )
    assert repr(copy) == "CommandAgent(['codex', 'exec', '{task}'], harness='codex')"
