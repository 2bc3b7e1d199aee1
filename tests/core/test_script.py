"""agl.Script: a script's standard command line, run as a user's script runs it.

A real agent calls a real OpenAI-compatible server (agl's scripted one, as a script's stand-in
or behind ``--endpoint``) through the openai SDK; the dev run and a training run go through the
Trainer, and what the script prints is read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

import agl
from agl import semconv
from agl.lightning import extract_calls
from agl.testing.gateway_rollouts import spans_of_type
from agl.testing.openai_server import OpenAIServer, echo, text_reply


def questions(split: str) -> list[dict[str, Any]]:
    tasks = [{"q": f"say {word}", "word": word} for word in ("one", "two", "three", "four")]
    return {"train": tasks[:2], "val": tasks[2:], "all": tasks}[split]


@agl.rollout
async def parrot(task: dict[str, Any], llm: agl.LLM) -> float:
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0) as client:
        with agl.agent_span("parrot"):
            reply = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": task["q"]}]
            )
    return 1.0 if task["word"] in (reply.choices[0].message.content or "") else 0.0


def stand_in(tasks: Sequence[dict[str, Any]]) -> Any:
    """Answers every question right but the last."""
    wrong = tasks[-1]["q"]

    def answer(request: dict[str, Any]) -> Any:
        asked = request["messages"][-1]["content"]
        return text_reply("no idea" if asked == wrong else asked.removeprefix("say "))

    return answer


def script(**fields: Any) -> agl.Script:
    return agl.Script(
        "parrot", agent=parrot, tasks=questions, stand_in=stand_in, instrument=["openai"], **fields
    )


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the tables are read here: their terminal is this wide


def test_the_default_run_is_a_dev_pass_with_the_stand_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = script().main(["--run-dir", str(tmp_path / "run"), "--quiet"])
    assert [r.reward for r in result.results] == [1.0, 0.0]  # the val split: three, four
    out = capsys.readouterr().out
    rows = {line.split()[1]: line.split()[3:9:2] for line in out.splitlines() if "│" in line}
    assert rows == {"parrot": ["2", "2", "0.500"]}
    assert "mean reward 0.500 over 2 tasks" in out
    assert f"--store sqlite:///{tmp_path / 'run'}" in out.replace("\n", "")


def test_endpoint_and_split_choose_the_model_and_the_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAIServer(echo) as server:  # repeats the question: every answer has its word
        argv = ["--endpoint", server.url, "--model", "m", "--split", "all", "--quiet"]
        result = script().main([*argv, "--run-dir", str(tmp_path / "run")])
        assert {request.body["model"] for request in server.requests} == {"m"}
    assert [r.reward for r in result.results] == [1.0] * 4
    assert "over 4 tasks" in capsys.readouterr().out


def test_gateway_records_the_dev_runs_calls_with_the_engines_token_ids(tmp_path: Path) -> None:
    """An agent no instrumentor sees (a program) is seen by the gateway only: ``gateway=True``
    serves the dev run's model through it, as training serves the model it trains."""
    runs = {}
    for gateway in (False, True):
        run_dir = tmp_path / f"gateway-{gateway}"
        runs[gateway] = script(gateway=gateway).main(["--run-dir", str(run_dir), "--quiet"])
    for gateway, result in runs.items():
        assert [r.reward for r in result.results] == [1.0, 0.0]
        for outcome in result.results:
            [call] = extract_calls(outcome.spans).calls
            assert call.agent == "parrot"
            recorded = spans_of_type(outcome.spans, semconv.SPAN_TYPE_GATEWAY)
            assert len(recorded) == (1 if gateway else 0)
            assert bool(call.prompt_ids and call.response_ids) == gateway


def test_the_stand_in_refuses_prompts_longer_than_its_context(tmp_path: Path) -> None:
    result = script(max_model_len=8).main(["--run-dir", str(tmp_path / "run"), "--quiet"])
    assert all(not r.succeeded for r in result.results)
    assert all("maximum context length is 8 tokens" in str(r.error) for r in result.results)


def test_a_gateway_dev_run_needs_a_model_to_serve(tmp_path: Path) -> None:
    trainer = agl.Trainer(run_dir=tmp_path, console=False, progress=False, plot=False)
    with pytest.raises(agl.InvalidInputError, match="has none") as error:
        trainer.dev(parrot, questions("val"), gateway=True)
    assert error.value.field == "gateway"


def test_train_runs_the_algorithm_with_the_scripts_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[agl.ScriptRun] = []

    def baseline(run: agl.ScriptRun) -> agl.Baseline:
        seen.append(run)
        return agl.Baseline(loop=agl.LoopSettings(batch_size=1, max_steps=run.steps))

    def add_arguments(parser: Any) -> None:
        parser.add_argument("--shout", action="store_true")

    chosen = script(
        algorithm=baseline,
        resources=lambda run: {"llm": run.llm},
        trained="nothing was trained",
        add_arguments=add_arguments,
    )
    run_dir = tmp_path / "run"
    result = chosen.main(["--train", "--steps", "2", "--shout", "--run-dir", str(run_dir)])
    [run] = seen
    assert (run.split, run.steps, run.options, run.console) == ("train", 2, {"shout": True}, True)
    assert [task["word"] for task in run.tasks] == ["one", "two"]
    assert [row["step"] for row in result.history if "reward/mean" in row] == [1, 2]
    out = capsys.readouterr().out
    assert "nothing was trained" in out
    assert f"run dir: {run_dir}" in out.replace("\n", "")


def test_a_script_says_what_it_lacks(tmp_path: Path) -> None:
    with pytest.raises(agl.InvalidInputError, match="not both"):
        script(algorithm=lambda run: None, train=lambda run: None)
    bare = agl.Script("bare", agent=parrot, tasks=questions)
    with pytest.raises(agl.InvalidInputError, match="give --endpoint"):
        bare.main(["--run-dir", str(tmp_path / "run"), "--quiet"])
    with pytest.raises(agl.InvalidInputError, match="gives no algorithm"):
        script().main(["--train", "--run-dir", str(tmp_path / "run"), "--quiet"])


def test_a_frozen_agents_model_needs_an_endpoint_without_a_stand_in(tmp_path: Path) -> None:
    bare = agl.Script(
        "bare",
        agent=parrot,
        tasks=questions,
        algorithm=lambda run: agl.Baseline(),
        resources=lambda run: {"checker_llm": run.llm},
    )
    with pytest.raises(agl.InvalidInputError, match=r"\['checker_llm'\] have no model"):
        bare.main(["--train", "--run-dir", str(tmp_path / "run"), "--quiet"])
