"""Every example built on :class:`agl.Script`, through its command line: one suite, one table.

Each example's own tests (its data and reward, its stand-in's plan, its spans and tools, its
learning) are in its own file; here each is one :class:`Case`: the default run prints the table
per agent (against the example's scripted stand-in; slow where its agents are real programs),
``--help`` lists the standard flags and the example's own, and (slow) ``--train`` trains the
one agent its algorithm map names for two steps on a tiny model built in code, for the
examples whose training is the standard one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .conftest import LLAMA_INDEX_WARNINGS, Example, check_one_agent_trained, load, train_example

STANDARD_FLAGS = ("--run-dir", "--split", "--endpoint", "--model", "--train", "--steps", "--seed")
STANDARD_FLAGS += ("--n-runners", "--quiet")


@dataclass(frozen=True)
class Trains:
    """What ``--train`` trains: ``trained`` (its calls, with ``marker`` in their prompts, become
    transitions), ``frozen`` (counted and left alone; ``off_gateway``: on a model of its own)."""

    algorithms: str  # the run.py function that maps the agents to algorithms
    trained: str
    frozen: str
    marker: str
    off_gateway: bool = False
    check: Callable[[Sequence[Any]], None] | None = None  # the batches: the example's own checks


@dataclass(frozen=True)
class Case:
    """An example on :class:`agl.Script`.

    ``rows``: its default run's table, each agent's calls, rollouts and mean reward; ``mean``:
    the line under it. ``needs``: the modules it cannot run without (skipped when one is
    missing); ``fixtures``: those it needs set up (its framework's adapter); ``programs``: the
    fixture that puts the programs its agent runs on ``PATH`` (its default run is then slow).
    ``trained_in``: the file that tests its standard ``--train``, where :class:`Trains` does
    not fit.
    """

    name: str
    needs: tuple[str, ...]
    rows: Mapping[str, list[str]]
    mean: str
    fixtures: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    trains: Trains | None = None
    programs: str = ""
    trained_in: str = ""

    def load(self, request: pytest.FixtureRequest, *, running: bool = False) -> Example:
        for module in self.needs:
            pytest.importorskip(module, reason=f"the {self.name} example needs {module}")
        for fixture in self.fixtures + ((self.programs,) if running and self.programs else ()):
            request.getfixturevalue(fixture)
        return load(self.name)


def _crewai_calls_again_after_an_empty_reply(batches: Sequence[Any]) -> None:
    for batch in batches:
        # 2 questions x 2 samples, one writer call each; CrewAI calls again after an empty
        # reply ("Invalid response from LLM call"), which a random-weight model can give
        assert batch.report.calls_seen >= 4
        assert batch.report.dropped_calls["empty_response"] >= batch.report.calls_seen - 4


CASES = [
    Case(
        "cli_agents",
        needs=(),
        programs="cli_programs",
        # the stand-in writes a wrong line on every second task: codex's, here
        rows={"claude": ["2", "1", "1.000"], "codex": ["2", "1", "0.000"]},
        mean="mean reward 0.500 over 2 tasks",
        flags=("--samples",),
        trained_in="test_cli_agents.py",  # it trains on every agent's calls
    ),
    Case(
        "agent_framework_weather",
        needs=("agl_agent_framework",),
        rows={"forecaster": ["8", "4", "0.750"], "writer": ["4", "4", "0.750"]},
        mean="mean reward 0.750 over 4 tasks",
        trains=Trains("writer_rl", "writer", "forecaster", "You are the writer."),
    ),
    Case(
        "agents_qa",
        needs=("agents",),
        fixtures=("agents_adapter",),
        # one answered wrong (the 5th), one without a handoff (the 3rd)
        rows={"answerer": ["6", "6", "0.833"], "researcher": ["18", "6", "0.833"]},
        mean="mean reward 0.833 over 6 tasks",
        flags=("--method",),
    ),
    Case(
        "autogen_math",
        needs=("autogen_agentchat", "autogen_ext.models.openai"),
        fixtures=("autogen_adapter",),
        rows={"solver": ["40", "20", "0.800"]},
        mean="mean reward 0.800 over 20 tasks",
        flags=("--method",),
    ),
    Case(
        "crewai_products",
        needs=("crewai",),
        fixtures=("crewai_adapter",),
        # the 4th looks up the wrong product
        rows={"researcher": ["8", "4", "0.750"], "writer": ["4", "4", "0.750"]},
        mean="mean reward 0.750 over 4 tasks",
        trains=Trains(
            "writer_rl",
            "writer",
            "researcher",
            "You are writer.",
            check=_crewai_calls_again_after_an_empty_reply,
        ),
    ),
    Case(
        "google_adk_museums",
        needs=("agl_google_adk",),
        rows={"coordinator": ["8", "4", "0.750"], "guide": ["4", "4", "0.750"]},
        mean="mean reward 0.750 over 4 tasks",
        trains=Trains("guide_rl", "guide", "coordinator", "You are the guide.", off_gateway=True),
    ),
    Case(
        "langgraph_sql",
        needs=("langgraph",),
        fixtures=("langchain_adapter",),
        # 2 of 8 caught and rewritten, 2 missed by the checker
        rows={
            "checker": ["10", "8", "0.750"],
            "rewriter": ["2", "2", "1.000"],
            "writer": ["8", "8", "0.750"],
        },
        mean="mean reward 0.750 over 8 tasks",
    ),
    Case(
        "llama_index_docs",
        needs=("agl_llama_index",),
        rows={"researcher": ["8", "4", "0.750"], "writer": ["4", "4", "0.750"]},
        mean="mean reward 0.750 over 4 tasks",
        trains=Trains("writer_rl", "writer", "researcher", "You are the writer.", off_gateway=True),
    ),
    Case(
        "pydantic_ai_orders",
        needs=("agl_pydantic_ai",),
        rows={"support": ["8", "4", "0.750"], "triage": ["4", "4", "0.750"]},
        mean="mean reward 0.750 over 4 tasks",
        trains=Trains("support_rl", "support", "triage", "You are support."),
    ),
]


def _params(cases: Sequence[Case], *, running: bool = False) -> list[Any]:
    marks = {"llama_index_docs": LLAMA_INDEX_WARNINGS}
    # a run of real programs: slow, and the first installs them
    programs = [pytest.mark.slow, pytest.mark.timeout(900)]
    return [
        pytest.param(
            case,
            id=case.name,
            marks=marks.get(case.name, []) + (programs if running and case.programs else []),
        )
        for case in cases
    ]


@pytest.mark.parametrize("case", _params(CASES, running=True))
def test_the_default_run_prints_the_table_per_agent(
    case: Case,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    example = case.load(request, running=True)
    monkeypatch.setenv("COLUMNS", "200")  # the table is read here: its terminal is this wide
    with example.own_stand_in():
        example.run.SCRIPT.main(["--run-dir", str(tmp_path / "run"), "--quiet"])
    out = capsys.readouterr().out
    rows = {line.split()[1]: line.split()[3:9:2] for line in out.splitlines() if "│" in line}
    assert rows == case.rows
    assert case.mean in out
    assert (tmp_path / "run").is_dir()


@pytest.mark.parametrize("case", _params(CASES))
def test_help_lists_the_standard_flags_and_the_examples_own(
    case: Case,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    example = case.load(request)
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exit:
        example.run.SCRIPT.main(["--help"])
    assert exit.value.code == 0
    flags = set(re.findall(r"--[a-z][a-z-]*", capsys.readouterr().out))
    assert flags == {"--help", *STANDARD_FLAGS, *case.flags}
    # the table trains every example whose training is the standard one, and only those
    trained = case.trains is not None or bool(case.trained_in)
    assert (example.run.SCRIPT.algorithm is not None) == trained


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", _params([case for case in CASES if case.trains is not None]))
def test_train_trains_one_agent_and_leaves_the_other(
    case: Case,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    recorded_rl: Any,
) -> None:
    example = case.load(request)
    trains = case.trains
    assert trains is not None
    tasks = example.run.SCRIPT.tasks("train")[:2]
    run_dir = tmp_path / "run"
    train_example(example.run, trains.algorithms, tasks, run_dir, recorded_rl.algorithm)
    [algorithm] = recorded_rl.instances
    check_one_agent_trained(
        algorithm,
        run_dir,
        trains.trained,
        trains.frozen,
        trains.marker,
        tasks=tasks,
        frozen_off_gateway=trains.off_gateway,
    )
    if trains.check is not None:
        trains.check(algorithm.batches)
