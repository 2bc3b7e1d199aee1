"""What the examples' tests share: loading an example's modules, an agl-torch algorithm that
keeps what it trained on, the checks of an RL run's batches (and of one that trains one agent
of several), and the programs the CLI agents example runs."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import agl
from agl.lightning import TransitionBatch, agent_stats, extract_calls
from agl.testing.openai_server import OpenAIServer

# litellm (under the ADK example's LiteLlm model) reads its model cost map from the network
# when it is imported, unless told to read the copy it ships
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@dataclass
class Recorded:
    """:attr:`algorithm` is LightningRLTorch keeping every step's transitions (``.batches``);
    each one built is appended to :attr:`instances`."""

    algorithm: type[Any]
    instances: list[Any] = field(default_factory=list)


@pytest.fixture
def recorded_rl() -> Recorded:
    from agl_torch.rl import LightningRLTorch

    recorded = Recorded(LightningRLTorch)

    class Recording(LightningRLTorch):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.batches: list[TransitionBatch | None] = []
            recorded.instances.append(self)

        async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> Mapping[str, Any]:
            self.batches.append(batch.transitions)
            return await super().step(ctx, batch)

    recorded.algorithm = Recording
    return recorded


class Example:
    """An example's modules, loaded from its folder: ``example.run``, ``example.stand_in``, ...

    The example's modules import each other by their plain names, so its folder goes on
    ``sys.path`` and its uniquely named modules are imported as they are; ``run`` and
    ``stand_in``, which every example has, are loaded under names of their own
    (``<folder>_run``), and every module of the example that imports ``stand_in`` while it loads
    gets this example's (:meth:`own_stand_in`), whichever example was loaded before.
    Use :func:`load`, which loads each example once per process.
    """

    SHARED = ("stand_in", "run")

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.modules: dict[str, ModuleType] = {}
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        self._load("stand_in")
        with self.own_stand_in():
            for path in sorted(folder.glob("*.py")):
                if path.stem not in self.SHARED:
                    self.modules[path.stem] = importlib.import_module(path.stem)
                    where = Path(str(self.modules[path.stem].__file__)).parent
                    assert where == folder, f"{path.stem} is not {folder.name}'s but {where}'s"
        self._load("run")

    def __getattr__(self, name: str) -> ModuleType:
        try:
            return self.modules[name]
        except KeyError:
            raise AttributeError(name) from None

    def _load(self, name: str) -> None:
        alias = f"{self.folder.name}_{name}"
        spec = importlib.util.spec_from_file_location(alias, self.folder / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module  # dataclasses look their module up
        self.modules[name] = module
        with self.own_stand_in():
            spec.loader.exec_module(module)

    @contextlib.contextmanager
    def own_stand_in(self) -> Iterator[None]:
        """``import stand_in`` gives this example's while it lasts."""
        before = sys.modules.get("stand_in")
        sys.modules["stand_in"] = self.modules["stand_in"]
        try:
            yield
        finally:
            if before is None:
                sys.modules.pop("stand_in", None)
            else:
                sys.modules["stand_in"] = before


# Under the suite's -W error: LlamaIndex's workflows list a workflow's members with
# inspect.getmembers, which reads deprecated attributes of the pydantic models its agents are;
# openinference reads an LLM's metadata with pydantic's deprecated .json(), inside its span
# handler (whose errors LlamaIndex swallows, losing the span). Theirs to fix; nothing recorded
# changes.
LLAMA_INDEX_WARNINGS = [
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20:inspect"),
    pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211:inspect"),
    pytest.mark.filterwarnings(
        "ignore:The `json` method is deprecated:pydantic.warnings.PydanticDeprecatedSince20"
        ":openinference"
    ),
]
"""The warnings the LlamaIndex example's tests ignore."""

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@functools.cache
def load(name: str) -> Example:
    """The example in ``examples/<name>``, loaded once per process: ``load("crewai_products")``."""
    return Example(EXAMPLES / name)


def dev_run(
    example: Example,
    tasks: Sequence[Mapping[str, Any]],
    plan: Mapping[str, str],
    run_dir: Path,
    *,
    agents: Sequence[str] = (),
    zero_for: str = "wrong",
) -> tuple[agl.FitResult, OpenAIServer]:
    """Run the example's agent once over ``tasks`` (:meth:`agl.Script.dev`) against its
    stand-in following ``plan`` and check the run: every rollout succeeded, in the tasks' order,
    rewarded 0 where the plan says ``zero_for`` and 1 elsewhere. ``agents``: each rollout's LLM
    calls by agent, in order (each with its response id); the calls per agent then add up to
    the requests the stand-in served."""
    with OpenAIServer(example.stand_in.script(tasks, plan)) as server:
        llm = agl.LLM(endpoint=server.url, model="stand-in")
        result = example.run.SCRIPT.dev(tasks, llm, run_dir=run_dir, console=False)
    assert [r.rollout.input["id"] for r in result.results] == [t["id"] for t in tasks]
    assert all(r.succeeded for r in result.results), [r.error for r in result.results]
    rewards = [0.0 if plan[t["id"]] == zero_for else 1.0 for t in tasks]
    assert [r.reward for r in result.results] == rewards
    if agents:
        for task, outcome in zip(tasks, result.results, strict=True):
            calls = extract_calls(outcome.spans).calls
            assert [call.agent for call in calls] == list(agents), task["id"]
            assert all(call.response_id for call in calls), task["id"]
        stats = agent_stats(result.results)
        expected = {agent: n * len(tasks) for agent, n in Counter(agents).items()}
        assert {agent: s.calls for agent, s in stats.items()} == expected
        # A client that timed out on a loaded machine sends the same request again: the calls
        # made are the distinct requests (a CI run of the ADK example at load 6-17 saw 32
        # requests for 24 calls, each question's three calls all there and attributed).
        requests = {json.dumps(r.body, sort_keys=True) for r in server.requests}
        assert sum(expected.values()) == len(requests)
    return result, server


@pytest.fixture
def crewai_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CrewAI example traces CrewAI with agl-crewai; CrewAI keeps its files in ``tmp_path``."""
    pytest.importorskip(
        "agl_crewai",
        reason="the example needs the agl-crewai adapter (packages/agl-crewai), which names "
        "each task's calls after its agent",
    )
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data-home"))


def cli_packages() -> dict[str, str]:
    """The npm package of each program the CLI agents example runs, by its command name, at
    the version agl names in its install hints (``setup.sh`` installs the same)."""
    agents = load("cli_agents").cli_programs.CliAgents().agents.values()
    return {a.harness.executable: a.harness.install.split()[-1] for a in agents}


@pytest.fixture
def cli_programs(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Claude Code and the Codex CLI on ``PATH``: the folder that holds them.

    Installed with npm once (about 400 MB) into a cache folder, ``$AGL_CLI_AGENTS_CACHE``, else
    ``~/.cache/agl-tests/cli-agents``; the test is skipped where npm is missing.
    """
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the example's programs install with npm")
    default = Path.home() / ".cache" / "agl-tests" / "cli-agents"
    cache = Path(os.environ.get("AGL_CLI_AGENTS_CACHE", default))
    bin_dir = cache / "node_modules" / ".bin"
    packages = cli_packages()
    versions = {name: package.rsplit("@", 1)[1] for name, package in packages.items()}
    if not all(_version(bin_dir / name).startswith(v) for name, v in versions.items()):
        cache.mkdir(parents=True, exist_ok=True)
        install = ["npm", "install", "--prefix", str(cache), "--no-audit", "--no-fund"]
        subprocess.run(
            [*install, *packages.values()],
            check=True,
            timeout=600,
        )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return bin_dir


def _version(program: Path) -> str:
    if not program.exists():
        return ""
    done = subprocess.run(
        [program, "--version"], check=False, capture_output=True, text=True, timeout=60
    )
    return done.stdout.strip().removeprefix("codex-cli ")


def _adapter(module: str, names: str) -> Any:
    """A fixture that skips a test when the adapter it traces its example with is missing."""
    package = module.replace("_", "-")

    @pytest.fixture
    def adapter() -> None:
        reason = (
            f"the example needs the {package} adapter (packages/{package}), which names {names}"
        )
        pytest.importorskip(module, reason=reason)

    return adapter


autogen_adapter = _adapter("agl_autogen", "each agent turn's calls after the agent")
agents_adapter = _adapter("agl_openai_agents", "each agent turn's calls after the agent")
langchain_adapter = _adapter("agl_langchain", "each LangGraph node's calls after the node")


def check_rl_batches(
    algorithm: Any,
    run_dir: Path,
    model: Path,
    prompts: Mapping[str, Sequence[str]],
    *,
    absent: Sequence[str] = (),
    asked: Sequence[str] = (),
    off_gateway: int | None = 0,
) -> list[dict[str, Any]]:
    """Check an RL run of two steps batch by batch; return the two steps' metrics rows.

    ``algorithm`` keeps each step's transitions (:func:`recorded_rl`); ``model`` is the
    policy's folder (its tokenizer decodes the prompts). Each step updated the policy once, on
    transitions of the agents in ``prompts`` only, each with its response's logprobs and a
    prompt that holds every text ``prompts`` gives its agent, none of ``absent`` and, when
    given, one of ``asked`` (the tasks' questions). Every call joined with the gateway's
    record on its response id, but ``off_gateway`` calls made on a model of their own (None:
    as many as the other agents' calls); every call is a transition but the empty replies a
    random-weight model may give.
    """
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(model)
    rows = [row for row in agl.read_metrics(run_dir) if "actor/updates" in row]
    assert [row["actor/updates"] for row in rows] == [1.0, 2.0]
    assert len(algorithm.batches) == 2
    for row, batch in zip(rows, algorithm.batches, strict=True):
        assert batch is not None
        report = batch.report
        for note in ("joined_by_order", "gateway_only"):
            assert report.notes[note] == 0, (note, report.notes)
        alone = report.notes["other_agents_calls"] if off_gateway is None else off_gateway
        assert report.notes["instrumented_only"] == alone, report.notes
        assert len(batch) + report.dropped_calls["empty_response"] == report.calls_seen
        by_agent = Counter(transition.agent for transition in batch)
        assert set(by_agent) <= set(prompts), by_agent
        assert {a: row.get(f"agents/{a}/transitions", 0) for a in prompts} == {
            a: by_agent[a] for a in prompts
        }
        for transition in batch:
            assert transition.response_logprobs is not None
            assert len(transition.response_logprobs) == len(transition.response_ids) > 0
            prompt = tokenizer.decode(transition.prompt_ids)
            assert all(text in prompt for text in prompts[transition.agent])
            assert not any(text in prompt for text in absent)
            assert not asked or any(question in prompt for question in asked)
    return rows


def check_one_agent_trained(
    algorithm: Any,
    run_dir: Path,
    trained: str,
    frozen: str,
    prompt_marker: str,
    *,
    tasks: Sequence[Mapping[str, Any]] = (),
    frozen_off_gateway: bool = False,
) -> None:
    """Check an RL run of two steps that trained ``trained`` and left ``frozen`` alone
    (:func:`check_rl_batches`, the policy in ``run_dir/tiny-model``).

    ``tasks``: what it trained on (each transition's prompt asks one's ``question``).
    ``frozen_off_gateway``: the frozen agent calls a model of its own, not through agl's
    gateway, so its calls have no token ids (and only its calls).
    """
    rows = check_rl_batches(
        algorithm,
        run_dir,
        run_dir / "tiny-model",
        {trained: [prompt_marker]},
        asked=[task["question"] for task in tasks],
        off_gateway=None if frozen_off_gateway else 0,
    )
    for row, batch in zip(rows, algorithm.batches, strict=True):
        assert batch.report.notes["other_agents_calls"] >= 1  # the frozen agent's
        assert len(batch) >= 1
        assert row[f"agents/{trained}/calls"] == batch.report.calls_seen
        assert row[f"agents/{frozen}/calls"] >= 1
        assert f"agents/{frozen}/transitions" not in row


def train_example(
    run: ModuleType, algorithms: str, tasks: Sequence[Any], run_dir: Path, algorithm: type[Any]
) -> agl.FitResult:
    """Train as an example's ``run.py --train --steps 2`` does, on ``tasks``, with
    ``algorithm`` (a recording LightningRLTorch) in place of LightningRLTorch: ``algorithms``
    names the example's function that maps its agents to algorithms."""
    script = run.SCRIPT
    with script.model(None, "stand-in", script.tasks("train")) as llm:
        settings = agl.ScriptRun(
            run_dir=run_dir, split="train", tasks=list(tasks), steps=2, console=False, llm=llm
        )
        chosen = functools.partial(getattr(run, algorithms), algorithm=algorithm)
        return dataclasses.replace(script, algorithm=chosen).fit(settings)
