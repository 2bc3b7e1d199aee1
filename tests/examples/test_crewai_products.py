"""The CrewAI products example: its catalog and reward, and a dev run's calls and tool.

The dev run goes through the trainer against agl's scripted OpenAI-compatible server standing
in for a model (``examples/crewai_products/stand_in.py``): the researcher looks the product up
(a wrong one for a few questions) and reports, the writer answers from the report. Its command
line, table per agent and writer-only RL are tested in ``test_scripts.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import agl
from agl import semconv
from agl.lightning import agent_stats

from .conftest import dev_run, load

pytest.importorskip("crewai", reason="the example needs crewai")
example = load("crewai_products")
products, stand_in, support_crew = example.products, example.stand_in, example.support_crew


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
    result, _ = dev_run(
        example, questions, plan, tmp_path / "run", agents=["researcher", "researcher", "writer"]
    )
    for question, outcome in zip(questions, result.results, strict=True):
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

    assert agent_stats(result.results)["writer"].mean_reward == pytest.approx(12 / 16)
