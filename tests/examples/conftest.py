"""What the examples' tests share: loading an example's modules, an agl-torch algorithm that
keeps what it trained on, and the checks of an RL run that trains one agent of several."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import agl
from agl.lightning import TransitionBatch


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
    ``stand_in``, which every example has, are loaded under names of their own.
    """

    def __init__(self, folder: Path, unique: Sequence[str]) -> None:
        self.folder = folder
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        self.modules = {name: importlib.import_module(name) for name in unique}
        for name in ("stand_in", "run"):
            self.modules[name] = self._load(name, f"{folder.name}_{name}")

    def __getattr__(self, name: str) -> ModuleType:
        try:
            return self.modules[name]
        except KeyError:
            raise AttributeError(name) from None

    def _load(self, name: str, alias: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(alias, self.folder / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module  # dataclasses look their module up
        with self.own_stand_in() if name == "run" else contextlib.nullcontext():
            spec.loader.exec_module(module)
        return module

    @contextlib.contextmanager
    def own_stand_in(self) -> Iterator[None]:
        """``import stand_in`` gives this example's while it lasts."""
        before = sys.modules.get("stand_in")
        if "stand_in" in self.modules:
            sys.modules["stand_in"] = self.modules["stand_in"]
        try:
            yield
        finally:
            if before is None:
                sys.modules.pop("stand_in", None)
            else:
                sys.modules["stand_in"] = before


@pytest.fixture(scope="session")
def load_example() -> Callable[[str, Sequence[str]], Example]:
    """``load_example("crewai_products", ["products", "support_crew"])``: an :class:`Example`."""

    def load(name: str, unique: Sequence[str]) -> Example:
        return Example(Path(__file__).resolve().parents[2] / "examples" / name, unique)

    return load


@pytest.fixture
def check_one_agent_trained() -> Callable[..., None]:
    """Check an RL run of two steps that trained ``trained`` and left ``frozen`` alone."""

    def check(
        algorithm: Any,
        run_dir: Path,
        trained: str,
        frozen: str,
        prompt_marker: str,
        *,
        frozen_off_gateway: bool = False,
    ) -> None:
        """``frozen_off_gateway``: the frozen agent calls a model of its own, not through agl's
        gateway, so its calls have no token ids (and only its calls)."""
        from transformers import AutoTokenizer

        tokenizer: Any = AutoTokenizer.from_pretrained(run_dir / "tiny-model")
        assert len(algorithm.batches) == 2
        for batch in algorithm.batches:
            assert batch is not None
            report = batch.report
            # every call joined with the gateway's records on its response id, counted once
            for note in ("joined_by_order", "gateway_only", "instrumented_only"):
                if note == "instrumented_only" and frozen_off_gateway:
                    assert report.notes[note] == report.notes["other_agents_calls"]
                    continue
                assert report.notes[note] == 0, (note, report.notes)
            assert report.notes["other_agents_calls"] >= 1  # the frozen agent's
            assert len(batch) >= 1
            for transition in batch:
                assert transition.agent == trained
                assert transition.response_logprobs is not None
                assert len(transition.response_logprobs) == len(transition.response_ids) > 0
                assert prompt_marker in tokenizer.decode(transition.prompt_ids)
        rows = [row for row in agl.read_metrics(run_dir) if "actor/updates" in row]
        assert [row["actor/updates"] for row in rows] == [1.0, 2.0]
        assert all(row[f"agents/{frozen}/calls"] >= 1 for row in rows)
        assert [row[f"agents/{trained}/transitions"] for row in rows] == [
            len(b) for b in algorithm.batches
        ]
        assert not any(f"agents/{frozen}/transitions" in row for row in rows)

    return check


def train_example(
    run: ModuleType, algorithms: str, tasks: Sequence[Any], run_dir: Path, algorithm: type[Any]
) -> agl.FitResult:
    """Train as an example's ``run.py --train --steps 2`` does, on ``tasks``, with
    ``algorithm`` (a recording LightningRLTorch) in place of LightningRLTorch: ``algorithms``
    names the example's function that maps its agents to algorithms."""
    script = run.SCRIPT
    with script.model(None, "stand-in", "train") as llm:
        settings = agl.ScriptRun(
            run_dir=run_dir, split="train", tasks=list(tasks), steps=2, console=False, llm=llm
        )
        chosen = functools.partial(getattr(run, algorithms), algorithm=algorithm)
        return dataclasses.replace(script, algorithm=chosen).fit(settings)
