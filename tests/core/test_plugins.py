"""Plugins: real entry points of real (if tiny) installed distributions.

Each test writes distributions' ``.dist-info`` directories and modules to a temporary folder
and puts that folder on ``sys.path``, which is all ``importlib.metadata`` needs to find the
entry points, just as it finds those of a wheel pip installed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agl
from agl.cli import app
from agl.plugins import DISABLE_ENV, ENTRY_POINT_GROUP, PluginError, PluginInfo, PluginManager
from agl.store._memory import MemoryStore

Install = Callable[..., None]

FULL_PLUGIN = """
    from typing import Literal

    import agl
    from agl.store._memory import MemoryStore
    from agl.tracing._instrumentor import PatchingInstrumentor

    CALLS = []


    class Echo(agl.Algorithm):
        name = "echo"

        async def run(self, ctx):
            await ctx.run_rollouts(ctx.train_tasks)
            ctx.log(1, {"done": 1.0})


    class CountingInstrumentor(PatchingInstrumentor):
        def apply(self, undo):
            CALLS.append("instrument")
            undo.callback(CALLS.append, "uninstrument")


    class ScratchStore(MemoryStore):
        def __init__(self, url, **options):
            super().__init__()
            self.opened_with = (url, options)


    class Halves:
        def assign(self, calls, final_reward):
            return [final_reward / 2] * len(calls)


    class Weights(agl.Resource):
        type: Literal["agl-test-weights"] = "agl-test-weights"
        path: str


    @agl.hookimpl
    def agl_algorithms():
        return {"echo": Echo}


    @agl.hookimpl
    def agl_instrumentors():
        return {"counting": CountingInstrumentor}


    @agl.hookimpl
    def agl_stores():
        return {"scratch": ScratchStore}


    @agl.hookimpl
    def agl_credit_assigners():
        return {"halves": Halves}


    @agl.hookimpl
    def agl_resource_types():
        return [Weights]
"""

RECORDING_PLUGIN = """
    import agl

    EVENTS = []


    @agl.hookimpl
    def agl_rollout_start(rollout, attempt):
        EVENTS.append(("start", rollout.input, attempt.status.value))


    @agl.hookimpl(trylast=True)
    def agl_rollout_end(rollout, status):
        EVENTS.append(("end", rollout.input, None if status is None else status.value))


    @agl.hookimpl
    def agl_step_end(step, metrics):
        EVENTS.append(("step", step, dict(metrics)))
"""


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """Install distributions, each with the plugin modules given, into a folder on sys.path."""
    written: list[str] = []
    monkeypatch.delenv(DISABLE_ENV, raising=False)

    def install(
        modules: dict[str, str],
        entry_points: dict[str, str] | None = None,
        *,
        name: str = "agl-test-plugins",
        version: str = "1.2.3",
    ) -> None:
        root = tmp_path / name
        root.mkdir()
        for module, source in modules.items():
            (root / f"{module}.py").write_text(textwrap.dedent(source))
            written.append(module)
        dist_info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        points = entry_points or {module.replace("_", "-"): module for module in modules}
        lines = "".join(f"{point} = {value}\n" for point, value in points.items())
        (dist_info / "entry_points.txt").write_text(
            f"[{ENTRY_POINT_GROUP}]\n{lines}\n[console_scripts]\nnot-a-plugin = os:getcwd\n"
        )
        monkeypatch.syspath_prepend(str(root))

    yield install
    for module in written:
        sys.modules.pop(module, None)


def ours(found: list[PluginInfo]) -> dict[str, PluginInfo]:
    """The plugins these tests installed, among whatever else this environment has."""
    return {plugin.name: plugin for plugin in found if plugin.name.startswith("agl-t-")}


def plugin_log(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agl.plugins"]


# --- discovery ------------------------------------------------------------------------------------


def installed_plugins() -> list[PluginInfo]:
    return PluginManager().installed()


def test_the_built_in_plugin_comes_first_and_provides_core_names() -> None:
    builtin = installed_plugins()[0]
    assert (builtin.name, builtin.module, builtin.distribution, builtin.status) == (
        "agl",
        "agl._builtin_plugin",
        "agl-core",
        "ok",
    )
    assert builtin.builtin
    assert builtin.algorithms == ("baseline",)
    assert builtin.instrumentors == ("openai",)
    assert set(builtin.stores) == {"memory", "sqlite", "postgresql", "postgres", "http", "https"}
    assert set(builtin.credit_assigners) == {"final", "step", "discounted"}
    assert set(builtin.resource_types) == {"llm", "prompt_template"}
    assert PluginManager().lookup("agl_algorithms", "baseline") is agl.Baseline
    assert agl.hookimpl is agl.plugins.hookimpl


def test_an_installed_plugin_provides_everything_by_name(install: Install) -> None:
    install({"agl_t_full": FULL_PLUGIN})

    manager = PluginManager()
    info = ours(manager.installed())["agl-t-full"]
    assert info == PluginInfo(
        name="agl-t-full",
        module="agl_t_full",
        distribution="agl-test-plugins",
        version="1.2.3",
        algorithms=("echo",),
        instrumentors=("counting",),
        stores=("scratch",),
        credit_assigners=("halves",),
        resource_types=("agl-test-weights",),
    )
    module = sys.modules["agl_t_full"]
    assert manager.lookup("agl_algorithms", "echo") is module.Echo
    assert manager.provided("agl_algorithms")["baseline"] is agl.Baseline
    assert manager.lookup("agl_credit_assigners", "halves") is module.Halves
    assert isinstance(manager.create_credit_assigner("halves"), module.Halves)
    assert manager.provided("agl_stores")["scratch"] is module.ScratchStore
    assert manager.provided("agl_resource_types")["agl-test-weights"] is module.Weights
    raw = {"resources_id": "r", "version": 1, "resources": {"w": {"type": "agl-test-weights"}}}
    parsed = agl.ResourcesUpdate.model_validate(raw).resources["w"]
    assert type(parsed) is agl.GenericResource  # no process-wide registry is touched
    assert {name for name, _ in manager.list_name_plugin()} >= {"agl", "agl-t-full"}


def test_without_the_distribution_the_plugins_are_gone() -> None:
    assert ours(installed_plugins()) == {}
    with pytest.raises(agl.InvalidInputError, match="no algorithm named 'echo'"):
        PluginManager().lookup("agl_algorithms", "echo")


def test_an_unknown_name_lists_what_there_is(install: Install) -> None:
    install({"agl_t_full": FULL_PLUGIN})
    with pytest.raises(agl.InvalidInputError) as caught:
        PluginManager().lookup("agl_algorithms", "ecko")
    message = caught.value.message
    assert "no algorithm named 'ecko'" in message
    assert "'baseline', 'echo'" in message
    assert "did you mean 'echo'?" in message
    assert "`agl plugins`" in message
    assert (caught.value.field, caught.value.value) == ("algorithm", "ecko")


def test_each_manager_has_its_own_plugins(install: Install) -> None:
    module = type(sys)("agl_t_in_code")
    exec(textwrap.dedent(FULL_PLUGIN), module.__dict__)
    with_it, without = PluginManager([module]), PluginManager()
    assert with_it.lookup("agl_algorithms", "echo") is module.Echo
    assert "echo" not in without.provided("agl_algorithms")
    install({"agl_t_full": FULL_PLUGIN})  # installed after `without` was built
    assert "echo" not in without.provided("agl_algorithms")
    assert "echo" in PluginManager().provided("agl_algorithms")
    only_builtin = PluginManager(entry_points=False)
    assert [p.name for p in only_builtin.installed()] == ["agl"]


# --- broken plugins are skipped, with one line each -----------------------------------------------


def test_a_plugin_that_fails_to_import_is_skipped_with_one_log_line(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    install(
        {"agl_t_full": FULL_PLUGIN, "agl_t_broken": "import agl_no_such_dependency\n"},
        {"agl-t-full": "agl_t_full", "agl-t-broken": "agl_t_broken"},
    )

    manager = PluginManager()
    found = ours(manager.installed())
    broken = found["agl-t-broken"]
    assert broken.status == "skipped"
    assert broken.error is not None
    assert broken.error.startswith(
        "importing agl_t_broken failed: "
        "ModuleNotFoundError: No module named 'agl_no_such_dependency' (at "
    )
    assert broken.error.endswith("agl_t_broken.py:1)")
    assert found["agl-t-full"].status == "ok"
    assert manager.lookup("agl_algorithms", "echo").name == "echo"
    [line] = plugin_log(caplog)
    assert line == f"skipped agl plugin 'agl-t-broken' (agl-test-plugins 1.2.3): {broken.error}"


RAISING = """
    import agl

    @agl.hookimpl
    def agl_algorithms():
        return {"fine": agl.Baseline}

    @agl.hookimpl
    def agl_instrumentors():
        raise RuntimeError("no framework here")
"""


def test_a_plugin_whose_hook_raises_is_skipped_with_one_log_line(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    install({"agl_t_full": FULL_PLUGIN, "agl_t_raising": RAISING})

    manager = PluginManager()
    found = ours(manager.installed())
    raising = found["agl-t-raising"]
    assert raising.status == "skipped"
    assert raising.error is not None
    assert raising.error.startswith("agl_instrumentors() raised RuntimeError: no framework here")
    assert raising.error.endswith("agl_t_raising.py:10)")
    assert raising.algorithms == ()  # skipped whole: nothing of it is used
    assert "fine" not in manager.provided("agl_algorithms")
    assert "counting" in manager.provided("agl_instrumentors")
    [line] = plugin_log(caplog)
    assert "'agl-t-raising' (agl-test-plugins 1.2.3)" in line
    assert "\n" not in line


@pytest.mark.parametrize(
    ("hook_body", "problem"),
    [
        (
            "def agl_algorithms():\n    return [agl.Baseline]",
            "agl_algorithms() returned a list ([<class 'agl._train._algorithm.Baseline'>]), not a "
            "mapping of names to agl.Algorithm subclasses",
        ),
        (
            "def agl_algorithms():\n    return {'x': dict}",
            "agl_algorithms()['x'] is the class builtins.dict, not a subclass of agl.Algorithm",
        ),
        (
            "def agl_algorithms():\n    return {'x': agl.Algorithm}",
            "agl_algorithms()['x'] is the abstract class Algorithm (it does not implement run)",
        ),
        (
            "def agl_algorithms():\n    return {3: agl.Baseline}",
            "agl_algorithms() returned the name 3; names are non-empty strings",
        ),
        (
            "def agl_instrumentors():\n    return {'x': 'not callable'}",
            "agl_instrumentors()['x'] is a str ('not callable'), which is not callable",
        ),
        (
            "def agl_stores():\n    return {'Postgres DB': agl.open_store}",
            "agl_stores()['Postgres DB'] is not under a lowercase URL scheme",
        ),
        (
            "def agl_resource_types():\n    return [agl.Baseline]",
            "agl_resource_types() returned the class agl._train._algorithm.Baseline, not a "
            "subclass of agl.Resource",
        ),
    ],
)
def test_a_plugin_returning_the_wrong_type_is_skipped_with_one_log_line(
    install: Install, caplog: pytest.LogCaptureFixture, hook_body: str, problem: str
) -> None:
    install({"agl_t_wrong": "import agl\n\n@agl.hookimpl\n" + hook_body + "\n"})

    manager = PluginManager()
    wrong = ours(manager.installed())["agl-t-wrong"]
    assert wrong.status == "skipped"
    assert wrong.error is not None
    assert wrong.error.startswith(problem)
    assert manager.lookup("agl_algorithms", "baseline") is agl.Baseline
    [line] = plugin_log(caplog)
    assert line == f"skipped agl plugin 'agl-t-wrong' (agl-test-plugins 1.2.3): {wrong.error}"


# --- badly written plugins fail loudly ------------------------------------------------------------

MISSPELLED = """
    import agl

    @agl.hookimpl
    def agl_algoritms():
        return {}
"""


def test_a_misspelled_hook_fails_loudly_naming_the_plugin_and_the_hook(install: Install) -> None:
    install({"agl_t_misspelled": MISSPELLED})

    manager = PluginManager()
    with pytest.raises(PluginError) as caught:
        manager.check()
    message = caught.value.message
    assert "'agl-t-misspelled' (agl-test-plugins 1.2.3)" in message
    assert "agl_algoritms is not an agl hook (did you mean agl_algorithms?)" in message
    assert f"{DISABLE_ENV}=agl-t-misspelled" in message
    for hook in ("agl_algorithms", "agl_instrumentors"):
        with pytest.raises(PluginError):
            manager.provided(hook)
    with pytest.raises(PluginError):
        manager.open_store("scratch://x")
    assert isinstance(manager.open_store("memory://"), MemoryStore)  # core's own: no plugin
    info = ours(manager.installed())["agl-t-misspelled"]
    assert info.status == "invalid"
    manager.step_start("a", 1)  # firing hooks stays safe: the invalid plugin is not called


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        (
            "@agl.hookimpl\ndef agl_rollout_end(rollout, outcome):\n    pass\n",
            "agl_rollout_end: hookimpl definition: agl_rollout_end(rollout, outcome); "
            "Argument(s) {'outcome'} are declared in the hookimpl but can not be found in the "
            "hookspec",
        ),
        ("def agl_algorithms():\n    return {}\n", "agl_algorithms is not marked @agl.hookimpl"),
        (
            "@agl.hookimpl(wrapper=True)\ndef agl_algorithms():\n    return (yield)\n",
            "agl_algorithms is a hook wrapper",
        ),
    ],
)
def test_a_malformed_hook_fails_loudly(install: Install, source: str, problem: str) -> None:
    install({"agl_t_malformed": "import agl\n\n" + source})

    with pytest.raises(PluginError, match="'agl-t-malformed'") as caught:
        PluginManager().lookup("agl_algorithms", "baseline")
    assert problem in caught.value.message
    assert ours(installed_plugins())["agl-t-malformed"].status == "invalid"


def test_an_optional_hook_from_a_newer_agl_is_ignored(install: Install) -> None:
    install(
        {
            "agl_t_newer": """
                import agl

                @agl.hookimpl(optionalhook=True)
                def agl_some_future_hook():
                    return {}

                @agl.hookimpl
                def agl_algorithms():
                    return {"newer": agl.Baseline}
            """
        }
    )
    assert PluginManager().lookup("agl_algorithms", "newer") is agl.Baseline


def test_plugins_can_be_disabled_by_environment_and_in_code(
    install: Install, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    install({"agl_t_misspelled": MISSPELLED, "agl_t_full": FULL_PLUGIN})
    monkeypatch.setenv(DISABLE_ENV, "agl-t-misspelled, agl-other")
    caplog.set_level(logging.INFO, logger="agl.plugins")

    manager = PluginManager()
    found = ours(manager.installed())
    assert (found["agl-t-misspelled"].status, found["agl-t-misspelled"].error) == (
        "disabled",
        f"disabled by {DISABLE_ENV}",
    )
    assert "agl_t_misspelled" not in sys.modules  # not even imported
    assert manager.lookup("agl_algorithms", "echo").name == "echo"
    assert plugin_log(caplog) == [
        f"agl plugin 'agl-t-misspelled' (agl-test-plugins 1.2.3) is disabled by {DISABLE_ENV}"
    ]

    manager = PluginManager(disable=["agl-t-full"])
    found = ours(manager.installed())
    assert found["agl-t-full"].status == "disabled"
    assert found["agl-t-full"].error == "disabled in code"
    assert "echo" not in manager.provided("agl_algorithms")


def test_the_first_plugin_by_name_wins_a_duplicate_name_with_one_warning(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    second = """
        import agl

        class Other(agl.Baseline):
            name = "other"

        @agl.hookimpl
        def agl_algorithms():
            return {"echo": Other, "baseline": Other, "other": Other}
    """
    install({"agl_t_full": FULL_PLUGIN})
    install({"agl_t_second": second}, {"agl-t-second": "agl_t_second"}, name="agl-second")

    manager = PluginManager()
    found = ours(manager.installed())
    assert manager.lookup("agl_algorithms", "echo") is sys.modules["agl_t_full"].Echo
    assert manager.lookup("agl_algorithms", "baseline") is agl.Baseline  # built-in names stay
    assert manager.lookup("agl_algorithms", "other") is sys.modules["agl_t_second"].Other
    assert found["agl-t-second"].algorithms == ("other",)
    assert found["agl-t-second"].ignored == (
        "algorithm 'echo' (plugin 'agl-t-full' has it)",
        "algorithm 'baseline' (plugin 'agl' has it)",
    )
    assert plugin_log(caplog) == [
        "algorithm 'echo' is provided by agl plugins 'agl-t-full' (agl-test-plugins 1.2.3) and "
        "'agl-t-second' (agl-second 1.2.3); using 'agl-t-full''s",
        "algorithm 'baseline' is provided by agl plugins 'agl' (agl-core 0.1.0) and "
        "'agl-t-second' (agl-second 1.2.3); using 'agl''s",
    ]


def test_two_distributions_with_one_entry_point_name_keep_the_first(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    install({"agl_t_full": FULL_PLUGIN}, {"agl-t-same": "agl_t_full"})
    install({"agl_t_newer": MISSPELLED}, {"agl-t-same": "agl_t_newer"}, name="agl-again")

    found = [p for p in installed_plugins() if p.name == "agl-t-same"]
    assert [(p.module, p.status) for p in found] == [
        ("agl_t_full", "ok"),
        ("agl_t_newer", "skipped"),
    ]
    assert found[1].error == "another plugin already has the name 'agl-t-same'"
    assert len(plugin_log(caplog)) == 1


def test_a_plugin_added_in_code_is_checked_at_once(install: Install) -> None:
    module = type(sys)("agl_t_in_code")
    exec(textwrap.dedent(FULL_PLUGIN), module.__dict__)
    manager = PluginManager()
    assert manager.add(module).name == "agl_t_in_code"
    assert manager.lookup("agl_algorithms", "echo") is module.Echo
    assert manager.installed()[-1].name == "agl_t_in_code"

    bad = type(sys)("agl_t_bad_in_code")
    exec(textwrap.dedent(MISSPELLED), bad.__dict__)
    with pytest.raises(PluginError, match="agl_algoritms is not an agl hook"):
        manager.add(bad)
    assert "agl_t_bad_in_code" not in {p.name for p in manager.installed()}
    manager.check()  # the bad one was not kept
    with pytest.raises(PluginError, match="agl_algoritms is not an agl hook"):
        PluginManager([bad])


# --- what plugins provide, where it is used -------------------------------------------------------


def test_plugin_schemes_open_through_a_plugin_manager(install: Install) -> None:
    install({"agl_t_full": FULL_PLUGIN})

    store = PluginManager().open_store("scratch://somewhere", size=3)
    assert isinstance(store, MemoryStore)
    assert store.opened_with == ("scratch://somewhere", {"size": 3})  # type: ignore[attr-defined]
    assert isinstance(agl.plugins.open_store("scratch://x"), MemoryStore)  # what the CLI uses
    with pytest.raises(agl.InvalidInputError) as caught:
        PluginManager().open_store("mongodb://db")
    known = "['http', 'https', 'memory', 'postgres', 'postgresql', 'scratch', 'sqlite']"
    assert f"expected one of {known}" in (caught.value.message)
    with pytest.raises(agl.InvalidInputError, match=r"PluginManager\(\).open_store") as caught:
        agl.open_store("scratch://x")  # the store layer knows its own schemes only
    assert caught.value.field == "url"


def test_a_store_factory_returning_something_else_is_a_plugin_error(install: Install) -> None:
    install(
        {
            "agl_t_store": """
                import agl

                @agl.hookimpl
                def agl_stores():
                    return {"nothing": lambda url: {"url": url}}
            """
        }
    )
    with pytest.raises(PluginError, match=r"'nothing' store factory of plugin 'agl-t-store'"):
        PluginManager().open_store("nothing://x")


def test_a_plugins_resource_type_round_trips_and_the_runner_upgrades_it(
    install: Install, tmp_path: Path
) -> None:
    install({"agl_t_full": FULL_PLUGIN})
    assert "agl_t_full" not in sys.modules
    weights = {"type": "agl-test-weights", "path": "/ckpt/7"}
    raw = {"resources_id": "rs-1", "version": 1, "resources": {"w": weights}}
    generic = agl.ResourcesUpdate.model_validate(raw).resources["w"]
    assert isinstance(generic, agl.GenericResource)  # parsing loads no plugin
    assert "agl_t_full" not in sys.modules
    upgraded = PluginManager().upgrade_resources({"w": generic, "g": generic.model_copy()})
    assert type(upgraded["w"]) is sys.modules["agl_t_full"].Weights
    assert upgraded["w"].path == "/ckpt/7"  # type: ignore[attr-defined]
    seen: list[type] = []

    @agl.rollout
    def agent(task: int, resources: dict[str, agl.Resource]) -> float:
        seen.append(type(resources["w"]))
        return 1.0

    async def run() -> None:
        # A SQLite store parses what it reads back: the plugin's type comes back generic.
        async with agl.open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
            update = await store.add_resources({"w": generic})
            assert isinstance((await store.get_resources(None)).resources["w"],  # type: ignore[union-attr]
                              agl.GenericResource)  # fmt: skip
            await store.enqueue_rollouts(
                [agl.RolloutRequest(input=1, resources_id=update.resources_id)]
            )
            runner = agl.Runner(agent, store, handle_signals=False, max_rollouts=1)
            assert (await runner.run()).succeeded == 1

    asyncio.run(run())
    assert seen == [sys.modules["agl_t_full"].Weights]


def test_import_agl_stays_light() -> None:
    code = (
        "import sys, agl, agl.store\n"
        "agl.ResourcesUpdate.model_validate("
        "{'resources_id': 'r', 'version': 1, 'resources': {'p': {'type': 'prompt_template', "
        "'template': 'x'}}})\n"
        "print('pluggy' in sys.modules, 'agl.plugins' in sys.modules)\n"
        "import agl.plugins\n"
        "print('pluggy' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "False", "True"]


def test_instrumentors_come_from_plugins_and_the_runner_uses_them(install: Install) -> None:
    install({"agl_t_full": FULL_PLUGIN})

    async def run() -> None:
        async with MemoryStore() as store:
            await store.enqueue_rollouts([agl.RolloutRequest(input=1)])
            runner = agl.Runner(
                lambda task: 1.0, store, handle_signals=False, max_rollouts=1,
                instrument=["counting", "openai"],
            )  # fmt: skip
            stats = await runner.run()
            assert stats.succeeded == 1

    asyncio.run(run())
    assert sys.modules["agl_t_full"].CALLS == ["instrument", "uninstrument"]
    with pytest.raises(agl.InvalidInputError) as caught:
        agl.Runner(lambda task: 1.0, "memory://", instrument=["counting", "no-such-library"])
    message = caught.value.message
    assert "cannot instrument ['no-such-library']; known: [" in message
    assert "'counting'" in message
    assert "'openai'" in message  # and whatever instrumentors are installed here


def test_create_instrumentor_checks_what_the_factory_built(install: Install) -> None:
    install(
        {
            "agl_t_inst": """
                import agl

                @agl.hookimpl
                def agl_instrumentors():
                    return {"half": lambda tracer: object()}
            """
        }
    )
    with agl.Tracer(MemoryStore()) as tracer:
        from agl.tracing._openai import OpenAIInstrumentation

        manager = PluginManager()
        assert isinstance(manager.create_instrumentor("openai", tracer), OpenAIInstrumentation)
        with pytest.raises(PluginError, match="instrumentor 'half' of plugin 'agl-t-inst'"):
            manager.create_instrumentor("half", tracer)


# --- lifecycle hooks ------------------------------------------------------------------------------


def test_a_real_runner_fires_rollout_hooks_around_each_attempt(install: Install) -> None:
    install({"agl_t_recording": RECORDING_PLUGIN})
    assert PluginManager().implements("agl_rollout_start", "agl_rollout_end")

    @agl.rollout
    def agent(task: int) -> float:
        if task < 0:
            raise ValueError("negative")
        return 1.0

    async def run() -> agl.Runner:
        async with MemoryStore() as store:
            await store.enqueue_rollouts([agl.RolloutRequest(input=i) for i in (1, -1, 2)])
            runner = agl.Runner(agent, store, handle_signals=False, max_rollouts=3, concurrency=1)
            await runner.run()
            return runner

    asyncio.run(run())
    events = sys.modules["agl_t_recording"].EVENTS
    assert events == [
        ("start", 1, "preparing"),
        ("end", 1, "succeeded"),
        ("start", -1, "preparing"),
        ("end", -1, "failed"),
        ("start", 2, "preparing"),
        ("end", 2, "succeeded"),
    ]


def test_rollout_end_follows_an_attempt_the_runner_releases(install: Install) -> None:
    install({"agl_t_recording": RECORDING_PLUGIN})

    async def run() -> None:
        started = asyncio.Event()

        @agl.rollout
        async def agent(task: int) -> float:
            started.set()
            await asyncio.sleep(60)
            return 1.0

        async with MemoryStore() as store:
            await store.enqueue_rollouts([agl.RolloutRequest(input=7)])
            runner = agl.Runner(agent, store, handle_signals=False, poll_wait=0.1)
            running = asyncio.create_task(runner.run())
            await asyncio.wait_for(started.wait(), 10)
            runner.stop(drain=False)
            stats = await running
            assert stats.released == 1

    asyncio.run(run())
    assert sys.modules["agl_t_recording"].EVENTS == [
        ("start", 7, "preparing"),
        ("end", 7, "released"),
    ]


def test_a_runner_without_rollout_hooks_does_not_look_for_them(install: Install) -> None:
    install({"agl_t_full": FULL_PLUGIN})
    assert not PluginManager().implements("agl_rollout_start", "agl_rollout_end")
    runner = agl.Runner(lambda task: 1.0, "memory://")
    assert runner._observed is False


def test_a_hook_call_reaches_every_plugin_and_survives_a_raising_one(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    failing = """
        import agl

        @agl.hookimpl(tryfirst=True)
        def agl_step_end(algorithm, step, metrics):
            raise KeyError("loss")
    """
    install({"agl_t_recording": RECORDING_PLUGIN, "agl_t_failing": failing})

    manager = PluginManager()
    for step in (1, 2):
        manager.hook.agl_step_end(algorithm="echo", step=step, metrics={"loss": 0.5})
    assert sys.modules["agl_t_recording"].EVENTS == [
        ("step", 1, {"loss": 0.5}),
        ("step", 2, {"loss": 0.5}),
    ]
    [record] = [r for r in caplog.records if r.name == "agl.plugins"]
    assert record.getMessage().startswith(
        "agl plugin 'agl-t-failing': agl_step_end raised KeyError: 'loss' (at "
    )
    assert record.exc_info is not None
    with pytest.raises(agl.InvalidInputError, match="not agl lifecycle hooks"):
        manager.implements("agl_step_ended")


# --- agl plugins ----------------------------------------------------------------------------------


def test_cli_plugins_table(install: Install) -> None:
    install(
        {"agl_t_full": FULL_PLUGIN, "agl_t_broken": "import agl_no_such_dependency\n"},
        {"agl-t-full": "agl_t_full", "agl-t-broken": "agl_t_broken"},
    )
    result = CliRunner().invoke(app, ["plugins"], env={"COLUMNS": "250", "FORCE_COLOR": None})

    assert result.exit_code == 0, result.output
    rows: dict[str, list[str]] = {}
    name = ""
    for line in result.stdout.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) == 5:
            name = cells[0] or name
            rows.setdefault(name, []).append(" ".join(cells[1:]))
    full = " ".join(rows["agl-t-full"])
    for expected in (
        "agl_t_full", "agl-test-plugins 1.2.3", "algorithms: echo", "instrumentors: counting",
        "stores: scratch", "credit assigners: halves", "resource types: agl-test-weights", "ok",
    ):  # fmt: skip
        assert expected in full
    broken = " ".join(rows["agl-t-broken"])
    assert "skipped: importing agl_t_broken failed: ModuleNotFoundError" in broken
    assert "algorithms: baseline" in " ".join(rows["agl"])


def test_cli_plugins_json(install: Install, monkeypatch: pytest.MonkeyPatch) -> None:
    install(
        {"agl_t_recording": RECORDING_PLUGIN, "agl_t_misspelled": MISSPELLED},
        {"agl-t-recording": "agl_t_recording", "agl-t-misspelled": "agl_t_misspelled"},
    )
    result = CliRunner().invoke(app, ["plugins", "--json"])

    assert result.exit_code == 1  # an invalid plugin: agl refuses to run
    data = json.loads(result.stdout)
    assert data["group"] == ENTRY_POINT_GROUP
    found = {plugin["name"]: plugin for plugin in data["plugins"]}
    assert found["agl-t-recording"] == {
        "name": "agl-t-recording",
        "module": "agl_t_recording",
        "distribution": "agl-test-plugins",
        "version": "1.2.3",
        "error": None,
        "status": "ok",
        "builtin": False,
        "algorithms": [],
        "instrumentors": [],
        "stores": [],
        "credit_assigners": [],
        "resource_types": [],
        "hooks": ["agl_rollout_start", "agl_rollout_end", "agl_step_end"],
        "ignored": [],
        "unmet_requirements": [],
    }
    assert found["agl-t-misspelled"]["status"] == "invalid"
    assert "did you mean agl_algorithms?" in found["agl-t-misspelled"]["error"]
    assert f"{DISABLE_ENV}=agl-t-misspelled" in result.stderr

    monkeypatch.setenv(DISABLE_ENV, "agl-t-misspelled")
    result = CliRunner().invoke(app, ["plugins", "--json"])
    assert result.exit_code == 0
    found = {plugin["name"]: plugin for plugin in json.loads(result.stdout)["plugins"]}
    assert found["agl-t-misspelled"]["status"] == "disabled"


def test_hook_errors_are_loud_but_installed_plugins_never_raises(install: Install) -> None:
    install({"agl_t_misspelled": MISSPELLED})
    assert {p.name: p.status for p in installed_plugins()}["agl-t-misspelled"] == "invalid"
    with pytest.raises(PluginError):
        agl.Runner(lambda task: 1.0, "memory://")


def test_one_module_under_two_names_is_used_once(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    install({"agl_t_full": FULL_PLUGIN}, {"agl-t-a": "agl_t_full", "agl-t-b": "agl_t_full"})

    manager = PluginManager()
    found = ours(manager.installed())
    assert found["agl-t-a"].status == "ok"
    assert found["agl-t-b"].status == "skipped"
    assert found["agl-t-b"].error is not None
    assert "already registered" in found["agl-t-b"].error
    assert manager.lookup("agl_algorithms", "echo") is sys.modules["agl_t_full"].Echo
    assert manager.has_plugin("agl-t-a")
    assert len(plugin_log(caplog)) == 1
