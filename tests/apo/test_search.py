"""APO finds a better prompt, keeps it, and publishes it (with its state) for the next steps."""

from __future__ import annotations

from typing import Any

import agl


def test_finds_and_keeps_the_better_prompt(rig: Any) -> None:
    train = rig.tasks("alpha", "alpha", "beta", "alpha")
    val = rig.tasks("alpha", "beta", "alpha", "beta")
    run = rig.fit(rig.apo(budgets={"max_rounds": 2}), rig.tmp_path / "run", train, val)

    state = run.states()[-1]
    best = state.best_candidate()
    assert best is not None
    assert best.score == 1.0
    assert "alpha" in best.templates["prompt"]
    assert "beta" in best.templates["prompt"]
    assert state.rounds == 2
    assert state.best_scores == [0.0, 0.5, 1.0]
    # the last published prompt is the best, and the rollouts of step 2 ran the round-1 best
    final = run.published[-1].resources
    assert isinstance(final["prompt"], agl.PromptTemplate)
    assert final["prompt"].template == best.templates["prompt"]
    assert run.result.last("apo/best_score") == 1.0
    assert run.result.last("val/reward/mean") == 1.0


@agl.rollout
def two_prompt_agent(
    task: dict[str, Any], system: agl.PromptTemplate, prompt: agl.PromptTemplate
) -> float:
    text = f"{system.format()} {prompt.format(question=task['q'])}".lower()
    return sum(word in text for word in task["need"]) / len(task["need"])


def test_several_prompts_are_rewritten_in_turn(rig: Any) -> None:
    resources = {
        "system": agl.PromptTemplate(template="You are {{ 'kind' }}.", engine="jinja2"),
        "prompt": agl.PromptTemplate(template=rig.SEED),
    }
    train = rig.tasks("alpha", "alpha", "beta", "alpha")
    val = rig.tasks("alpha", "beta", "alpha", "beta")
    apo = rig.apo(
        resources=["system", "prompt"], budgets={"max_rounds": 2}, search={"pareto": False}
    )
    run = rig.fit(
        apo, rig.tmp_path / "run", train, val, agent=two_prompt_agent, resources=resources
    )

    state = run.states()[-1]
    assert state.resources == ["system", "prompt"]
    assert state.engines == {"system": "jinja2", "prompt": "f-string"}
    seed = state.candidate("c0").templates
    for candidate in state.candidates[1:]:
        changed = {n for n in seed if candidate.templates[n] != seed[n]}
        parent = state.candidate(candidate.parents[0]).templates
        rewritten = {n for n in seed if candidate.templates[n] != parent[n]}
        # round 1 rewrites the first prompt, round 2 the second
        assert rewritten == ({"system"} if candidate.round == 1 else {"prompt"}), candidate
        assert changed
    best = state.best_candidate()
    assert best is not None
    assert best.score == 1.0
    final = run.published[-1].resources
    assert final["system"] == agl.PromptTemplate(template=best.templates["system"], engine="jinja2")
    assert final["prompt"] == agl.PromptTemplate(template=best.templates["prompt"])
    critique = rig.script.texts("critique")[0]
    assert 'uses the prompt template "system"' in critique
    assert '<other_prompt name="prompt">' in critique
    [rewrite, *_] = rig.script.texts("rewrite")
    assert "The template is a Jinja2 template." in rewrite
