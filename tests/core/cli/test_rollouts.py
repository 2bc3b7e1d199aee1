"""``agl rollouts list`` and ``agl rollouts show`` against real stores.

The stores are a real SQLite file and a real HTTP store server on loopback, filled through the
store API with spans shaped as the tracer and emitters write them (a rollout root span, reward
spans, an LLM call with token usage, an exception, a message).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

import agl
from agl import semconv
from agl._spans import SpanEvent, SpanKind, SpanStatus, StatusCode, new_trace_id
from agl.cli import app
from agl.store._serve import StoreServer
from agl.testing.ports import free_port

# Wide enough that no table column is cut; no colour codes in what the tests read.
ENV = {"COLUMNS": "200", "FORCE_COLOR": None, "TTY_COMPATIBLE": None, "AGL_STORE": None}
MS = 1_000_000  # nanoseconds


@dataclass
class Filled:
    """What :func:`fill` put in a store."""

    url: str
    first_attempt: str  # of ro-math: failed with an exception
    second_attempt: str  # of ro-math: succeeded with rewards and an LLM call
    val_attempt: str  # of ro-val: succeeded with reward 0
    root_span: str  # of ro-math's second attempt
    llm_span: str
    final_reward_span: str


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env={**ENV, **(env or {})})


def span(
    rollout_id: str,
    attempt_id: str,
    trace_id: str,
    name: str,
    start_ms: int,
    end_ms: int,
    attributes: dict[str, Any],
    parent: agl.Span | None = None,
    **fields: Any,
) -> agl.Span:
    base = 1_700_000_000_000 * MS
    return agl.Span.create(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        trace_id=trace_id,
        parent_id=None if parent is None else parent.span_id,
        name=name,
        attributes=attributes,
        start_time_unix_nano=base + start_ms * MS,
        end_time_unix_nano=base + end_ms * MS,
        **fields,
    )


def reward_attributes(value: float | dict[str, float], primary: str = "reward") -> dict[str, Any]:
    """The attributes :func:`agl.emit_reward` writes."""
    named = value if isinstance(value, dict) else {"reward": value}
    return {
        semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_REWARD,
        semconv.AGL_REWARD: named[primary],
        semconv.AGL_REWARD_PRIMARY: primary,
        **{semconv.AGL_REWARD_PREFIX + name: number for name, number in named.items()},
    }


def root_attributes() -> dict[str, Any]:
    return {semconv.AGL_SPAN_TYPE: "rollout"}


async def fill(store: agl.Store) -> Filled:
    """Three rollouts: ro-math (failed once, then succeeded), ro-val (succeeded), ro-waiting."""
    await store.enqueue_rollouts(
        [
            agl.RolloutRequest(
                rollout_id="ro-math",
                input={"question": "What is 2+2?"},
                config=agl.RolloutConfig(max_attempts=2, timeout_seconds=30),
                metadata={"dataset": "arith"},
            )
        ]
    )

    # First attempt: the agent raised; the store retries.
    [claim] = await store.dequeue_rollouts(worker_id="runner-1")
    first = claim.attempt.attempt_id
    await store.update_attempt("ro-math", first, status=agl.AttemptStatus.RUNNING)
    trace = new_trace_id()
    root = span("ro-math", first, trace, "agl.rollout", 0, 40, root_attributes())
    error = span(
        "ro-math",
        first,
        trace,
        "agl.exception",
        30,
        30,
        {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_EXCEPTION},
        parent=root,
        status=SpanStatus(code=StatusCode.ERROR, description="ValueError: bad tool call"),
        events=[
            SpanEvent(
                name="exception",
                time_unix_nano=root.start_time_unix_nano + 30 * MS,
                attributes={
                    "exception.type": "ValueError",
                    "exception.message": "bad tool call",
                    "exception.stacktrace": "Traceback (most recent call last): ...",
                },
            )
        ],
    )
    await store.add_spans([error, root])
    await store.update_attempt(
        "ro-math", first, status=agl.AttemptStatus.FAILED, reason="ValueError: bad tool call"
    )

    # Second attempt: an LLM call under an agent span, a message, two rewards.
    [claim] = await store.dequeue_rollouts(worker_id="runner-2")
    second = claim.attempt.attempt_id
    await store.update_attempt("ro-math", second, status=agl.AttemptStatus.RUNNING)
    trace = new_trace_id()
    root = span("ro-math", second, trace, "agl.rollout", 0, 1500, root_attributes())
    agent = span(
        "ro-math",
        second,
        trace,
        "solver",
        10,
        1200,
        {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_AGENT, semconv.AGL_AGENT_NAME: "solver"},
        parent=root,
    )
    llm = span(
        "ro-math",
        second,
        trace,
        "openai.chat",
        20,
        820,
        {
            semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_LLM,
            semconv.GEN_AI_OPERATION_NAME: "chat",
            semconv.GEN_AI_REQUEST_MODEL: "qwen-7b",
            semconv.GEN_AI_RESPONSE_MODEL: "qwen-7b-instruct",
            semconv.GEN_AI_RESPONSE_ID: "chatcmpl-1",
            semconv.GEN_AI_USAGE_INPUT_TOKENS: 31,
            semconv.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
        },
        parent=agent,
        kind=SpanKind.CLIENT,
    )
    message = span(
        "ro-math",
        second,
        trace,
        "agl.message",
        900,
        900,
        {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_MESSAGE, semconv.AGL_MESSAGE: "answer is 4"},
        parent=agent,
    )
    shaped = span("ro-math", second, trace, "agl.reward", 1300, 1300, reward_attributes(0.25), root)
    final = span(
        "ro-math",
        second,
        trace,
        "agl.reward",
        1400,
        1400,
        reward_attributes({"exact": 1.0, "format": 0.5}, primary="exact"),
        parent=root,
    )
    # Children end (and so arrive) before their parents, as the tracer sends them.
    await store.add_spans([llm, message, agent, shaped, final, root])
    await store.update_attempt("ro-math", second, status=agl.AttemptStatus.SUCCEEDED)

    await store.enqueue_rollouts(
        [agl.RolloutRequest(rollout_id="ro-val", input="capital of France?", mode="val")]
    )
    [claim] = await store.dequeue_rollouts(worker_id="runner-1")
    val = claim.attempt.attempt_id
    trace = new_trace_id()
    val_root = span("ro-val", val, trace, "agl.rollout", 0, 100, root_attributes())
    val_reward = span("ro-val", val, trace, "agl.reward", 90, 90, reward_attributes(0.0), val_root)
    await store.add_spans([val_reward, val_root])
    await store.update_attempt("ro-val", val, status=agl.AttemptStatus.SUCCEEDED)

    await store.enqueue_rollouts([agl.RolloutRequest(rollout_id="ro-waiting", input=[1, 2, 3])])
    return Filled(
        url=store.url,
        first_attempt=first,
        second_attempt=second,
        val_attempt=val,
        root_span=root.span_id,
        llm_span=llm.span_id,
        final_reward_span=final.span_id,
    )


def fill_url(url: str) -> Filled:
    async def run() -> Filled:
        async with agl.open_store(url) as store:
            filled = await fill(store)
        filled.url = url
        return filled

    return asyncio.run(run())


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Filled:
    return fill_url(f"sqlite:///{tmp_path / 'agl.db'}")


@pytest.fixture
def http_store() -> Iterator[Filled]:
    with StoreServer("memory://") as server:
        yield fill_url(server.url)


def rows_of(output: str) -> dict[str, list[str]]:
    """The list table's rows, as cells, by the rollout id each starts with."""
    rows = {}
    for line in output.splitlines():
        cells = re.split(r" {2,}", line.strip())
        if cells[0].startswith("ro-"):
            rows[cells[0]] = cells
    return rows


# --- agl rollouts list ------------------------------------------------------------------------


def test_list_shows_every_rollout_with_status_attempts_and_latest_reward(
    sqlite_store: Filled,
) -> None:
    result = invoke("rollouts", "list", "--store", sqlite_store.url)

    assert result.exit_code == 0, result.output
    rows = rows_of(result.stdout)
    assert list(rows) == ["ro-math", "ro-val", "ro-waiting"]
    # rollout, status, mode, attempts, started (date, time), duration, reward, input
    math = rows["ro-math"]
    assert math[:4] == ["ro-math", "succeeded", "train", "2/2"]
    assert math[6:] == ["1", '{"question":"What is 2+2?"}']
    assert rows["ro-val"][:4] == ["ro-val", "succeeded", "val", "1/1"]
    assert rows["ro-val"][6:] == ["0", "capital of France?"]
    assert rows["ro-waiting"] == ["ro-waiting", "queuing", "train", "0/1", "-", "-", "-", "[1,2,3]"]
    assert "rollouts 1-3 of 3" in result.stdout


def test_list_filters_by_status_and_mode_and_pages(sqlite_store: Filled) -> None:
    result = invoke("rollouts", "list", "--store", sqlite_store.url, "--status", "queuing")
    assert result.exit_code == 0, result.output
    assert list(rows_of(result.stdout)) == ["ro-waiting"]

    result = invoke(
        "rollouts",
        "list",
        "--store",
        sqlite_store.url,
        "--status",
        "queuing",
        "--status",
        "succeeded",
    )
    assert list(rows_of(result.stdout)) == ["ro-math", "ro-val", "ro-waiting"]

    result = invoke("rollouts", "list", "--store", sqlite_store.url, "--mode", "val")
    assert list(rows_of(result.stdout)) == ["ro-val"]

    result = invoke(
        "rollouts", "list", "--store", sqlite_store.url, "--limit", "1", "--offset", "1"
    )
    assert list(rows_of(result.stdout)) == ["ro-val"]
    assert "rollouts 2-2 of 3" in result.stdout


def test_list_json_has_rollouts_total_and_rewards(sqlite_store: Filled) -> None:
    result = invoke("rollouts", "list", "--store", sqlite_store.url, "--limit", "2", "--json")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"rollouts", "total"}
    assert data["total"] == 3
    assert [r["rollout_id"] for r in data["rollouts"]] == ["ro-math", "ro-val"]
    math, val = data["rollouts"]
    assert math["status"] == "succeeded"
    assert math["num_attempts"] == 2
    assert math["latest_attempt_id"] == sqlite_store.second_attempt
    assert math["input"] == {"question": "What is 2+2?"}
    assert math["config"]["max_attempts"] == 2
    assert math["reward"] == 1.0
    assert val["mode"] == "val"
    assert val["reward"] == 0.0


def test_list_rejects_an_unknown_status() -> None:
    result = invoke("rollouts", "list", "--store", "memory://", "--status", "bogus")
    assert result.exit_code == 2
    assert "bogus" in result.output


# --- agl rollouts show ------------------------------------------------------------------------


def test_show_json_nests_spans_and_summarises_rewards_and_llm_calls(sqlite_store: Filled) -> None:
    result = invoke("rollouts", "show", "ro-math", "--store", sqlite_store.url, "--json")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["rollout"]["rollout_id"] == "ro-math"
    assert data["rollout"]["metadata"] == {"dataset": "arith"}
    assert data["rollout"]["config"]["timeout_seconds"] == 30

    first, second = data["attempts"]
    assert first["attempt_id"] == sqlite_store.first_attempt
    assert (first["status"], first["worker_id"]) == ("failed", "runner-1")
    assert first["reason"] == "ValueError: bad tool call"
    [root] = first["spans"]
    assert (root["name"], root["type"]) == ("agl.rollout", "rollout")
    [error] = root["children"]
    assert error["type"] == "exception"
    assert error["status"] == "error"
    assert error["facts"] == {"type": "ValueError", "message": "bad tool call"}

    assert (second["status"], second["worker_id"]) == ("succeeded", "runner-2")
    [root] = second["spans"]
    assert root["span_id"] == sqlite_store.root_span
    assert root["duration_seconds"] == pytest.approx(1.5)
    assert [child["name"] for child in root["children"]] == ["solver", "agl.reward", "agl.reward"]
    agent, shaped, final = root["children"]
    assert [child["name"] for child in agent["children"]] == ["openai.chat", "agl.message"]
    llm, message = agent["children"]
    assert llm["span_id"] == sqlite_store.llm_span
    assert llm["parent_id"] == agent["span_id"]
    assert llm["facts"] == {"model": "qwen-7b-instruct", "input_tokens": 31, "output_tokens": 7}
    assert llm["duration_seconds"] == pytest.approx(0.8)
    assert message["facts"] == {"message": "answer is 4"}
    assert shaped["facts"] == {"reward": 0.25}
    assert final["facts"] == {
        "reward": 1.0,
        "primary": "exact",
        "rewards": {"exact": 1.0, "format": 0.5},
    }
    assert second["llm_calls"]["llm"] == {"calls": 1, "input_tokens": 31, "output_tokens": 7}
    assert second["llm_calls"]["gateway"]["calls"] == 0
    assert first["llm_calls"]["llm"]["calls"] == 0

    assert [(r["attempt"], r["value"]) for r in data["rewards"]] == [(2, 0.25), (2, 1.0)]
    assert data["rewards"][1]["span_id"] == sqlite_store.final_reward_span
    assert data["rewards"][1]["primary"] == "exact"
    assert data["final_reward"] == 1.0


def test_show_renders_rollout_attempt_trees_rewards_and_llm_calls(sqlite_store: Filled) -> None:
    result = invoke("rollouts", "show", "ro-math", "--store", sqlite_store.url)

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "rollout ro-math" in out
    assert '{"question":"What is 2+2?"}' in out
    assert '{"dataset":"arith"}' in out
    assert "timeout 30.00s" in out
    assert f"attempt 1 {sqlite_store.first_attempt}  failed  worker runner-1" in out
    assert "reason: ValueError: bad tool call" in out
    assert f"attempt 2 {sqlite_store.second_attempt}  succeeded  worker runner-2" in out
    assert "type=ValueError  message=bad tool call" in out
    assert "openai.chat [llm] 800ms  model=qwen-7b-instruct  input_tokens=31  output_tokens=7" in (
        out
    )
    assert "answer is 4" in out
    assert "final reward: 1 (latest attempt)" in out

    # The tree draws nesting with indentation: llm and message under solver, under the root.
    lines = out.splitlines()

    def indent(text: str, after: int = 0) -> tuple[int, int]:
        index = next(i for i, line in enumerate(lines) if i >= after and text in line)
        return index, lines[index].index(text)

    second_at, _ = indent(f"attempt 2 {sqlite_store.second_attempt}")
    root_at, root_col = indent("agl.rollout [rollout]", second_at)
    solver_at, solver_col = indent("solver [agent]", root_at)
    llm_at, llm_col = indent("openai.chat [llm]", solver_at)
    _, reward_col = indent("agl.reward [reward]", llm_at)
    assert root_col < solver_col < llm_col
    assert reward_col == solver_col


def test_show_unknown_id_is_one_clear_error(sqlite_store: Filled) -> None:
    result = invoke("rollouts", "show", "ro-nope", "--store", sqlite_store.url)

    assert result.exit_code == 1
    assert "ro-nope" in result.stderr
    assert "error" in result.stderr
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_show_a_queued_rollout_without_attempts(sqlite_store: Filled) -> None:
    result = invoke("rollouts", "show", "ro-waiting", "--store", sqlite_store.url)
    assert result.exit_code == 0, result.output
    assert "No attempts yet." in result.stdout
    assert "rewards: none recorded" in result.stdout

    data = json.loads(
        invoke("rollouts", "show", "ro-waiting", "--store", sqlite_store.url, "--json").stdout
    )
    assert data["attempts"] == []
    assert data["final_reward"] is None
    assert data["rollout"]["input"] == [1, 2, 3]


# --- store URLs and errors --------------------------------------------------------------------


def test_list_and_show_through_an_http_store_server(http_store: Filled) -> None:
    result = invoke("rollouts", "list", "--store", http_store.url)
    assert result.exit_code == 0, result.output
    assert list(rows_of(result.stdout)) == ["ro-math", "ro-val", "ro-waiting"]

    result = invoke("rollouts", "show", "ro-val", "--store", http_store.url, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    [attempt] = data["attempts"]
    assert attempt["attempt_id"] == http_store.val_attempt
    [root] = attempt["spans"]
    [reward] = root["children"]
    assert reward["facts"] == {"reward": 0.0}
    assert data["final_reward"] == 0.0

    result = invoke("rollouts", "show", "ro-nope", "--store", http_store.url)
    assert result.exit_code == 1
    assert "ro-nope" in result.stderr
    assert "Traceback" not in result.output


def test_several_store_servers_in_one_url_as_every_client_takes_them(http_store: Filled) -> None:
    # The trainer's own hint names every server: a dead one first, then the live one.
    url = f"http://127.0.0.1:{free_port()},{http_store.url}"
    result = invoke("rollouts", "list", "--store", url)
    assert result.exit_code == 0, result.output
    assert list(rows_of(result.stdout)) == ["ro-math", "ro-val", "ro-waiting"]
    result = invoke("rollouts", "list", "--store", f"{http_store.url},http://127.0.0.1:99999")
    assert result.exit_code == 1
    assert "Port out of range" in result.stderr


def test_the_store_comes_from_agl_store_env(sqlite_store: Filled) -> None:
    result = invoke("rollouts", "list", "--json", env={"AGL_STORE": sqlite_store.url})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["total"] == 3


def test_relative_sqlite_url(sqlite_store: Filled, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Path(sqlite_store.url.removeprefix("sqlite:///"))
    monkeypatch.chdir(path.parent)
    result = invoke("rollouts", "show", "ro-val", "--store", f"sqlite:///{path.name}", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rollout"]["mode"] == "val"


def test_an_unreachable_http_store_is_one_red_line() -> None:
    result = invoke("rollouts", "list", "--store", f"http://127.0.0.1:{free_port()}")
    assert result.exit_code == 1
    assert result.stderr.startswith("error:")
    assert "unreachable" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nonsense", "store URL must look like"),
        ("ftp://host/x", "unknown store URL scheme"),
        ("http://127.0.0.1:99999", "Port out of range"),
        ("sqlite:///does/not/exist.db", "no store file at does/not/exist.db"),
    ],
)
def test_a_bad_store_url_is_one_red_line(url: str, message: str) -> None:
    result = invoke("rollouts", "show", "ro-1", "--store", url)
    assert result.exit_code == 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # one line, maybe wrapped
    assert "Traceback" not in result.output


def test_a_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    result = invoke("rollouts", "list", "--store", f"sqlite:///{path}")
    assert result.exit_code == 1
    assert str(path) in result.stderr.replace("\n", "")
    assert not path.exists()


# --- what the real emitters and tracer write --------------------------------------------------


def test_show_reads_spans_the_real_tracer_and_emitters_wrote(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traced.db'}"

    async def run() -> str:
        async with agl.open_store(url) as store:
            await store.enqueue_rollouts([agl.RolloutRequest(rollout_id="ro-t", input=1)])
            [claim] = await store.dequeue_rollouts(worker_id="w")
            attempt_id = claim.attempt.attempt_id
            with agl.Tracer(store) as tracer:
                async with tracer.rollout("ro-t", attempt_id):
                    agl.emit_message("thinking")
                    agl.emit_exception(KeyError("missing"))
                    agl.emit_reward({"exact": 0.0, "partial": 0.75}, primary="partial")
            await store.update_attempt("ro-t", attempt_id, status=agl.AttemptStatus.SUCCEEDED)
            return attempt_id

    asyncio.run(run())
    result = invoke("rollouts", "show", "ro-t", "--store", url, "--json")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    [root] = data["attempts"][0]["spans"]
    assert root["type"] == "rollout"
    facts = {child["type"]: child["facts"] for child in root["children"]}
    assert facts["message"] == {"message": "thinking"}
    assert facts["exception"] == {"type": "KeyError", "message": "'missing'"}
    assert facts["reward"]["reward"] == 0.75
    assert facts["reward"]["rewards"] == {"exact": 0.0, "partial": 0.75}
    assert data["final_reward"] == 0.75
    listed = json.loads(invoke("rollouts", "list", "--store", url, "--json").stdout)
    assert listed["rollouts"][0]["reward"] == 0.75


def test_a_malformed_store_url_is_named_without_its_password() -> None:
    result = invoke("rollouts", "list", "--store", "postgresql://agl:hunter2@localhost:badport/db")
    assert result.exit_code != 0
    assert "badport" in result.output
    assert "hunter2" not in result.output
