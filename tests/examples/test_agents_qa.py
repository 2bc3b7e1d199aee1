"""The Agents SDK retrieval QA example: its corpus, search and reward, a dev run, and RL.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/agents_qa/stand_in.py``): for each question the researcher searches
twice and hands off (or, for a few, stops and the rollout hands over), and the answerer gives
the gold answer (or, for a few, the entity between the hops). The RL run (slow) trains only the
answerer of a tiny model built in code for two steps. Its command line and table per agent
are tested in ``test_scripts.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import agl
from agl import semconv
from agl.lightning import agent_stats
from agl.openai_wire import WIRES
from agl.testing.openai_server import OpenAIServer, Reply, tool_reply

from .conftest import check_rl_batches, dev_run, load

pytest.importorskip("agents", reason="the example needs openai-agents")
example = load("agents_qa")
qa_agent, qa_training, qa_world = example.qa_agent, example.qa_training, example.qa_world
stand_in = example.stand_in

RIGHT_AGENTS = ["researcher", "researcher", "researcher", "answerer"]
"""Every stand-in rollout: search, search, hand off (or stop), answer."""


def _docs() -> dict[str, dict[str, str]]:
    return {doc["id"]: doc for doc in qa_agent.corpus()}


# --- the data, the search and the reward --------------------------------------------------------


def test_the_corpus_and_the_multi_hop_questions() -> None:
    docs = _docs()
    assert len(docs) == len(qa_agent.corpus()) == 38
    questions = qa_agent.questions()
    assert len({q["id"] for q in questions}) == len(questions) == 20
    assert Counter(q["split"] for q in questions) == {"train": 14, "val": 6}
    assert qa_agent.questions("val") == [q for q in questions if q["split"] == "val"]
    for q in questions:
        first, second = (docs[doc_id] for doc_id in q["docs"])
        # each hop's search finds its document first
        assert [qa_agent.retrieve(hop)[0]["id"] for hop in q["hops"]] == q["docs"], q["id"]
        # two hops are needed: the question does not name the entity between them, the first
        # document names it (the second search asks for it) and only the second has the answer
        bridge = qa_agent.normalize(q["bridge"])
        assert bridge not in qa_agent.normalize(q["question"]), q["id"]
        assert bridge in qa_agent.normalize(f"{first['title']} {first['text']}"), q["id"]
        assert set(qa_agent.terms(q["bridge"])) <= qa_agent.terms(q["hops"][1]), q["id"]
        assert qa_agent.reward(first["text"], q["answer"]) == 0.0, q["id"]
        assert qa_agent.reward(second["text"], q["answer"]) == 1.0, q["id"]
        # the stand-in's mistake (the bridge) is wrong
        assert qa_agent.reward(q["bridge"], q["answer"]) == 0.0, q["id"]


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("Edwin Marlow born", ["d02", "d01"]),  # 3 terms shared, then 2 (d01 before d37)
        ("EDWIN marlow, born?", ["d02", "d01"]),  # case and punctuation do not matter
        ("Where was Edwin Marlow born?", ["d02", "d01"]),  # stop words do not count
        ("Tessaly river", ["d06", "d01"]),  # 2, then the lowest id of those with 1
        ("Salt Orchard publisher", ["d22"]),  # no other document shares a term
        ("Halcyon Works founder", ["d10", "d09"]),
        ("zeppelin", []),
        ("the of and", []),
    ],
)
def test_search_ranks_by_term_overlap_then_id(query: str, found: list[str]) -> None:
    assert [doc["id"] for doc in qa_agent.retrieve(query)] == found
    assert len(qa_agent.retrieve(query, k=10)) >= len(found)


def test_the_search_tool_and_its_text() -> None:
    assert qa_agent.terms("The founder of Brightwater Mills's") == {
        "founder",
        "brightwater",
        "mills",
    }
    text = qa_agent.search_text("Edwin Marlow born")
    first, second = text.split("\n\n")
    assert first.startswith("[d02] Edwin Marlow: Edwin Marlow (1861-1930) was an engineer")
    assert second.startswith("[d01] Brightwater Mills: ")
    assert qa_agent.search_text("zeppelin") == "No document matches 'zeppelin'."
    assert qa_agent.search.name == "search"
    assert list(qa_agent.search.params_json_schema["properties"]) == ["query"]


@pytest.mark.parametrize(
    ("final", "answer", "reward"),
    [
        ("Larkspur", "Larkspur", 1.0),
        ("larkspur.", "Larkspur", 1.0),
        ("He was born in Larkspur.", "Larkspur", 1.0),  # contains it
        ("The Orrinmouth Philharmonic!", "Orrinmouth Philharmonic", 1.0),  # articles go
        ("a cello", "cello", 1.0),
        ("4,200", "4200", 1.0),  # punctuation goes
        ("  Smoked   EEL pie ", "smoked eel pie", 1.0),
        ("Orrinmouth", "Orrinmouth Philharmonic", 0.0),  # part of it is not enough
        ("Larkspurs", "Larkspur", 0.0),  # whole words only
        ("19310", "1931", 0.0),
        ("", "Larkspur", 0.0),
        ("anything", "", 0.0),
    ],
)
def test_reward_normalizes_then_looks_for_the_answer(
    final: str, answer: str, reward: float
) -> None:
    assert qa_agent.reward(final, answer) == reward


def test_normalize() -> None:
    assert qa_agent.normalize("  The Salt Orchard, an  old novel! ") == "salt orchard old novel"
    assert qa_agent.normalize("A") == ""


# --- the agents without agl: what happens when the model does not hand off ---------------------


def _run_agents(script: Any, question: str) -> tuple[str, list[dict[str, Any]]]:
    """Run the two agents on ``question`` against ``script``; the answer and every request."""
    from agents import OpenAIResponsesModel
    from openai import AsyncOpenAI

    async def ask(url: str) -> str:
        async with AsyncOpenAI(base_url=url, api_key="k", max_retries=0) as client:
            model = OpenAIResponsesModel(model="m", openai_client=client)
            researcher, answerer = qa_agent.build_agents(model)
            return await qa_agent.research_and_answer(researcher, answerer, question, max_turns=3)

    with OpenAIServer(script) as server:
        answer = asyncio.run(ask(server.url))
        return answer, _chat_requests(server)


def _chat_requests(server: OpenAIServer) -> list[dict[str, Any]]:
    """The requests ``server`` got, each as the chat request its script answered: the agents
    speak the Responses API (the Agents SDK's default model), which the server, like agl's
    gateway, serves as one chat call."""
    assert {request.path for request in server.requests} == {"/v1/responses"}
    wire = WIRES["responses"]
    return [wire.to_chat(request.body, request.headers) for request in server.requests]


def _is_researcher(request: dict[str, Any]) -> bool:
    return request["messages"][0]["content"] == qa_agent.RESEARCHER_PROMPT


def test_a_researcher_that_runs_out_of_turns_leaves_the_question_to_the_answerer() -> None:
    def script(request: dict[str, Any]) -> Reply | str:
        return tool_reply("search", {"query": "Larkspur"}) if _is_researcher(request) else "Bo"

    answer, requests = _run_agents(script, "Who is the mayor of Larkspur?")
    assert answer == "Bo"
    assert [_is_researcher(r) for r in requests] == [True, True, True, False]
    assert [m["role"] for m in requests[-1]["messages"]] == ["system", "user"]
    assert "tools" not in requests[-1]


def test_an_answerer_that_writes_nothing_answers_nothing() -> None:
    def script(request: dict[str, Any]) -> Reply | str:
        return "notes" if _is_researcher(request) else ""

    answer, requests = _run_agents(script, "Who is the mayor of Larkspur?")
    assert answer == ""
    assert len(requests) == 2  # one call each: an empty answer is not asked again
    assert requests[-1]["messages"][-1] == {"role": "assistant", "content": "notes"}


# --- a dev run against the stand-in model -------------------------------------------------------


def test_dev_run_rewards_calls_and_tools(agents_adapter: None, tmp_path: Path) -> None:
    questions = qa_agent.questions()
    docs = _docs()
    plan = stand_in.default_plan(questions)
    assert Counter(plan.values()) == {"right": 12, "wrong": 4, "finish": 4}
    result, server = dev_run(example, questions, plan, tmp_path, agents=RIGHT_AGENTS)
    requests = _chat_requests(server)
    for question, outcome in zip(questions, result.results, strict=True):
        # the LLM resource is an external one: the dev run serves it through no gateway
        tools = [s for s in outcome.spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == "tool"]
        assert [s.attributes[semconv.AGL_TOOL_NAME] for s in tools] == ["search", "search"]
        for span, hop, doc_id in zip(tools, question["hops"], question["docs"], strict=True):
            arguments = json.loads(str(span.attributes[semconv.AGL_TOOL_ARGUMENTS]))
            assert arguments == {"query": hop}
            found = str(span.attributes[semconv.AGL_TOOL_RESULT])
            assert found == qa_agent.search_text(hop)
            assert f"[{doc_id}] {docs[doc_id]['title']}: " in found

    # the answerer read the conversation: the question and both searches' results, whether the
    # researcher handed off (the SDK's handoff) or stopped (the rollout's)
    answering = [r for r in requests if r["messages"][0]["content"] == qa_agent.ANSWERER_PROMPT]
    assert len(answering) == 20
    by_text = {q["question"]: q for q in questions}
    for request in answering:
        question = by_text[request["messages"][1]["content"]]
        seen = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        handed_off = plan[question["id"]] != "finish"
        assert seen[:2] == [qa_agent.search_text(hop) for hop in question["hops"]]
        assert len(seen) == (3 if handed_off else 2), question["id"]  # + the handoff's output
        assert "tools" not in request

    stats = agent_stats(result.results)
    assert len(requests) == 80
    assert stats["researcher"].rollouts == stats["answerer"].rollouts == 20
    assert stats["answerer"].mean_reward == pytest.approx(16 / 20)


# --- the generated world of --train ------------------------------------------------------------


def test_the_world_asks_two_hop_questions_its_search_answers() -> None:
    made = qa_world.world()
    docs = qa_agent.corpus("world")
    assert len(docs) == len(made.companies) + len(made.people) + len(made.towns)
    assert {doc["id"] for doc in docs}.isdisjoint(doc["id"] for doc in qa_agent.corpus())
    words = [w for name in qa_world.names() for w in name.split() if w not in qa_world._KINDS]
    assert len(words) == len(set(words)), "no two names share a word: searches never mix them"
    questions = qa_world.questions()
    assert len(questions) == len(qa_world.TEMPLATES) * len(made.companies)
    for q in questions:
        first, second = (qa_agent.retrieve(hop, corpus_name="world")[0] for hop in q["hops"])
        assert q["bridge"] in first["text"], q["id"]  # the first search finds the bridge
        assert q["answer"] in second["text"], q["id"]  # the second finds the answer
        assert qa_agent.reward(str(q["bridge"]), str(q["answer"])) == 0.0, q["id"]
        assert q["corpus"] == "world"
    train_part, val_part = qa_world.split(seed=0)
    assert len(val_part) == len(questions) // 4
    assert {q["id"] for q in train_part}.isdisjoint(q["id"] for q in val_part)
    assert Counter(q["template"] for q in val_part) == {
        str(i): len(made.companies) // 4 for i in range(len(qa_world.TEMPLATES))
    }
    assert qa_world.split(seed=1) != (train_part, val_part)
    # --train's three parts: the warm-up's questions, RL's (unseen by the warm model), and the
    # held-out ones, the templates taking turns so that any first few are balanced
    warm, rl, val = qa_world.parts(seed=0)
    assert sorted(q["id"] for q in val) == sorted(q["id"] for q in val_part)
    assert sorted(q["id"] for q in warm + rl) == sorted(q["id"] for q in train_part)
    assert {q["id"] for q in warm}.isdisjoint(q["id"] for q in rl)
    assert Counter(q["template"] for q in warm) == Counter(q["template"] for q in rl)
    assert [q["template"] for q in val[:10]] == [str(i % 5) for i in range(10)]
    assert qa_world.world() is made  # made once, from its seed


def test_successes_take_no_algorithm_or_transitions(tmp_path: Path) -> None:
    with pytest.raises(agl.InvalidInputError, match="method='grpo' only") as error:
        qa_training.reinforce(tmp_path, tmp_path, transitions=agl.TransitionBuilder())
    assert error.value.field == "method"


def test_a_corpus_that_does_not_exist_is_named() -> None:
    with pytest.raises(ValueError, match="no corpus named 'nope': the corpora are"):
        qa_agent.corpus("nope")
    # the shipped corpus's names are not the world's: each corpus is searched alone
    assert qa_agent.search_text("Edwin Marlow", corpus_name="world") == (
        "No document matches 'Edwin Marlow'."
    )
    assert [doc["id"] for doc in qa_agent.retrieve("Edwin Marlow")] == ["d01", "d02"]


def test_the_researcher_may_call_a_model_of_its_own(agents_adapter: None, tmp_path: Path) -> None:
    """With ``researcher_llm`` published, the researcher calls it and the answerer ``llm``."""
    [question] = qa_world.questions()[:1]
    script = stand_in.script([question], {question["id"]: "wrong"})
    with (
        OpenAIServer(script) as own,
        OpenAIServer(lambda request: str(question["answer"])) as main,
    ):
        trainer = agl.Trainer(
            run_dir=tmp_path,
            resources={
                "llm": agl.LLM(endpoint=main.url, model="main"),
                "researcher_llm": agl.LLM(endpoint=own.url, model="own"),
            },
            instrument=qa_training.INSTRUMENT,
            console=False,
            progress=False,
            plot=False,
        )
        result = trainer.dev(qa_agent.qa_agent, [question])
        asked = _chat_requests(own)
        answered = _chat_requests(main)
    assert result.results[0].reward == 1.0  # the main model's answer, not the stand-in's
    assert [_is_researcher(r) for r in asked] == [True, True, True]
    [answer] = answered
    assert answer["messages"][0]["content"] == qa_agent.ANSWERER_PROMPT
    results = [m["content"] for m in answer["messages"] if m["role"] == "tool"][:2]
    assert results == [qa_agent.search_text(h, corpus_name="world") for h in question["hops"]]


# --- RL on the answerer only --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_only_the_answerer(agents_adapter: None, tmp_path: Path, recorded_rl: Any) -> None:
    from agl_torch.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny-model", corpus=[qa_agent.ANSWERER_PROMPT])
    with example.own_stand_in():
        result = qa_training.reinforce(
            model, tmp_path, method="grpo", steps=2, tasks_per_step=2, n_samples=2,
            val_tasks=2, console=False, algorithm=recorded_rl.algorithm,
            transitions=agl.TransitionBuilder(drop_zero_variance=False),
        )  # fmt: skip
    [answerer] = recorded_rl.instances
    # the fixed researcher's calls go to its own server, not through the gateway
    rows = check_rl_batches(
        answerer,
        tmp_path,
        model,
        # the researcher's searches, handed over, in the answerer's prompt
        {"answerer": [qa_agent.ANSWERER_PROMPT, "<tool_call>"]},
        absent=[qa_agent.RESEARCHER_PROMPT],
        asked=[str(q["question"]) for q in qa_world.questions()],
        off_gateway=12,
    )
    assert [row["step"] for row in rows] == [1, 2]
    for row, batch in zip(rows, answerer.batches, strict=True):
        # the fixed researcher searches twice and hands off: 3 calls a rollout, counted only
        assert row["agents/answerer/calls"] == batch.report.calls_seen == 4  # 2 x 2 samples
        assert row["agents/researcher/calls"] == row["transitions/other_agents_calls"] == 12
        assert "agents/researcher/transitions" not in row
        assert row["transitions/kept"] == len(batch)
    vals = [row for row in result.history if "val/reward/mean" in row]
    assert [row["step"] for row in vals] == [0, 2]
    # the SDK's default model: every call through the gateway came on the Responses API, and
    # each was joined with the instrumentation's span on the response id the SDK saw
    wires = asyncio.run(_gateway_wires(result.store_url))
    assert wires == {"responses"}


async def _gateway_wires(url: str) -> set[object]:
    """The wires the gateway recorded calls on, in all the store's rollouts."""
    async with agl.open_store(url) as store:
        page = await store.query_rollouts()
        spans = [s for r in page.rollouts for s in await store.query_spans(r.rollout_id)]
    gateway = [s for s in spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == "gateway"]
    assert all(str(s.attributes[semconv.GEN_AI_RESPONSE_ID]).startswith("resp_") for s in gateway)
    return {s.attributes.get(semconv.AGL_WIRE) for s in gateway}
