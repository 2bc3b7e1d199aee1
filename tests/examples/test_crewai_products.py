"""The CrewAI products example: its catalog and reward, a dev run, and writer-only RL.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/crewai_products/stand_in.py``): the researcher looks the product up
(a wrong one for a few questions) and reports, the writer answers from the report. The RL run
(slow) trains a tiny model built in code for two steps, on the writer's calls only.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import agl
from agl import read_metrics, semconv
from agl.lightning import agent_stats, extract_calls
from agl.testing.openai_server import OpenAIServer

from .conftest import train_example

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "crewai_products"


def _load(name: str, alias: str) -> ModuleType:
    """Load the example's ``name``.py as module ``alias`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(alias, EXAMPLE / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


pytest.importorskip("crewai", reason="the example needs crewai")

# The example's modules import each other by their plain names; `products` and `support_crew`
# are unique, while `stand_in` and `run` are names other examples use too.
if str(EXAMPLE) not in sys.path:
    sys.path.insert(0, str(EXAMPLE))
products = importlib.import_module("products")
support_crew = importlib.import_module("support_crew")
stand_in = _load("stand_in", "crewai_products_stand_in")


@contextmanager
def _our_stand_in() -> Iterator[None]:
    """``import stand_in`` gives this example's while it lasts (other examples have one too)."""
    before = sys.modules.get("stand_in")
    sys.modules["stand_in"] = stand_in
    try:
        yield
    finally:
        if before is None:
            del sys.modules["stand_in"]
        else:
            sys.modules["stand_in"] = before


with _our_stand_in():  # run.py imports `stand_in`: this example's
    run = _load("run", "crewai_products_run")


@pytest.fixture
def crewai_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example traces CrewAI with agl-crewai; CrewAI keeps its files in ``tmp_path``."""
    pytest.importorskip(
        "agl_crewai",
        reason="the example needs the agl-crewai adapter (packages/agl-crewai), which names "
        "each task's calls after its agent",
    )
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))


# --- the catalog, the lookup and the reward ----------------------------------------------------


def test_the_questions_are_answered_by_the_catalog() -> None:
    questions = products.questions()
    assert len(questions) == 16
    assert len({q["id"] for q in questions}) == 16
    assert [q["id"] for q in products.questions("val")] == ["p13", "p14", "p15", "p16"]
    for question in questions:
        product = products.lookup(question["product"])
        assert product is not None
        assert product["name"] == question["product"]
        assert str(product[question["field"]]) == question["answer"]
        # the stand-in's mistake looks up a product with another value
        wrong = products.lookup(stand_in.wrong_product(question))
        assert wrong is not None
        assert str(wrong[question["field"]]) != question["answer"], question


@pytest.mark.parametrize(
    ("name", "found"),
    [
        ("Larkspur kettle", "Larkspur kettle"),
        ("the LARKSPUR, please", "Larkspur kettle"),
        ("office chair", "Pellam office chair"),  # 2 words shared beats 1
        ("kettle", "Larkspur kettle"),
        ("a blender", None),
        ("", None),
    ],
)
def test_lookup_matches_words_of_the_name(name: str, found: str | None) -> None:
    product = products.lookup(name)
    assert (product["name"] if product else None) == found


def test_the_tool_reports_the_facts_as_json() -> None:
    facts = json.loads(support_crew.lookup_product.run(name="corvid"))
    assert facts == {
        "product": "Corvid tent",
        "price in euros": 540,
        "warranty in years": 7,
        "weight in kilograms": 2.9,
        "colour": "olive",
        "country of manufacture": "Vietnam",
    }
    assert support_crew.lookup_product.run(name="blender") == (
        "no product called 'blender' in the catalog"
    )


@pytest.mark.parametrize(
    ("answer", "gold", "reward"),
    [
        ("The Quillon stand mixer weighs 6.8 kg.", "6.8", 1.0),
        ("It weighs 6.80 kilograms.", "6.8", 1.0),
        ("It weighs 16.8 kg.", "6.8", 0.0),
        ("It costs 1,540 euros.", "1540", 1.0),
        ("It is made in Portugal.", "Portugal", 1.0),
        ("made in portugal", "Portugal", 1.0),
        ("It is made in Portugalia.", "Portugal", 0.0),
        ("It is sage green.", "sage green", 1.0),
        ("It is green.", "sage green", 0.0),
        ("", "3", 0.0),
    ],
)
def test_reward_wants_the_value(answer: str, gold: str, reward: float) -> None:
    assert products.reward(answer, gold) == reward


# --- a dev run against the stand-in model -------------------------------------------------------


def test_dev_run_rewards_calls_and_tools(crewai_adapter: None, tmp_path: Path) -> None:
    questions = products.questions()
    plan = stand_in.default_plan(questions)
    assert list(plan.values()).count("wrong") == 4
    with OpenAIServer(stand_in.script(questions, plan)) as server:
        llm = agl.LLM(endpoint=server.url, model="stand-in")
        result = run.SCRIPT.dev(questions, llm, run_dir=tmp_path / "run", console=False)
        requests = server.request_count

    assert [r.rollout.input["id"] for r in result.results] == [q["id"] for q in questions]
    assert all(r.succeeded for r in result.results), [r.error for r in result.results]
    assert [r.reward for r in result.results] == [
        0.0 if plan[q["id"]] == "wrong" else 1.0 for q in questions
    ]
    for question, outcome in zip(questions, result.results, strict=True):
        calls = extract_calls(outcome.spans).calls
        assert [call.agent for call in calls] == ["researcher", "researcher", "writer"]
        assert all(call.response_id for call in calls), question["id"]
        by_type: dict[str, list[agl.Span]] = {}
        for span in outcome.spans:
            by_type.setdefault(str(span.attributes.get(semconv.AGL_SPAN_TYPE)), []).append(span)
        assert [s.attributes[semconv.AGL_AGENT_NAME] for s in by_type["agent"]] == [
            "researcher",
            "writer",
        ]
        [tool] = by_type["tool"]
        assert tool.attributes[semconv.AGL_TOOL_NAME] == "lookup_product"
        looked_up = question["product"]
        if plan[question["id"]] == "wrong":
            looked_up = stand_in.wrong_product(question)
        arguments = json.loads(str(tool.attributes[semconv.AGL_TOOL_ARGUMENTS]))
        assert arguments == {"name": looked_up}
        facts = json.loads(str(tool.attributes[semconv.AGL_TOOL_RESULT]))
        assert facts["product"] == looked_up

    stats = agent_stats(result.results)
    assert {agent: s.calls for agent, s in stats.items()} == {"researcher": 32, "writer": 16}
    assert sum(s.calls for s in stats.values()) == requests
    assert stats["writer"].mean_reward == pytest.approx(12 / 16)


def test_the_script_prints_the_table_per_agent(
    crewai_adapter: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the table is read here: its terminal is this wide
    with _our_stand_in():
        run.SCRIPT.main(["--run-dir", str(tmp_path / "run"), "--quiet"])
    out = capsys.readouterr().out
    rows = {line.split()[1]: line.split()[3:9:2] for line in out.splitlines() if "│" in line}
    # the validation questions: the 4th looks up the wrong product
    assert rows == {"researcher": ["8", "4", "0.750"], "writer": ["4", "4", "0.750"]}
    assert "mean reward 0.750 over 4 tasks" in out


# --- RL on the writer only ----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_training_only_the_writer(crewai_adapter: None, tmp_path: Path, recorded_rl: Any) -> None:
    from transformers import AutoTokenizer

    tasks = products.questions("train")[:2]
    run_dir = tmp_path / "run"
    train_example(run, "writer_rl", tasks, run_dir, recorded_rl.algorithm)
    [writer] = recorded_rl.instances
    tokenizer: Any = AutoTokenizer.from_pretrained(run_dir / "tiny-model")
    assert len(writer.batches) == 2
    for batch in writer.batches:
        assert batch is not None
        drops = batch.report
        # 2 questions x 2 samples, one writer call each; CrewAI calls again after an empty
        # reply ("Invalid response from LLM call"), which a random-weight model can give
        assert drops.calls_seen >= 4
        # every call's spans joined with the gateway's on the response id, each counted once
        for note in ("joined_by_order", "gateway_only", "instrumented_only"):
            assert drops.notes[note] == 0, (note, drops.notes)
        assert drops.notes["other_agents_calls"] >= 4  # the researcher's, left out
        assert len(batch) + drops.dropped_calls["empty_response"] == drops.calls_seen
        # a call made again follows an empty reply
        assert drops.dropped_calls["empty_response"] >= drops.calls_seen - 4
        assert len(batch) >= 1
        for transition in batch:
            assert transition.agent == "writer"
            assert transition.response_logprobs is not None
            assert len(transition.response_logprobs) == len(transition.response_ids) > 0
            prompt = tokenizer.decode(transition.prompt_ids)
            assert "You are writer." in prompt
            assert any(task["question"] in prompt for task in tasks)
    rows = [row for row in read_metrics(run_dir) if "actor/updates" in row]
    assert [row["actor/updates"] for row in rows] == [1.0, 2.0]
    assert [row["agents/writer/calls"] for row in rows] == [
        b.report.calls_seen for b in writer.batches
    ]
    assert all(row["agents/researcher/calls"] >= 4 for row in rows)
    assert [row["agents/writer/transitions"] for row in rows] == [len(b) for b in writer.batches]
    assert not any("agents/researcher/transitions" in row for row in rows)
