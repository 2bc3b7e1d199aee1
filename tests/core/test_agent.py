"""Agents: @agl.rollout, LitAgent, injection by parameter name, results, loading and pickling."""

from __future__ import annotations

import math
import pickle
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import agl
from agl._run._agent import AgentError, AttemptInputs, FunctionAgent, load_agent, normalize_result


def _inputs(task: Any = "t", mode: str = "train", **resources: agl.Resource) -> AttemptInputs:
    rollout = agl.Rollout(rollout_id="ro-1", input=task, mode=mode, enqueue_time=0.0)  # type: ignore[arg-type]
    attempt = agl.Attempt(rollout_id="ro-1", attempt_id="at-1", sequence=1, start_time=0.0)
    return AttemptInputs(task, rollout, attempt, resources)


LLM = agl.LLM(endpoint="http://gw/rollout/{rollout_id}/attempt/{attempt_id}/v1", model="m")
PROMPT = agl.PromptTemplate(template="Q: {q}")


@agl.rollout
def module_agent(task: str, llm: agl.LLM) -> float:
    return 1.0


def test_decorated_function_stays_callable() -> None:
    assert isinstance(module_agent, FunctionAgent)
    assert module_agent.name == "module_agent"
    assert module_agent("x", LLM) == 1.0
    assert module_agent.__doc__ is None
    assert module_agent.__name__ == "module_agent"


def test_decorator_with_options() -> None:
    @agl.rollout(name="writer", primary_reward="acc")
    async def agent(task: str) -> dict[str, float]:
        return {"acc": 1.0, "len": 3.0}

    assert (agent.name, agent.primary_reward) == ("writer", "acc")


def test_injection_by_name() -> None:
    seen: dict[str, Any] = {}

    @agl.rollout
    def agent(task, llm, prompt_template, system, resources, rollout, attempt, extra=5):  # type: ignore[no-untyped-def]
        seen.update(locals())

    inputs = _inputs("task-1", llm=LLM, system=PROMPT)
    agent.bind(inputs)()
    assert seen["task"] == "task-1"
    assert seen["llm"] is LLM  # found by type: the only LLM
    assert seen["prompt_template"] is PROMPT
    assert seen["system"] is PROMPT
    assert seen["resources"] == {"llm": LLM, "system": PROMPT}
    assert seen["rollout"].rollout_id == "ro-1"
    assert seen["attempt"].attempt_id == "at-1"
    assert seen["extra"] == 5  # not a resource: the default stays


def test_named_resource_wins_over_type_lookup() -> None:
    other = agl.LLM(endpoint="http://other/v1", model="o")

    @agl.rollout
    def agent(task: str, llm: agl.LLM) -> agl.LLM:
        return llm

    assert agent.bind(_inputs(llm=LLM, judge=other))() is LLM
    with pytest.raises(AgentError, match=r"several LLM resources \['a', 'b'\]"):
        agent.bind(_inputs(a=LLM, b=other))


def test_missing_resource_names_what_there_is() -> None:
    @agl.rollout
    def agent(task: str, critic: agl.LLM) -> None: ...

    with pytest.raises(AgentError, match=r"asks for 'critic'.*\['system'\]"):
        agent.bind(_inputs(system=PROMPT))


def test_agent_must_take_a_task() -> None:
    def no_task() -> None: ...

    def keyword_only(*, task: str) -> None: ...

    for function in (no_task, keyword_only):
        with pytest.raises(AgentError, match="first positional parameter"):
            agl.rollout(function)


class Stateful(agl.LitAgent):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def training_rollout(self, task: str, llm: agl.LLM) -> float:
        self.calls.append(f"train {task} {llm.model}")
        return 1.0

    async def validation_rollout(self, task: str) -> float:
        self.calls.append(f"val {task}")
        return 0.5


def test_lit_agent_picks_the_method_for_the_mode() -> None:
    agent = Stateful()
    assert agent.name == "Stateful"
    assert agent.bind(_inputs("a", llm=LLM))() == 1.0
    coroutine = agent.bind(_inputs("b", mode="val"))()
    import asyncio

    assert asyncio.run(coroutine) == 0.5
    assert agent.calls == ["train a m", "val b"]


def test_lit_agent_rollout_serves_every_mode_and_missing_one_is_an_error() -> None:
    class Plain(agl.LitAgent):
        name = "plain-agent"

        def rollout(self, task: str) -> float:
            return 2.0

    assert Plain().name == "plain-agent"
    assert Plain().bind(_inputs(mode="test"))() == 2.0
    # Called directly, the mode-specific methods fall back to rollout() too.
    assert Plain().training_rollout("t") == 2.0
    assert Plain().validation_rollout("t") == 2.0

    class Empty(agl.LitAgent):
        pass

    with pytest.raises(AgentError, match="overrides none"):
        Empty().check()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (1, ({"reward": 1.0}, "reward")),
        (0.25, ({"reward": 0.25}, "reward")),
        (True, ({"reward": 1.0}, "reward")),
        ({"acc": 1}, ({"acc": 1.0}, "acc")),
        ({"reward": 0.5, "len": 3}, ({"reward": 0.5, "len": 3.0}, "reward")),
    ],
)
def test_normalize_accepts_rewards(value: Any, expected: Any) -> None:
    assert normalize_result(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1.0", r"returned '1.0' \(str\)"),
        ([1.0], r"\(list\)"),
        (math.nan, "non-finite"),
        ({"acc": "high"}, "'acc': 'high' is not a named number"),
        ({"a": 1.0, "b": 2.0}, "several rewards"),
        ({}, "empty dict"),
        ({"a": math.inf}, "non-finite reward 'a'"),
    ],
)
def test_normalize_rejects_garbage_with_a_reason(value: Any, message: str) -> None:
    with pytest.raises(AgentError, match=message):
        normalize_result(value)


def test_primary_reward_chooses_among_several() -> None:
    assert normalize_result({"a": 1.0, "b": 2.0}, "b") == ({"a": 1.0, "b": 2.0}, "b")
    with pytest.raises(AgentError, match="'c' is not among"):
        normalize_result({"a": 1.0}, "c")


def test_llm_for_attempt_fills_the_gateway_template() -> None:
    bound = LLM.for_attempt("ro-9", "at-3")
    assert bound.endpoint == "http://gw/rollout/ro-9/attempt/at-3/v1"
    plain = agl.LLM(endpoint="http://api/v1", model="m")
    assert plain.for_attempt("ro-9", "at-3") is plain


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "my_agents.py").write_text(
        textwrap.dedent(
            """
            import agl

            @agl.rollout
            def decorated(task):
                return 1.0

            def plain(task, llm=None):
                return 0.5

            class Solver(agl.LitAgent):
                def rollout(self, task):
                    return 0.0

            solver = Solver()
            not_an_agent = 42
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_agents"
    sys.modules.pop("my_agents", None)


def test_load_agent_accepts_every_form(agent_module: str) -> None:
    assert load_agent(f"{agent_module}:decorated").name == "decorated"
    assert load_agent(f"{agent_module}:plain").name == "plain"
    assert load_agent(f"{agent_module}:Solver").name == "Solver"
    assert isinstance(load_agent(f"{agent_module}:solver"), agl.LitAgent)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "not of the form"),
        ("nowhere_module_xyz:agent", "cannot import agent module 'nowhere_module_xyz'"),
        ("my_agents:missing", "has no attribute 'missing'"),
        ("my_agents:not_an_agent", "is a int, not an agent"),
    ],
)
def test_load_agent_errors_name_the_problem(agent_module: str, spec: str, message: str) -> None:
    with pytest.raises(agl.InvalidInputError, match=message):
        load_agent(spec)


def test_decorated_agent_pickles_by_reference() -> None:
    restored = pickle.loads(pickle.dumps(module_agent))
    assert restored is module_agent
