"""The parts of agl-apo on their own: beam and Pareto front, template checks, reply parsing,
endpoint resolution, meta-prompts, the token budget, the plugin and the public surface."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import agl
import agl_apo
from agl_apo import APO, APOState, MetaPrompts, SearchSettings
from agl_apo.candidates import (
    CandidateError,
    check_template,
    complementary_pair,
    pareto_front,
    select_beam,
)
from agl_apo.optimizer import (
    BudgetExhaustedError,
    OptimizerError,
    TokenBudget,
    extract_prompt,
    resolve_endpoint,
)
from agl_apo.state import Candidate, as_state


def candidate(cid: str, *scores: float) -> Candidate:
    return Candidate(
        id=cid,
        round=1,
        origin="rewrite",
        templates={"prompt": cid},
        scores=list(scores),
        score=sum(scores) / len(scores),
    )


def test_the_front_keeps_a_candidate_best_on_some_items() -> None:
    a = candidate("a", 1, 1, 1, 0)  # best mean
    b = candidate("b", 0, 0, 0, 1)  # worse on average, alone best on the last item
    c = candidate("c", 1, 1, 0, 0)  # dominated by a
    d = candidate("d", 0, 0, 0, 1)  # same scores as b: not kept twice
    assert [x.id for x in pareto_front([a, b, c, d])] == ["a", "b"]
    beam, front = select_beam([a, b, c, d], 1, pareto=True, front_size=1)
    assert [x.id for x in beam] == ["a", "b"]
    assert [x.id for x in front] == ["a", "b"]
    beam, front = select_beam([a, b, c, d], 1, pareto=False, front_size=1)
    assert [x.id for x in beam] == ["a"]
    assert front == []
    beam, _ = select_beam([a, b, c, d], 1, pareto=True, front_size=0)
    assert [x.id for x in beam] == ["a"]


def test_complementary_pairs_are_merged_once() -> None:
    a = candidate("a", 1, 1, 0, 0)
    b = candidate("b", 0, 0, 1, 1)
    c = candidate("c", 1, 0, 1, 0)
    assert {x.id for x in complementary_pair([a, b, c], set()) or ()} == {"a", "b"}
    merged = {frozenset(("a", "b"))}
    assert {x.id for x in complementary_pair([a, b, c], merged) or ()} == {"a", "c"}
    same = candidate("s", 1, 1, 0, 0)
    assert complementary_pair([a, same], set()) is None  # neither beats the other anywhere


@pytest.mark.parametrize(
    ("text", "engine", "reason"),
    [
        ("Answer.", "f-string", "lost the placeholders ['question']"),
        ("Answer {question} in {language}", "f-string", "does not fill in"),
        ("Answer {question", "f-string", "does not parse"),
        ("Answer {question} {}", "f-string", "does not format"),
        ("Answer {{ question }", "jinja2", "does not parse"),
        ("Answer {{ question }} {{ extra }}", "jinja2", "does not fill in"),
    ],
)
def test_broken_templates_are_refused_with_a_reason(text: str, engine: str, reason: str) -> None:
    with pytest.raises(CandidateError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        check_template(text, engine, required={"question"}, allowed={"question"})


def test_good_templates_pass() -> None:
    template = check_template(
        "Think {{step}} by step: {question}", "f-string", {"question"}, {"question"}
    )
    assert template.format(question="q") == "Think {step} by step: q"
    jinja = check_template("{{ question }}!", "jinja2", {"question"}, {"question"})
    assert jinja.engine == "jinja2"


def test_the_prompt_is_read_from_the_reply() -> None:
    assert extract_prompt("Sure.\n<prompt>\nNew {q}\n</prompt>\nDone") == "New {q}"
    assert extract_prompt("<prompt>draft</prompt> and <PROMPT>final</PROMPT>") == "final"
    with pytest.raises(OptimizerError, match="no <prompt>"):
        extract_prompt("Here is a better prompt: be concise.")
    with pytest.raises(OptimizerError, match="empty"):
        extract_prompt("<prompt>  </prompt>")


def test_the_endpoint_comes_from_arguments_then_the_environment() -> None:
    env = {"AGL_APO_BASE_URL": "http://a/v1", "OPENAI_BASE_URL": "http://b/v1"}
    assert resolve_endpoint("http://x/v1", None, "OPENAI_API_KEY", env).base_url == "http://x/v1"
    found = resolve_endpoint(None, None, "OPENAI_API_KEY", env)
    assert (found.base_url, found.source, found.api_key) == ("http://a/v1", "AGL_APO_BASE_URL", "-")
    found = resolve_endpoint(None, None, "OPENAI_API_KEY", {"OPENAI_BASE_URL": "http://b/v1"})
    assert found.base_url == "http://b/v1"
    hosted = resolve_endpoint(None, None, "MY_KEY", {"MY_KEY": "sk-1"})
    assert (hosted.base_url, hosted.api_key) == (None, "sk-1")
    with pytest.raises(agl.InvalidInputError, match="AGL_APO_BASE_URL / OPENAI_BASE_URL"):
        resolve_endpoint(None, None, "OPENAI_API_KEY", {})


def test_meta_prompts_are_shipped_and_overridable(tmp_path: Path) -> None:
    shipped = MetaPrompts.load()
    assert "$examples" in shipped.critique
    assert "<prompt>" in shipped.rewrite
    path = tmp_path / "critique.txt"
    path.write_text("Critique $prompt given $examples", encoding="utf-8")
    loaded = MetaPrompts.load({"critique": path, "system": "Be terse."})
    assert loaded.critique == "Critique $prompt given $examples"
    assert loaded.system == "Be terse."
    assert loaded.render("critique", prompt="P {x}", examples="E $1") == "Critique P {x} given E $1"
    with pytest.raises(agl.InvalidInputError, match=r"\['\$examples'\]") as caught:
        MetaPrompts.load({"critique": "Critique $prompt"})
    assert caught.value.field == "meta_prompts['critique']"
    with pytest.raises(agl.InvalidInputError, match="unknown meta-prompt 'judge'"):
        MetaPrompts.load({"judge": "x"})
    with pytest.raises(agl.InvalidInputError, match="cannot read"):
        MetaPrompts.load({"merge": tmp_path / "missing.txt"})


def test_the_token_budget_waits_for_calls_in_flight_and_refuses_what_cannot_fit() -> None:
    async def scenario() -> None:
        budget = TokenBudget(100)
        await budget.reserve(60)
        waiting = asyncio.create_task(budget.reserve(60))  # fits once the first settles
        await asyncio.sleep(0.01)
        assert not waiting.done()
        await budget.settle(60, 30)
        await waiting
        await budget.settle(60, 50)
        assert budget.used == 80
        assert not budget.exhausted
        with pytest.raises(BudgetExhaustedError, match="has 20 tokens left"):
            await budget.reserve(21)
        assert budget.exhausted
        unlimited = TokenBudget(None)
        await unlimited.reserve(10**9)

    asyncio.run(scenario())


def test_apo_builds_without_arguments_and_checks_its_options() -> None:
    apo = APO()
    assert (apo.name, apo.follows_loop, apo.transitions) == ("apo", True, None)
    assert (apo.loop.max_steps, apo.loop.n_epochs) == (
        apo.budgets.max_rounds,
        apo.budgets.max_rounds,
    )
    with pytest.raises(agl.InvalidInputError, match="beam_width must be") as caught:
        APO(search=SearchSettings(beam_width=0))
    assert caught.value.field == "beam_width"
    with pytest.raises(agl.InvalidInputError, match="resources must name"):
        APO(resources=[])


def test_the_plugin_provides_the_algorithm_and_the_state_type() -> None:
    from agl.plugins import PluginManager

    plugins = PluginManager()
    assert plugins.lookup("agl_algorithms", "apo") is APO
    assert plugins.provided("agl_resource_types")["apo_state"] is APOState
    state = APOState(resources=["prompt"], engines={"prompt": "f-string"}, items=[0, 1])
    state.candidates.append(candidate("c0", 0.5, 1.0))
    update = agl.ResourcesUpdate(resources_id="r", version=1, resources={"apo/prompt": state})
    again = agl.ResourcesUpdate.model_validate_json(update.model_dump_json())
    assert isinstance(again.resources["apo/prompt"], agl.GenericResource)  # not core's type
    assert plugins.upgrade_resources(again.resources) == update.resources
    assert as_state(again.resources["apo/prompt"]) == state


def test_the_public_surface() -> None:
    assert agl_apo.__all__ == sorted(agl_apo.__all__)
    for name in agl_apo.__all__:
        assert getattr(agl_apo, name) is not None
    with pytest.raises(AttributeError):
        _ = agl_apo.Nothing  # type: ignore[attr-defined]
