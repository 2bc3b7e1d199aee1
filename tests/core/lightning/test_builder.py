"""LightningRL end to end: a real two-agent system, the gateway, the OpenAI instrumentation.

An agent with a ``writer`` (two turns, the second prompt extending the first) and a
``checker`` (one call, a linked step reward) runs through the Trainer against the scripted
OpenAI-compatible server, through the gateway that records token ids; a ``judge`` calls the
server directly (no token ids). The test then builds transitions from the rollouts as they are
in the store and checks each rule against what was really sent and received.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pydantic
import pytest

import agl
from agl import InvalidInputError, RolloutConfig
from agl.lightning import TransitionBuilder
from agl.testing._openai_wire import EOS_ID, encode, render_chat
from agl.testing.openai_server import OpenAIServer, echo, tool_reply

UPSTREAM: dict[str, str] = {}
"""The scripted server's URL, for the judge's direct (ungated) calls."""


@agl.rollout
async def two_agents(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    if task.get("crash"):
        raise RuntimeError("the agent broke")
    if task.get("hang"):
        await asyncio.sleep(30)
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0)
    direct = openai.AsyncOpenAI(base_url=UPSTREAM["url"], api_key="-", max_retries=0)
    async with client, direct:
        messages: list[Any] = [{"role": "user", "content": task["q"]}]
        with agl.agent_span("writer"):
            first = await client.chat.completions.create(model=llm.model, messages=messages)
            messages += [
                {"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "observation: tool says 4"},
            ]
            await client.chat.completions.create(model=llm.model, messages=messages)
        with agl.agent_span("checker"):
            check = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": "check it"}]
            )
            agl.emit_reward(0.25, response_id=check.id)
        with agl.agent_span("judge"):
            await direct.chat.completions.create(
                model="judge", messages=[{"role": "user", "content": "judge it"}]
            )
    sample = rollout.metadata["sample"]
    # Task "even" has rewards 1 and 0 across its two samples; task "same" has 0.5 twice.
    return (1.0 if sample == 0 else 0.0) if task["q"] == "even" else 0.5


class _Collect(agl.Algorithm):
    name = "collect"

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.results: list[agl.RolloutResult] = []

    async def run(self, ctx: agl.AlgorithmContext) -> None:
        await ctx.publish({"llm": await ctx.serve_llm([self.upstream], "policy")})
        # the "hang" task times out; the others finish well within it, also on a loaded machine
        config = RolloutConfig(timeout_seconds=5.0, max_attempts=1)
        self.results = await ctx.run_rollouts(ctx.train_tasks, n=2, config=config)


TASKS = [{"q": "even"}, {"q": "same"}, {"q": "x", "crash": True}, {"q": "y", "hang": True}]


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[agl.RolloutResult]:
    run_dir: Path = tmp_path_factory.mktemp("run")
    with OpenAIServer(echo) as server:
        UPSTREAM["url"] = server.url
        # its first answer builds the tokenizer (over a second on a busy machine): not in a run
        openai.OpenAI(base_url=server.url, api_key="-").chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "warm up"}]
        )
        algorithm = _Collect(server.url)
        trainer = agl.Trainer(
            algorithm, run_dir=run_dir, console=False, plot=False, instrument=["openai"]
        )
        trainer.fit(two_agents, TASKS)
    return algorithm.results


def test_every_call_is_joined_and_attributed(results: list[agl.RolloutResult]) -> None:
    from agl.lightning import extract_calls

    good = [r for r in results if r.succeeded]
    assert len(good) == 4
    for result in good:
        found = extract_calls(result.spans)
        assert [c.agent for c in found.calls] == ["writer", "writer", "checker", "judge"]
        assert found.counts["joined_by_order"] == 0
        assert found.counts["gateway_only"] == 0
        assert found.counts["instrumented_only"] == 1  # the judge: no gateway
        assert [c.has_tokens for c in found.calls] == [True, True, True, False]
        first = found.calls[0]
        q = result.rollout.input["q"]  # type: ignore[index]
        assert first.prompt_ids == encode(render_chat([{"role": "user", "content": q}]))
        assert first.response_ids == [*encode(f"ok: {q}"), EOS_ID]
        assert found.calls[2].step_rewards == [0.25]


def test_per_call_transitions_with_group_advantages(results: list[agl.RolloutResult]) -> None:
    batch = TransitionBuilder(agents=["writer", "checker"], credit="step").build(results, step=3)
    report = batch.report

    # only the "even" task's two rollouts teach anything: 3 calls each
    assert len(batch) == 6
    assert {t.group_id for t in batch} == {"step3-task0"}
    by_rollout: dict[str, list[agl.Transition]] = {}
    for t in batch:
        by_rollout.setdefault(t.rollout_id, []).append(t)
    winner, loser = sorted(by_rollout.values(), key=lambda ts: -ts[-1].reward)
    # StepRewards: the checker's call also gets its linked 0.25
    assert [t.reward for t in winner] == [1.0, 1.0, 1.25]
    assert [t.reward for t in loser] == [0.0, 0.0, 0.25]
    # GRPO: (return - 0.5) / 0.707, the mean and deviation of the rollout values 1.0 and 0.0
    # (each rollout's first return), however many calls each rollout made
    assert [round(t.advantage, 3) for t in winner] == [0.707, 0.707, 1.061]
    assert [round(t.advantage, 3) for t in loser] == [-0.707, -0.707, -0.354]
    assert [t.weight for t in winner] == [0.5, 0.5, 1.0]  # writer made 2 calls, checker 1
    assert all(t.step == 3 and t.response_logprobs is not None for t in batch)
    assert all(len(t.response_logprobs or []) == len(t.response_ids) for t in batch)

    assert report.calls_seen == 4 * 3  # 4 rollouts with calls (crash/hang made none), 3 each
    assert report.dropped_rollouts == {
        "zero_variance_group": 2,
        "rollout_failed": 2,
        "infrastructure_failure": 2,
    }
    assert report.dropped_calls == {"zero_variance_group": 6}
    assert report.notes["other_agents_calls"] == 4  # the judge's
    assert report.transitions == 6
    arrays = batch.to_arrays()
    assert arrays["responses"].shape[0] == 6


def test_trajectory_mode_merges_the_writers_turns(results: list[agl.RolloutResult]) -> None:
    batch = TransitionBuilder(agents="writer", trajectory=True, drop_zero_variance=False).build(
        results
    )
    assert len(batch) == 4  # one sample per succeeded rollout
    for t in batch:
        q = next(r.rollout.input for r in results if r.rollout.rollout_id == t.rollout_id)
        q = q["q"]  # type: ignore[index]
        first_reply = [*encode(f"ok: {q}"), EOS_ID]
        observation = encode("\n<|im_start|>user\nobservation: tool says 4<|im_end|>\n")
        observation += encode("<|im_start|>assistant\n")
        second_reply = [*encode("ok: observation: tool says 4"), EOS_ID]
        assert t.n_calls == 2
        assert t.weight == 1.0
        assert t.prompt_ids == encode(render_chat([{"role": "user", "content": q}]))
        assert t.response_ids == [*first_reply, *observation, *second_reply]
        assert t.mask() == [1] * len(first_reply) + [0] * len(observation) + [1] * len(second_reply)
        assert t.response_logprobs is not None
        assert t.response_logprobs[len(first_reply) : len(first_reply) + len(observation)] == [
            0.0
        ] * len(observation)
    assert batch.report.notes["trajectory_breaks"] == 0


def test_drops_are_counted_never_raised(results: list[agl.RolloutResult]) -> None:
    everything = TransitionBuilder(agents="*", advantage="reinforce").build(results)
    assert everything.report.dropped_calls["no_token_ids"] == 4  # the judge's calls
    short = TransitionBuilder(agents="writer", max_prompt_length=10, advantage="reinforce")
    assert short.build(results).report.dropped_calls["prompt_too_long"] == 8
    lenient = TransitionBuilder(agents="checker", failed_reward=0.0, advantage="reinforce")
    report = lenient.build(results).report
    assert "rollout_failed" not in report.dropped_rollouts
    assert report.dropped_rollouts["infrastructure_failure"] == 2
    none = TransitionBuilder(agents="nobody").build(results)
    assert len(none) == 0
    assert none.report.calls_seen == 0


def test_bad_settings_name_what_is_wrong() -> None:
    with pytest.raises(InvalidInputError, match="max_prompt_length"):
        TransitionBuilder(max_prompt_length=0)
    with pytest.raises(InvalidInputError, match="agents"):
        TransitionBuilder(agents=[""])


def _result(
    calls: list[tuple[list[int], list[int], list[float] | None]],
    final: float,
    *,
    versions: list[int | None] | None = None,
    rollout_id: str = "r",
    group: str | None = None,
) -> Any:
    """A succeeded rollout whose agent made ``calls`` (prompt ids, response ids, logprobs),
    each produced by the weight version of the same index in ``versions``."""
    from agl import Attempt, AttemptStatus, Rollout, RolloutStatus, Span, semconv
    from agl._results import summarize

    spans = []
    for i, (prompt, response, logprobs) in enumerate(calls):
        attributes: dict[str, Any] = {
            semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_GATEWAY,
            semconv.AGL_PROMPT_TOKEN_IDS: prompt,
            semconv.AGL_RESPONSE_TOKEN_IDS: response,
        }
        if logprobs is not None:
            attributes[semconv.AGL_RESPONSE_LOGPROBS] = logprobs
        if versions is not None and versions[i] is not None:
            attributes[semconv.AGL_WEIGHT_VERSION] = versions[i]
        spans.append(
            Span.create(
                rollout_id=rollout_id,
                attempt_id="a",
                name="agl.gateway.chat",
                attributes=attributes,
                start_time_unix_nano=10 * i + 1,
                end_time_unix_nano=10 * i + 5,
            )
        )
    reward = {semconv.AGL_SPAN_TYPE: "reward", semconv.AGL_REWARD: final}
    spans.append(
        Span.create(rollout_id=rollout_id, attempt_id="a", name="agl.reward", attributes=reward)
    )
    rollout = Rollout(
        rollout_id=rollout_id,
        input=None,
        metadata={} if group is None else {"group_id": group},
        status=RolloutStatus.SUCCEEDED,
        enqueue_time=0,
        latest_attempt_id="a",
    )
    attempt = Attempt(
        rollout_id=rollout_id,
        attempt_id="a",
        sequence=1,
        status=AttemptStatus.SUCCEEDED,
        start_time=0,
    )
    return summarize(rollout, [attempt], spans)


def test_trajectory_breaks_and_odd_calls_are_counted() -> None:
    result = _result(
        [
            ([1, 2], [3, 4], [-1.0, -1.0]),
            ([1, 2, 3, 4, 9], [5], [-2.0]),  # extends: merged, observation [9] masked
            ([1, 2, 7], [6, 6], None),  # the history was rewritten: a new sample
            ([1, 2, 7, 6, 6], [], []),  # an empty response: dropped
            ([8], [1, 2, 3], [-0.5]),  # logprobs of the wrong length: kept without them
        ],
        final=1.0,
    )
    builder = TransitionBuilder(trajectory=True, advantage="reinforce")
    batch = builder.build([result])

    merged, rewritten, odd = batch
    assert (merged.response_ids, merged.mask(), merged.n_calls) == ([3, 4, 9, 5], [1, 1, 0, 1], 2)
    assert merged.response_logprobs == [-1.0, -1.0, 0.0, -2.0]
    assert rewritten.response_ids == [6, 6]
    assert rewritten.response_logprobs is None
    assert odd.response_logprobs is None
    assert [t.weight for t in batch] == [pytest.approx(1 / 3)] * 3
    report = batch.report
    assert report.notes["trajectory_breaks"] == 2  # the rewrite, and the call after the drop
    assert report.notes["logprobs_mismatch"] == 1
    assert report.dropped_calls == {"empty_response": 1}
    capped = TransitionBuilder(trajectory=True, advantage="reinforce", max_response_length=3)
    split = capped.build([result])
    assert split.report.notes["trajectory_length_splits"] == 1
    assert [t.response_ids for t in split] == [[3, 4], [5], [6, 6], [1, 2, 3]]


def test_a_sample_carries_the_oldest_weight_version_of_its_calls() -> None:
    calls: list[tuple[list[int], list[int], list[float] | None]] = [
        ([1, 2], [3, 4], None),
        ([1, 2, 3, 4, 9], [5], None),  # merged into the first in trajectory mode
    ]
    for versions, merged in (([3, 2], 2), ([2, None], None)):
        result = _result(calls, final=1.0, versions=versions)
        per_call = TransitionBuilder(advantage="reinforce").build([result])
        assert [t.weight_version for t in per_call] == versions
        [sample] = TransitionBuilder(trajectory=True, advantage="reinforce").build([result])
        assert (sample.n_calls, sample.weight_version) == (2, merged)


def test_stale_groups_are_dropped_whole_and_counted() -> None:
    call: list[tuple[list[int], list[int], list[float] | None]] = [([1], [2], None)]

    def group(name: str, versions: list[int | None]) -> list[Any]:
        return [
            _result(call, final=float(i), versions=[version], rollout_id=f"{name}{i}", group=name)
            for i, version in enumerate(versions)
        ]

    results = [
        *group("fresh", [5, 4]),  # staleness 0 and 1: kept
        *group("mixed", [5, 3]),  # one rollout 2 versions old: the whole group goes
        *group("unnamed", [5, None]),  # a call that names no version: the whole group goes
    ]
    builder = TransitionBuilder(advantage="grpo")
    batch = builder.build(results, policy_version=5, max_staleness=1)
    assert sorted(t.rollout_id for t in batch) == ["fresh0", "fresh1"]
    assert [5 - (t.weight_version or 0) for t in batch] == [0, 1]
    assert batch.report.dropped_calls == {"stale": 2, "no_weight_version": 2}
    assert batch.report.as_metrics()["transitions/dropped/stale"] == 2
    assert len(builder.build(results)) == 6  # no bound: everything is trained
    assert len(builder.build(results, policy_version=5, max_staleness=2)) == 4
    with pytest.raises(InvalidInputError, match="go together"):
        builder.build(results, max_staleness=1)


class _Answer(pydantic.BaseModel):
    value: int


def _shapes(request: dict[str, Any]) -> Any:
    if request.get("tools"):
        return tool_reply("add", {"a": 1, "b": 2})
    if request.get("response_format"):
        return '{"value": 3}'
    return "plain"


@agl.rollout
async def shaped_calls(task: str, llm: agl.LLM) -> float:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0)
    tool = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    async with client:
        with agl.agent_span("tooler"):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "add"}], tools=[tool]
            )
        with agl.agent_span("parser"):
            parsed = await client.chat.completions.parse(
                model="m", messages=[{"role": "user", "content": "3"}], response_format=_Answer
            )
    return 1.0 if parsed.choices[0].message.parsed == _Answer(value=3) else 0.0


# opentelemetry-instrumentation-openai serializes a parsed completion through a model whose
# `parsed` field is typed None, and pydantic warns about it.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_tool_calling_and_structured_output_calls_count(tmp_path: Path) -> None:
    with OpenAIServer(_shapes) as server:
        algorithm = _Collect(server.url)
        trainer = agl.Trainer(
            algorithm, run_dir=tmp_path / "run", console=False, plot=False, instrument=["openai"]
        )
        trainer.fit(shaped_calls, ["x", "y"])
    batch = TransitionBuilder(advantage="reinforce").build(algorithm.results)
    assert [r.reward for r in algorithm.results] == [1.0] * 4
    assert [t.agent for t in batch] == ["tooler", "parser"] * 4
    assert batch.report.notes["joined_by_order"] == 0
    assert batch.report.notes["gateway_only"] == 0


def test_agent_rules_take_names_patterns_and_regular_expressions() -> None:
    from agl.lightning import AgentSelector

    selector = AgentSelector(["planner", "writer*", "re:(sql|rewrite)_agent"])
    assert [selector(name) for name in ("planner", "writer-2", "sql_agent", "rewrite_agent")] == [
        True,
        True,
        True,
        True,
    ]
    assert not selector("sql_agent_2")  # a regular expression matches the whole name
    assert not selector("checker")
    assert not selector(None)
    with pytest.raises(agl.InvalidInputError, match="not a valid regular expression"):
        AgentSelector("re:(unclosed")
