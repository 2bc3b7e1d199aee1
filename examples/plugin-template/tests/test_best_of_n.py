"""The best-of-n algorithm: agl's algorithm conformance suite, and what it picks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agl_best_of_n import BestOfNAlgorithm

import agl
from agl.testing.algorithm import AlgorithmConformance

QUESTION = agl.PromptTemplate(template="What is {x} squared?")


@agl.rollout
def literal_agent(task: dict[str, Any], prompt_template: agl.PromptTemplate) -> float:
    """A stand-in for an LLM agent: right when told to think step by step, else a quarter."""
    prompt = prompt_template.format(**task)
    return 1.0 if prompt.startswith("Think step by step") else 0.25


class TestBestOfNConformance(AlgorithmConformance):
    plugin_name = "best-of-n"

    @pytest.fixture
    def algorithm_factory(self) -> Callable[[], agl.Algorithm]:
        return BestOfNAlgorithm

    @pytest.fixture
    def agent(self) -> Any:
        return literal_agent

    @pytest.fixture
    def resources(self) -> dict[str, agl.Resource]:
        return {"prompt": QUESTION}


def trainer(algorithm: agl.Algorithm, tmp_path: Path) -> agl.Trainer:
    return agl.Trainer(
        algorithm,
        store="memory://",
        run_dir=tmp_path / "run",
        resources={"prompt": QUESTION},
        console=False,
        progress=False,
        plot=False,
    )


def test_it_keeps_the_best_candidate_and_publishes_it_last(tmp_path: Path) -> None:
    algorithm = BestOfNAlgorithm()
    result = trainer(algorithm, tmp_path).fit(
        literal_agent, [{"x": x} for x in range(4)], val_dataset=[{"x": 9}]
    )

    assert algorithm.scores == [0.25, 0.25, 1.0]
    assert algorithm.best is not None
    assert algorithm.best.template == "Think step by step, then give the final answer.\n" + (
        QUESTION.template
    )
    assert result.last("best/candidate") == 3.0
    assert result.last("val/reward/mean") == 1.0  # validation ran with the winner


def test_given_candidates_ties_go_to_the_first(tmp_path: Path) -> None:
    algorithm = BestOfNAlgorithm(["{x}?", "Tell me: {x}", "Think step by step: {x}"])
    trainer(algorithm, tmp_path).fit(literal_agent, [{"x": 1}])

    assert algorithm.scores == [0.25, 0.25, 1.0]
    assert algorithm.best == agl.PromptTemplate(template="Think step by step: {x}")
    tie = BestOfNAlgorithm(["{x}?", "Tell me: {x}"])
    trainer(tie, tmp_path / "tie").fit(literal_agent, [{"x": 1}])
    assert tie.best == agl.PromptTemplate(template="{x}?")


def test_without_a_prompt_it_says_what_it_needs(tmp_path: Path) -> None:
    bare = agl.Trainer(BestOfNAlgorithm(), store="memory://", run_dir=tmp_path, console=False)
    with pytest.raises(agl.InvalidInputError, match="PromptTemplate resource named 'prompt'"):
        bare.fit(literal_agent, [{"x": 1}])
    with pytest.raises(agl.InvalidInputError, match="n_samples"):
        BestOfNAlgorithm(n_samples=0)
